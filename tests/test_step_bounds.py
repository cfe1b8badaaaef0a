"""Steps decided afterwards (ingest/step_bounds.py): from the annotation's phase ranges and
its ``update:<n>`` / ``backward-end`` marks, every bound worked out in a comment.

Hand-built frames with round numbers, shaped as the annotation writes them: phases are
start/end ranges in the ``dlprof-lite`` domain, the marks are NVTX marks in that domain.
"""

from __future__ import annotations

import pandas as pd

from builders import START_END, build_marks, ranges
from dlprof_lite.ingest.iterations import find_iterations
from dlprof_lite.rules.names import BACKWARD_END_MARK, DOMAIN, MANUAL_MARK, UPDATE_MARK

OURS = {"domain": DOMAIN, "style": START_END}


def phases(*rows: tuple[str, int, int]) -> pd.DataFrame:
    return ranges([(name, start, end, -1, OURS) for name, start, end in rows])


def marks(*rows: tuple[str, int]) -> pd.DataFrame:
    return build_marks([dict(start_ns=t, name=n, domain=DOMAIN, pid=1, tid=1) for n, t in rows])


def update(t: int, optimizer: int = 1) -> tuple[str, int]:
    return (f"{UPDATE_MARK}{optimizer}", t)


def bounds(table: pd.DataFrame) -> list[tuple[int, int, int]]:
    return list(zip(table["start_ns"], table["end_ns"], table["between_before_ns"], strict=True))


def test_a_step_runs_from_its_data_wait_to_its_update_and_the_last_one_closes_there() -> None:
    """Three steps, an evaluation (no phases) between the second and the third, and a long
    tail after the last update (saving the model): the last step ends at its update (390),
    not at the process's exit (1000), and the evaluation is in no step."""
    frame = phases(
        ("forward", 100, 120), ("backward", 120, 150), ("optimizer", 150, 160),
        ("data", 170, 180), ("forward", 185, 200), ("backward", 200, 230),
        ("optimizer", 230, 240),
        # evaluation 250..330: grad-off forwards write no phase
        ("data", 340, 350), ("forward", 355, 370), ("backward", 370, 380),
        ("optimizer", 380, 1000),  # the annotation closed the last phase at exit
    )  # fmt: skip
    table, name, source = find_iterations(frame, marks(update(160), update(240), update(390)))
    assert (name, source) == ("iteration", "annotation")
    # step 0: first forward 100 .. update 160; step 1: its data wait 170 .. 240 (zero_grad
    # and logging 160..170 are between steps); step 2: data 340 .. update 390.
    assert bounds(table) == [(100, 160, 0), (170, 240, 10), (340, 390, 100)]
    assert table["wall_ns"].tolist() == [60, 70, 50]


def test_a_look_ahead_loader_step_without_a_wait_starts_at_its_forward() -> None:
    """An epoch's last batch was fetched ahead (accelerate): no data wait before its
    forward. Its step starts at that forward and holds its own forward and backward; the
    step before it is not extended."""
    frame = phases(
        ("data", 100, 110), ("forward", 110, 130), ("backward", 130, 160), ("optimizer", 160, 170),
        ("forward", 180, 200), ("backward", 200, 230), ("optimizer", 230, 240),
        ("data", 260, 280), ("forward", 280, 300), ("backward", 300, 320), ("optimizer", 320, 330),
    )  # fmt: skip
    table, _, _ = find_iterations(frame, marks(update(170), update(240), update(330)))
    assert bounds(table) == [(100, 170, 0), (180, 240, 10), (260, 330, 20)]


def test_two_optimizers_on_one_batch_are_one_step_and_a_repeat_is_the_next() -> None:
    """A GAN: optimizer 1 (discriminator) then 2 (generator) on each batch; with no data
    wait between batches, optimizer 1 stepping again opens the next step."""
    frame = phases(
        ("forward", 100, 110), ("backward", 110, 120), ("optimizer", 120, 130),
        ("forward", 130, 140), ("backward", 140, 150), ("optimizer", 150, 160),
        ("forward", 170, 180), ("backward", 180, 190), ("optimizer", 190, 200),
        ("forward", 200, 210), ("backward", 210, 220), ("optimizer", 220, 230),
    )  # fmt: skip
    ups = marks(update(130, 1), update(160, 2), update(200, 1), update(230, 2))
    table, _, _ = find_iterations(frame, ups)
    assert bounds(table) == [(100, 160, 0), (170, 230, 10)]


def test_a_new_batch_between_two_optimizers_updates_splits_them() -> None:
    """Optimizers that alternate batch by batch: each batch is its own step."""
    frame = phases(
        ("data", 90, 100), ("forward", 100, 110), ("backward", 110, 120), ("optimizer", 120, 130),
        ("data", 140, 150), ("forward", 150, 160), ("backward", 160, 170), ("optimizer", 170, 180),
    )  # fmt: skip
    table, _, _ = find_iterations(frame, marks(update(130, 1), update(180, 2)))
    assert bounds(table) == [(90, 130, 0), (140, 180, 10)]


def test_gradient_accumulation_is_one_step_per_update() -> None:
    frame = phases(
        ("data", 100, 110), ("forward", 110, 120), ("backward", 120, 130),
        ("data", 130, 140), ("forward", 140, 150), ("backward", 150, 160),
        ("optimizer", 160, 170),
        ("data", 180, 190), ("forward", 190, 200), ("backward", 200, 210),
        ("data", 210, 220), ("forward", 220, 230), ("backward", 230, 240),
        ("optimizer", 240, 250),
    )  # fmt: skip
    table, _, _ = find_iterations(frame, marks(update(170), update(250)))
    assert bounds(table) == [(100, 170, 0), (180, 250, 10)]


def test_a_loop_without_an_optimizer_is_one_forward_and_backward_per_step() -> None:
    """Parameters updated by hand: no update marks, no optimizer phase. Each training
    forward after a backward opens a step (with the data wait before it); a step ends
    where the next starts; the last ends at its backward's end mark (150 + 30 = 380), not
    where the annotation closed its phase at exit (900)."""
    frame = phases(
        ("data", 100, 110), ("forward", 110, 130), ("backward", 130, 190),
        ("data", 200, 210), ("forward", 210, 230), ("backward", 230, 290),
        ("data", 300, 310), ("forward", 310, 330), ("backward", 330, 900),
    )  # fmt: skip
    ends = marks((BACKWARD_END_MARK, 180), (BACKWARD_END_MARK, 280), (BACKWARD_END_MARK, 380))
    table, name, source = find_iterations(frame, ends)
    assert (name, source) == ("forward", "forward-backward")
    assert bounds(table) == [(100, 200, 0), (200, 300, 0), (300, 380, 0)]


def test_the_scripts_own_iterations_win_over_update_marks() -> None:
    """A script that placed ``iteration()`` ranges itself: those are its steps."""
    frame = ranges([
        ("iteration", 100, 200, -1, OURS), ("forward", 110, 150, -1, OURS),
        ("optimizer", 150, 190, -1, OURS), ("iteration", 200, 300, -1, OURS),
        ("forward", 210, 250, -1, OURS), ("optimizer", 250, 290, -1, OURS),
    ])  # fmt: skip
    table, _, source = find_iterations(frame, marks((MANUAL_MARK, 100), (MANUAL_MARK, 200)))
    assert source == "annotation"
    assert table["end_ns"].tolist() == [200, 300]


def test_marks_of_another_domain_are_not_ours() -> None:
    """A mark named like ours in the default domain is a user's: the old rule applies."""
    frame = ranges([
        ("iteration", 100, 200, -1, OURS), ("optimizer", 150, 190, -1, OURS),
        ("iteration", 200, 300, -1, OURS), ("optimizer", 250, 290, -1, OURS),
    ])  # fmt: skip
    other = build_marks([dict(start_ns=190, name="update:1", domain="", pid=1, tid=1)])
    table, _, _ = find_iterations(frame, other)
    assert table["start_ns"].tolist() == [100, 200]
    assert table["between_before_ns"].tolist() == [0, 0]
