"""Which range is the training step (ingest/key_ranges.py, in the order of iterations.py).

Hand-built ``ranges`` frames shaped like real profiles: a script's own push/pop ranges in
the default domain, our annotation's start/end ``iteration``/phase ranges and push/pop
module ranges in the ``dlprof-lite`` domain. Round numbers; each boundary in a comment.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from builders import ranges
from dlprof_lite.ingest.iterations import find_iterations
from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.rules.steps import key_regex, step_key

OURS = {"domain": "dlprof-lite"}
OURS_SE = {"domain": "dlprof-lite", "style": "start_end"}

SPELLINGS = [
    ("step {}", "step #"),
    ("iteration {}", "iteration #"),
    ("Step#{}", "Step##"),
    ("train_step_{}", "train_step_#"),
    ("batch {}", "batch #"),
    ("Iter: {}", "Iter: #"),
    ("ProfilerStep#{}", "ProfilerStep##"),  # torch.profiler's record_function name
    ("epoch 1 step {}", "epoch # step #"),
    ("STEP {}/300", "STEP #/#"),
]


def numbered_run(style: str, steps: int = 3) -> pd.DataFrame:
    """``setup`` once, then per step i: the user's range [100 + 100i, 180 + 100i] (the
    last 30 ns are logging) holding a module range, and our annotation's iteration
    [100 + 100i, 150 + 100i] with its optimizer phase (start/end, as the product writes)."""
    rows: list[tuple] = [("setup", 0, 90, -1)]
    for i in range(steps):
        b = 100 + 100 * i
        rows.append((style.format(i + 12), b, b + 80, -1))
        rows.append(("iteration", b, b + 50, -1, OURS_SE))
        rows.append(("fwd:model:Net", b + 5, b + 40, len(rows) - 2, OURS))
        rows.append(("optimizer", b + 40, b + 50, -1, OURS_SE))
    return ranges(rows)


@pytest.mark.parametrize(("style", "key"), SPELLINGS)
def test_numbered_step_ranges_are_one_key_before_our_iteration(style: str, key: str) -> None:
    table, name, source = find_iterations(numbered_run(style))
    assert (name, source) == (key, "numbered-ranges")
    # The user's ranges end at 180, 280, 380 (logging included), not our iterations' 150...
    assert table["end_ns"].tolist() == [180, 280, 380]
    assert table["start_ns"].tolist() == [100, 180, 280]


@pytest.mark.parametrize(("style", "key"), SPELLINGS)
def test_the_override_regex_matches_every_step(style: str, key: str) -> None:
    frame = numbered_run(style)
    regex = key_regex(frame["name"], key)
    hits = [n for n in frame["name"].astype(str) if re.search(regex, n)]
    assert hits == [style.format(i) for i in (12, 13, 14)]
    table = find_iterations(frame, steps=StepSelection(key_range=regex))[0]
    assert table["end_ns"].tolist() == [180, 280, 380]


@pytest.mark.parametrize(
    "name",
    [
        "epoch 3",  # an epoch is not a step
        "stage 2",
        "aten::add_, seq = 12",  # op markers carry numbers
        "{'mod': 'torch', 'op': 'step', 'n': 1}",
        "fwd:layer1.step2:Conv2d",
        "GpuLower::Lower::validateIterDomainUse",  # no number
        "batchnorm 2",  # "batchnorm" is one word, not "batch"
    ],
)
def test_names_that_are_no_numbered_step(name: str) -> None:
    assert step_key(name) is None


def test_a_name_whose_number_never_changes_is_no_numbered_key() -> None:
    # A step word ("Batch") and a number, but only one distinct name: no numbered steps.
    frame = ranges([("BatchNorm2d", 0, 10, -1), ("BatchNorm2d", 10, 20, -1)])
    _, name, source = find_iterations(frame)
    assert (name, source) == ("BatchNorm2d", "most-repeated")


def test_epochs_alone_are_no_steps() -> None:
    frame = ranges([("epoch 0", 0, 100, -1), ("epoch 1", 100, 200, -1), ("epoch 2", 200, 300, -1)])
    table, name, source = find_iterations(frame)
    assert (name, source) == (None, "none") and table.empty


def test_steps_directly_under_an_epoch_range() -> None:
    rows: list[tuple] = []
    for e in range(2):  # epoch e: [1000e, 1000e + 900], steps at +100, +300, +500
        rows.append((f"epoch {e}", 1000 * e, 1000 * e + 900, -1))
        top = len(rows) - 1
        for s in range(3):
            b = 1000 * e + 100 + 200 * s
            rows.append((f"step {3 * e + s}", b, b + 150, top))
    table, name, source = find_iterations(ranges(rows))
    assert (name, source) == ("step #", "numbered-ranges")
    assert table["end_ns"].tolist() == [250, 450, 650, 1250, 1450, 1650]


def test_numbered_ranges_deeper_down_are_not_the_steps() -> None:
    # train > loop > step i: two levels down, so a step of something else (not a key).
    rows: list[tuple] = [("train", 0, 1000, -1), ("loop", 0, 1000, 0)]
    rows += [(f"step {i}", 100 * i, 100 * i + 50, 1) for i in range(3)]
    _, _, source = find_iterations(ranges(rows))
    assert source != "numbered-ranges"


def test_the_numbered_key_with_most_distinct_names_wins() -> None:
    rows: list[tuple] = []
    for i in range(3):  # step i: [100i, 100i + 60]; batch i only for i < 2
        rows.append((f"step {i}", 100 * i, 100 * i + 60, -1))
        if i < 2:
            rows.append((f"batch {i}", 100 * i + 70, 100 * i + 80, -1))
    _, name, _ = find_iterations(ranges(rows))
    assert name == "step #"


def test_numbered_start_end_ranges_count() -> None:
    se = {"style": "start_end"}  # nvtx.start_range(f"step {i}") ... end_range
    frame = ranges([(f"step {i}", 10 * i, 10 * i + 8, -1, se) for i in range(4)])
    table, name, source = find_iterations(frame)
    assert (name, source, len(table)) == ("step #", "numbered-ranges", 4)


def test_key_range_regex_still_comes_first() -> None:
    _, name, source = find_iterations(numbered_run("step {}"),
                                      steps=StepSelection(key_range="^setup$"))  # fmt: skip
    assert (name, source) == ("setup", "key-range")


# --- inference: the root model's calls ---------------------------------------------------


def inference_run(wrap: bool = False) -> pd.DataFrame:
    """Four root-model calls at [100 + 100i, 160 + 100i] with a child module each; a
    functional-style loss root after each; optionally inside a user range ``infer``."""
    rows: list[tuple] = []
    for i in range(4):
        b = 100 + 100 * i
        parent = -1
        if wrap:
            rows.append(("infer", b, b + 90, -1))
            parent = len(rows) - 1
        rows.append(("fwd:model:Net", b, b + 60, parent, OURS))
        me = len(rows) - 1
        rows.append(("fwd:model.fc:Linear", b + 10, b + 50, me, OURS))
        rows.append(("fwd:model.fc.inner:Identity", b + 20, b + 30, me + 1, OURS))
        rows.append(("fwd:CrossEntropyLoss:CrossEntropyLoss", b + 70, b + 80, parent, OURS))
    return ranges(rows)


@pytest.mark.parametrize("wrap", [False, True])
def test_inference_steps_are_root_model_calls(wrap: bool) -> None:
    # With wrap, the user's "infer" range repeats too, but root model calls come first.
    table, name, source = find_iterations(inference_run(wrap))
    assert (name, source) == ("fwd:model:Net", "root-model-calls")
    # Calls end at 160, 260, 360, 460; the loss call after each belongs to the next step.
    assert table["end_ns"].tolist() == [160, 260, 360, 460]


def test_inference_iterations_of_the_annotation_are_root_model_calls() -> None:
    # The annotation opens one iteration per model call when nothing ever steps
    # (data | forward); without an optimizer phase anywhere they are inference calls.
    rows: list[tuple] = []
    for i in range(3):
        b = 100 * i
        rows += [("iteration", b, b + 80, -1, OURS_SE), ("data", b, b + 10, -1, OURS_SE),
                 ("forward", b + 10, b + 80, -1, OURS_SE)]  # fmt: skip
    table, name, source = find_iterations(ranges(rows))
    assert (name, source) == ("iteration", "root-model-calls")
    assert table["end_ns"].tolist() == [80, 180, 280]


def test_forward_phases_outside_iterations_are_the_inference_steps() -> None:
    rows: list[tuple] = []
    for i in range(3):
        b = 100 * i
        rows.append(("forward", b, b + 70, -1, OURS_SE))
        rows.append(("fwd:model:Net", b + 5, b + 60, -1, OURS))
    table, name, source = find_iterations(ranges(rows))
    assert (name, source) == ("forward", "root-model-calls")
    assert table["end_ns"].tolist() == [70, 170, 270]


def test_our_iterations_come_before_root_model_calls() -> None:
    rows = list(inference_run().itertuples(index=False))
    frame = ranges(
        [(r.name, r.start_ns, r.end_ns, r.parent_id, {"domain": r.domain}) for r in rows]
        + [("iteration", 500, 600, -1, OURS_SE), ("iteration", 600, 700, -1, OURS_SE)]
        + [("optimizer", 590, 600, -1, OURS_SE), ("optimizer", 690, 700, -1, OURS_SE)]
    )
    _, name, source = find_iterations(frame)
    assert (name, source) == ("iteration", "annotation")


def test_one_root_call_is_no_loop() -> None:
    frame = ranges([("fwd:model:Net", 0, 10, -1, OURS), ("fwd:model.fc:Linear", 1, 9, 0, OURS)])
    _, name, source = find_iterations(frame)
    assert (name, source) == (None, "none")


@pytest.mark.parametrize("style", ["checkpoint step {}", "micro_batch {}"])
def test_numbered_ranges_that_are_not_whole_steps_leave_our_iterations(style: str) -> None:
    # Our iterations [100i, 100i + 100] each end in an optimizer phase; the numbered ranges
    # (a checkpoint after the step, or two micro-batches per step) hold none.
    rows: list[tuple] = []
    for i in range(4):
        b = 100 * i
        rows += [("iteration", b, b + 100, -1, OURS_SE), ("optimizer", b + 80, b + 95, -1, OURS_SE)]
        rows += [(style.format(2 * i), b + 10, b + 40, -1)]
        rows += [(style.format(2 * i + 1), b + 40, b + 70, -1)]
    table, name, source = find_iterations(ranges(rows))
    assert (name, source) == ("iteration", "annotation")
    assert table["end_ns"].tolist() == [100, 200, 300, 400]
