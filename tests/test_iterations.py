"""Iterations (ingest/iterations.py): key ranges, windows, warm-up, op assignment, statistics.

Hand-built ``ranges`` frames with round numbers; every boundary is worked out in a comment.
"""

from __future__ import annotations

import pandas as pd
import pytest

from builders import START_END, ranges
from dlprof_lite.errors import InputError
from dlprof_lite.ingest.columns import check_frame
from dlprof_lite.ingest.iterations import assign_iterations, find_iterations
from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.report.steps.stats import iteration_stats
from dlprof_lite.rules.iterations import HIGH_VARIANCE_CV

NA = pd.NA
OURS = "dlprof-lite"


def annotated(optimizer: bool = True) -> pd.DataFrame:
    """Our iterations and phases, start/end ranges (top-level) as the annotation writes them."""
    it = {"domain": OURS, "style": START_END}
    rows: list[tuple] = [
        ("iteration", 100, 190, -1, it),  # instance 0: [100, 190]
        ("forward", 110, 150, -1, it),
        ("iteration", 200, 310, -1, it),  # instance 1 ends at 310
        ("iteration", 310, 400, -1, it),  # instance 2 ends at 400
        ("iteration", 400, 520, -1, it),  # instance 3 ends at 520
        # Same name in the default domain: not our annotation, ignored.
        ("iteration", 600, 700, -1),
    ]
    if optimizer:  # one optimizer phase at the end of each instance (a training step)
        steps = [i for i, r in enumerate(rows) if r[0] == "iteration" and r[4:]]
        rows += [("optimizer", rows[i][2] - 5, rows[i][2], -1, it) for i in steps]
    return ranges(rows)


def test_annotation_iteration_range_is_the_default_key() -> None:
    table, name, source = find_iterations(annotated())
    check_frame(table, "iterations", derived=False)
    assert (name, source) == ("iteration", "annotation")
    # Iteration 0 starts where the first key instance starts (100); each later one starts at
    # the END of the previous instance, so the gap 190..200 belongs to iteration 1.
    assert table["start_ns"].tolist() == [100, 190, 310, 400]
    assert table["end_ns"].tolist() == [190, 310, 400, 520]
    assert table["wall_ns"].tolist() == [90, 120, 90, 120]
    # 4 >= 3 iterations and no window: iteration 0 is the default warm-up; all in window.
    assert table["warmup"].tolist() == [True, False, False, False]
    assert table["in_window"].tolist() == [True] * 4


def test_an_iteration_that_never_reaches_the_optimizer_is_dropped() -> None:
    it = {"domain": OURS, "style": "start_end"}
    table, _, _ = find_iterations(
        ranges(
            [
                ("iteration", 100, 200, -1, it),
                ("optimizer", 180, 195, -1, it),  # inside step 0
                ("iteration", 200, 300, -1, it),
                ("optimizer", 290, 299, -1, it),  # inside step 1
                # The script fetched a batch and left its loop: nsys closes this one at
                # the session end (900) and it holds no optimizer phase.
                ("iteration", 300, 900, -1, it),
                ("data", 300, 310, -1, it),
            ]
        )
    )
    assert table["end_ns"].tolist() == [200, 300]


def test_without_optimizer_phases_every_iteration_counts() -> None:
    # No optimizer ranges at all: the annotation's iterations are inference calls, a guess.
    table, name, source = find_iterations(annotated(optimizer=False))
    assert len(table) == 4 and (name, source) == ("iteration", "root-model-calls")


def test_windows_and_warmup() -> None:
    table, _, _ = find_iterations(annotated(), steps=StepSelection(iter_start=1, iter_stop=3))
    assert table["warmup"].tolist() == [True, False, False, False]  # before --iter-start 1
    assert table["in_window"].tolist() == [False, True, True, False]  # 1, 2; 3 is the stop
    table, _, _ = find_iterations(annotated(), steps=StepSelection(iter_start=2))
    assert table["warmup"].tolist() == [True, True, False, False]
    assert table["in_window"].tolist() == [False, False, True, True]
    # Only a stop: nothing is before the window, so nothing is warm-up.
    table, _, _ = find_iterations(annotated(), steps=StepSelection(iter_stop=2))
    assert table["warmup"].tolist() == [False] * 4
    assert table["in_window"].tolist() == [True, True, False, False]


def test_two_iterations_have_no_default_warmup() -> None:
    it = {"domain": OURS, "style": START_END}
    table, _, _ = find_iterations(
        ranges([("iteration", 0, 10, -1, it), ("iteration", 10, 30, -1, it)])
    )
    assert table["warmup"].tolist() == [False, False]


@pytest.mark.parametrize(
    ("start", "stop", "words"),
    [(-1, None, "--iter-start"), (3, 3, "--iter-stop"), (2, 1, "--iter-stop"), (7, None, "none")],
)
def test_bad_windows(start: int | None, stop: int | None, words: str) -> None:
    with pytest.raises(InputError, match=words):
        find_iterations(annotated(), steps=StepSelection(iter_start=start, iter_stop=stop))


def test_regex_key_over_numbered_ranges() -> None:
    frame = ranges(
        [
            ("step 0", 0, 100, -1),
            ("fwd", 10, 50, 0),
            ("step 1", 100, 250, -1),
            ("step 2", 250, 300, -1),
            ("checkpoint", 300, 400, -1),
        ]
    )
    table, name, source = find_iterations(frame, steps=StepSelection(key_range=r"^step \d+$"))
    assert (name, source) == (r"^step \d+$", "key-range")  # several names: the regex
    assert table["end_ns"].tolist() == [100, 250, 300]
    assert table["wall_ns"].tolist() == [100, 150, 50]  # 100-0, 250-100, 300-250
    _, name, _ = find_iterations(frame, steps=StepSelection(key_range="check"))
    assert name == "checkpoint"  # one name matched: the name itself


def test_regex_matching_nested_ranges_keeps_the_outer_ones() -> None:
    frame = ranges([("train a", 0, 100, -1), ("train b", 10, 20, 0), ("train c", 100, 180, -1)])
    table, _, _ = find_iterations(frame, steps=StepSelection(key_range="train"))
    # "train b" starts inside "train a": not a boundary. Ends 100 and 180.
    assert table["end_ns"].tolist() == [100, 180]


def test_regex_that_matches_nothing_names_top_level_ranges() -> None:
    with pytest.raises(InputError, match=r"matches no NVTX range.*'step 0'"):
        find_iterations(ranges([("step 0", 0, 10, -1), ("step 1", 10, 20, -1)]),
                        steps=StepSelection(key_range="epoch"))  # fmt: skip
    with pytest.raises(InputError, match="not a valid regular expression"):
        find_iterations(ranges([("step 0", 0, 10, -1)]), steps=StepSelection(key_range="("))


def test_most_repeated_top_level_range() -> None:
    cublas = {"domain": "cuBLAS"}
    frame = ranges(
        [
            ("setup", 0, 50, -1),  # once: never a key
            ("cublasSgemm", 50, 55, -1, cublas),  # 5 top-level instances, but a library domain
            ("cublasSgemm", 55, 60, -1, cublas),
            ("cublasSgemm", 60, 65, -1, cublas),
            ("cublasSgemm", 65, 70, -1, cublas),
            ("cublasSgemm", 70, 75, -1, cublas),
            ("train_step", 100, 140, -1),  # 3 instances, first at 100
            ("inner", 101, 102, 6),  # 4 instances, but nested: not top level
            ("inner", 103, 104, 6),
            ("log", 150, 160, -1),  # 3 instances too, first at 150: loses the tie
            ("train_step", 200, 240, -1),
            ("inner", 201, 202, 10),
            ("inner", 203, 204, 10),
            ("log", 250, 260, -1),
            ("train_step", 300, 340, -1),
            ("log", 350, 360, -1),
        ]
    )
    table, name, source = find_iterations(frame)
    assert (name, source) == ("train_step", "most-repeated")
    assert table["end_ns"].tolist() == [140, 240, 340]
    assert table["start_ns"].tolist() == [100, 140, 240]


def test_op_markers_and_single_thread_repeats_are_no_iteration() -> None:
    payload = "{'mod': 'Tensor', 'op': 'cuda', 'args': []}"
    frame = ranges(
        [
            (payload, 0, 5, -1),  # a PyProf payload repeated 3 times: one op call each
            (payload, 5, 10, -1),
            (payload, 10, 15, -1),
            ("aten::add_, seq = 2", 20, 25, -1),  # emit_nvtx ops, top level without modules
            ("aten::add_, seq = 2", 30, 35, -1),
            ("fwd:model:Net", 40, 50, -1),  # our module ranges are layers, not steps
            ("fwd:model:Net", 60, 70, -1),
            ("compile", 80, 90, -1, {"tid": 2}),  # once on each of two threads: no repeat
            ("compile", 80, 95, -1, {"tid": 3}),
        ]
    )
    table, name, source = find_iterations(frame)
    assert (name, source) == (None, "none") and table.empty


def test_library_ranges_are_used_when_nothing_else_repeats() -> None:
    cublas = {"domain": "cuBLAS"}
    frame = ranges([("gemm", 0, 5, -1, cublas), ("gemm", 10, 15, -1, cublas), ("x", 20, 30, -1)])
    _, name, source = find_iterations(frame)
    assert (name, source) == ("gemm", "most-repeated")


def test_no_key_range() -> None:
    table, name, source = find_iterations(ranges([("setup", 0, 10, -1), ("run", 10, 20, -1)]))
    assert (name, source) == (None, "none") and table.empty
    check_frame(table, "iterations", derived=False)
    table, name, source = find_iterations(ranges([]))
    assert (name, source) == (None, "none") and table.empty


def test_thread_with_most_instances_and_unclosed_instances() -> None:
    it = {"domain": OURS}
    frame = ranges(
        [
            ("iteration", 0, 100, -1, it),  # tid 1: 3 closed instances
            ("iteration", 5, 50, -1, {"domain": OURS, "tid": 2}),  # tid 2: 2 instances
            ("iteration", 60, 90, -1, {"domain": OURS, "tid": 2}),
            ("iteration", 100, 200, -1, it),
            ("iteration", 200, 300, -1, it),
            # tid 1's fourth push was never popped (end = session end): no boundary.
            ("iteration", 300, 1000, -1, {"domain": OURS, "closed": False}),
        ]
    )
    table, _, _ = find_iterations(frame)
    assert table["end_ns"].tolist() == [100, 200, 300]


def ops(launch: list[int | None], gpu_start: list[int]) -> pd.DataFrame:
    """Kernels with just the columns assign_iterations reads."""
    return pd.DataFrame(
        {
            "api_start_ns": pd.array(launch, dtype="Int64"),
            "start_ns": pd.array(gpu_start, dtype="int64"),
        }
    )


def test_assign_iterations_by_launch_time() -> None:
    table, _, _ = find_iterations(annotated())  # [100,190] (190,310] (310,400] (400,520]
    kernels = ops(
        # before | first start | inside 0 | end of 0 | just after | no API: GPU start 305
        # | end of last | after last
        [50, 100, 150, 190, 191, None, 520, 521],
        [60, 110, 160, 200, 195, 305, 530, 530],
    )
    k, m = assign_iterations(kernels, ops([], []), table)
    assert k["iteration"].tolist() == [NA, 0, 0, 0, 1, 1, 3, NA]
    assert str(k["iteration"].dtype) == "Int32" and m.empty
    assert "iteration" not in kernels.columns
    # GPU work launched in iteration 0 but running after its end still counts for iteration 0.
    late = ops([180], [195])
    assert assign_iterations(late, late, table)[0]["iteration"].tolist() == [0]


def test_assign_without_iterations() -> None:
    k, _ = assign_iterations(ops([5], [6]), ops([], []), find_iterations(ranges([]))[0])
    assert k["iteration"].tolist() == [NA]


def per_iter(walls: list[int], warmup: int = 0) -> pd.DataFrame:
    n = len(walls)
    return pd.DataFrame(
        {
            "iteration": range(n),
            "wall_ns": walls,
            "warmup": [i < warmup for i in range(n)],
            "in_window": [True] * n,
        }
    )


def test_stats_low_variance() -> None:
    # Warm-up 1000 is left out; the rest: 100, 100, 110, 90.
    stats = iteration_stats(per_iter([1000, 100, 100, 110, 90], warmup=1))
    assert stats["count"] == 4
    assert stats["mean_ns"] == 100.0  # 400 / 4
    assert stats["median_ns"] == 100.0
    # deviations 0, 0, 10, -10: (100 + 100) / (4 - 1) = 66.67, sqrt = 8.165
    assert stats["std_ns"] == pytest.approx(8.16497, rel=1e-5)
    # sorted 90, 100, 100, 110: rank 0.9 * 3 = 2.7 -> 100 + 0.7 * (110 - 100) = 107
    assert stats["p90_ns"] == pytest.approx(107.0)
    assert stats["cv"] == pytest.approx(0.0816497, rel=1e-5)
    assert stats["cv"] < HIGH_VARIANCE_CV and stats["high_variance"] is False
    assert stats["steady_start"] is None and stats["steady_stop"] is None


def test_stats_high_variance_suggests_a_steady_window() -> None:
    # 0 is warm-up; 1..8: 300 100 105 95 100 98 300 100, median 100, mean 1198 / 8 = 149.75.
    stats = iteration_stats(per_iter([500, 300, 100, 105, 95, 100, 98, 300, 100], warmup=1))
    assert stats["count"] == 8 and stats["median_ns"] == 100.0
    assert stats["mean_ns"] == pytest.approx(1198 / 8)
    assert stats["high_variance"] is True
    # Within ±10 % of 100, i.e. 90..110: iterations 2..6 (a run of 5) and 8 (alone).
    assert (stats["steady_start"], stats["steady_stop"]) == (2, 7)
    # sorted 95 98 100 100 100 105 300 300: rank 0.9 * 7 = 6.3 -> 300
    assert stats["p90_ns"] == pytest.approx(300.0)


def test_no_steady_window_too_short_for_its_figures() -> None:
    """A run of 4 steady steps is no window to suggest (STEADY_MIN_ITERATIONS = 5): the
    issue's new user was told to measure '--iter-start 3 --iter-stop 5', two steps."""
    stats = iteration_stats(per_iter([500, 300, 100, 105, 95, 100, 300, 100], warmup=1))
    assert stats["high_variance"] is True
    assert (stats["steady_start"], stats["steady_stop"]) == (None, None)


def test_stats_respect_the_window_and_empty_input() -> None:
    frame = per_iter([100, 200, 300])
    frame["in_window"] = [False, True, True]
    stats = iteration_stats(frame)
    assert stats["count"] == 2 and stats["mean_ns"] == 250.0
    # A window skipping iterations has no consecutive run there: 1 and 3 are not neighbours.
    gaps = per_iter([100, 300, 100, 300, 100])
    gaps["in_window"] = [True, False, True, False, True]
    assert iteration_stats(gaps)["steady_start"] is None
    empty = iteration_stats(per_iter([]))
    assert empty["count"] == 0 and empty["mean_ns"] is None and empty["high_variance"] is False
    one = iteration_stats(per_iter([100]))
    assert one["std_ns"] == 0.0 and one["cv"] == 0.0


def compiled_steps(compile_at: list[tuple[int, int]], steps: int = 5) -> pd.DataFrame:
    """Our start/end iterations [100i, 100i + 100] with an optimizer phase each, and
    ``compile`` phase ranges where given (inside steps, or before the first one)."""
    se = {"domain": OURS, "style": "start_end"}
    rows: list[tuple] = []
    for i in range(steps):
        rows.append(("iteration", 100 * i, 100 * i + 100, -1, se))
        rows.append(("optimizer", 100 * i + 80, 100 * i + 100, -1, se))
    rows += [("compile", a, b, -1, se) for a, b in compile_at]
    return ranges(sorted(rows, key=lambda r: r[1]))


@pytest.mark.parametrize(
    ("compile_at", "warmup"),
    [
        ([], [True, False, False, False, False]),  # the default: iteration 0
        ([(10, 60)], [True, False, False, False, False]),
        # Compiling forward in step 0 and backward in step 1: both warm-up.
        ([(10, 60), (120, 150)], [True, True, False, False, False]),
        # Step 0 is warm-up anyway; steps 1 and 2 compile: the stretch goes on to 2.
        ([(110, 130), (250, 260)], [True, True, True, False, False]),
        # A recompile later on (step 3) is not warm-up: it is in the step statistics.
        ([(10, 60), (320, 330)], [True, False, False, False, False]),
        # Compiling before the first step (outside iterations) changes nothing.
        ([(-50, -10)], [True, False, False, False, False]),
        # A compile range that spans steps 0 to 2 makes them all warm-up.
        ([(50, 250)], [True, True, True, False, False]),
        # Every step compiles: no step would be left, so only the default warm-up.
        ([(100 * i + 10, 100 * i + 20) for i in range(5)], [True, False, False, False, False]),
    ],
)
def test_compiling_steps_at_the_start_are_warm_up(
    compile_at: list[tuple[int, int]], warmup: list[bool]
) -> None:
    table, _, _ = find_iterations(compiled_steps(compile_at))
    assert table["warmup"].tolist() == warmup


def test_compile_warm_up_with_few_steps_and_explicit_windows() -> None:
    # Two steps: no default warm-up, but a compiling step 0 is warm-up.
    two = compiled_steps([(10, 60)], steps=2)
    assert find_iterations(two)[0]["warmup"].tolist() == [True, False]
    assert find_iterations(compiled_steps([], steps=2))[0]["warmup"].tolist() == [False, False]
    # An explicit window is the user's choice: compile time does not move it.
    table, _, _ = find_iterations(compiled_steps([(10, 60), (120, 150)]),
                                  steps=StepSelection(iter_start=1))  # fmt: skip
    assert table["warmup"].tolist() == [True, False, False, False, False]
