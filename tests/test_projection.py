"""Projected epoch and training time (report/steps/projection.py).

Two oracles: hand-built profiles whose round numbers give every projected figure by hand,
and real runs of one and two full epochs of ``tests/real_scripts/epoch.py`` under the real
nsys, whose own ``perf_counter`` timing the projection must match within 10 %.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builders import R, fact_mark, make_profile, phase
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.build import build_report
from dlprof_lite.report.steps.projection import NO_PROJECTION, ProjectionInput, reproject
from dlprof_lite.report.summary_types import Summary
from test_graph import parse_dot

SCRIPTS = Path(__file__).resolve().parent / "real_scripts"


def _step(start: int, end: int, data_at: int | None = None, batches: int = 1) -> list[R]:
    """One annotated step: ``iteration`` from ``start`` to ``end``; its first ``data`` range
    at ``data_at`` (default: at ``start``); ``batches`` data ranges (gradient accumulation)
    and a forward, backward and optimizer range, back to back, fill the rest."""
    t = start if data_at is None else data_at
    quarter = (end - t) // (3 + batches)
    out = [phase("iteration", start, end)]
    for i in range(batches):
        out.append(phase("data", t + i * quarter, t + (i + 1) * quarter))
    t += batches * quarter
    for name in ("forward", "backward"):
        out.append(phase(name, t, t + quarter))
        t += quarter
    out.append(phase("optimizer", t, end))
    return out


# Two epochs of three steps (times in ns). Iteration windows, DLProf's rule (previous end to
# this end): 0 [11000, 21000] warm-up; 1 (21000, 22000]; 2 (22000, 24000];
# 3 (24000, 30000] = 5000 of evaluation before its data range at 29000, then a 1000 step;
# 4 (30000, 31000]; 5 (31000, 34000]. Then the final evaluation, 34000-39000.
WINDOWS = [(11_000, 21_000, True, True), (21_000, 22_000, False, True),
           (22_000, 24_000, False, True), (24_000, 30_000, False, True),
           (30_000, 31_000, False, True), (31_000, 34_000, False, True)]  # fmt: skip
STEPS = [1_000, 2_000, 1_000, 1_000, 3_000]  # analysed steps, between-steps time left out


def two_epochs(
    loaders: tuple[dict, ...] = ({"num_workers": 0, "batch_size": 8, "length": 3},),
    loader_at: int = 21_100,
    process_at: int | None = 1_000,
    batches: int = 1,
) -> Profile:
    ranges: list[R] = []
    for i, (start, end, _, _) in enumerate(WINDOWS):
        ranges += _step(start, end, data_at=29_000 if i == 3 else None, batches=batches)
    ranges.append(R("fwd:model:Net", 34_000, 39_000))  # the evaluation's model call
    marks = [fact_mark("dataloader", loader, loader_at + i) for i, loader in enumerate(loaders)]
    marks.append(fact_mark("annotation", {"module_calls": 1, "ns_per_call": 1, "steps": 6},
                           45_000))  # fmt: skip  # at exit, after calibration: not the program's
    if process_at is not None:
        marks.append(fact_mark("process", {"rank": None}, process_at))
    return make_profile(ranges=ranges, iterations=WINDOWS, marks=marks, session=(0, 50_000))


def projection(summary: Summary) -> dict[str, object]:
    return {k: v for k, v in summary.metrics().items() if k.startswith("projection_")}


def test_round_numbers_give_every_projected_figure() -> None:
    summary = build_report(two_epochs()).summary
    p = summary.projection
    assert p.projection_steps_per_epoch == 3
    assert p.projection_steps_source == "dataloader: 3 batches"
    assert p.projection_epochs == 1
    assert p.projection_step_ns == sum(STEPS) / 5 == 1_600
    assert p.projection_step_p10_ns == 1_000
    assert p.projection_step_p90_ns == pytest.approx(2_600)  # 2000 + 0.6 x (3000 - 2000)
    # program start (process fact, 1000) to the first step (11000), plus the warm-up step's
    # 10000 beyond the 1600 mean
    assert p.projection_startup_ns == 10_000 + 8_400
    # 5000 between steps (iteration 3) + 5000 after the last step, over the two epochs seen
    assert p.projection_outside_ns == 5_000
    assert p.projection_epoch_ns == 3 * 1_600 + 5_000
    assert p.projection_epoch_p10_ns == 3 * 1_000 + 5_000
    assert p.projection_epoch_p90_ns == pytest.approx(3 * 2_600 + 5_000)
    assert p.projection_train_ns == 18_400 + 9_800
    assert not [w for w in summary.warnings if "projected" in w], summary.warnings


def test_projecting_the_epochs_the_profile_covered_gives_its_measured_span() -> None:
    """Start-up + 2 epochs = the program's first record (1000) to its last event (39000)."""
    summary = build_report(two_epochs()).summary
    profile = two_epochs()
    two = reproject(summary, profile, build_report(profile).iterations, ProjectionInput(None, 2))
    assert two.projection.projection_epochs == 2
    assert two.projection.projection_train_ns == 39_000 - 1_000


def test_steps_per_epoch_and_epochs_given_by_the_user() -> None:
    profile = two_epochs(loaders=())
    report = build_report(profile)
    assert report.summary.projection.projection_train_ns is None
    given = reproject(report.summary, profile, report.iterations, ProjectionInput(10, 3))
    p = given.projection
    assert (p.projection_steps_per_epoch, p.projection_epochs) == (10, 3)
    assert p.projection_steps_source == "--steps-per-epoch"
    # 6 iterations of 10-step epochs: one epoch seen, so all 10000 outside time is per epoch
    assert p.projection_outside_ns == 10_000
    assert p.projection_train_ns == 18_400 + 3 * (10 * 1_600 + 10_000)
    assert not [w for w in given.warnings if w.startswith(NO_PROJECTION)], given.warnings
    assert any("6 of an epoch's 10 steps" in w for w in given.warnings), given.warnings


def test_gradient_accumulation_divides_the_loader_length() -> None:
    profile = two_epochs(loaders=({"batch_size": 8, "length": 9},), batches=3)
    p = build_report(profile).summary.projection
    assert p.projection_steps_per_epoch == 3
    assert p.projection_steps_source == "dataloader: 9 batches, 3 per step"


@pytest.mark.parametrize(
    ("loaders", "loader_at", "why"),
    [
        ((), 21_100, "no DataLoader length was recorded"),
        (({"length": None},), 21_100, "no length"),
        (({"length": 3}, {"length": 5}), 21_100, "lengths 3, 5"),
        # described before any step (an evaluation loader's sanity check): not training's
        (({"length": 3},), 5_000, "no DataLoader length was recorded"),
    ],
)
def test_no_projection_without_steps_per_epoch(
    loaders: tuple[dict, ...], loader_at: int, why: str
) -> None:
    summary = build_report(two_epochs(loaders=loaders, loader_at=loader_at)).summary
    assert all(v is None for v in projection(summary).values()), projection(summary)
    said = [w for w in summary.warnings if w.startswith(NO_PROJECTION)]
    assert len(said) == 1 and why in said[0] and "--steps-per-epoch N" in said[0], said
    assert summary.row()["projection_train_ns"] is None


def test_without_a_start_record_start_up_counts_from_the_capture() -> None:
    summary = build_report(two_epochs(process_at=None)).summary
    assert summary.projection.projection_startup_ns == 11_000 + 8_400
    assert any("counted from the capture's start" in w for w in summary.warnings)


def test_no_steps_no_projection() -> None:
    summary = build_report(make_profile(ranges=[R("fwd:model:Net", 0, 10)])).summary
    assert summary.projection.projection_epoch_ns is None
    assert [w for w in summary.warnings if w.startswith(NO_PROJECTION)] == [
        NO_PROJECTION + "no analysed training steps were found"
    ]


def test_the_summary_round_trips_its_projection() -> None:
    summary = build_report(two_epochs()).summary
    again = Summary.from_document(json.loads(json.dumps(summary.document())))
    assert again.projection == summary.projection


@pytest.mark.parametrize("flag", ["--epochs", "--steps-per-epoch"])
def test_flags_refuse_zero_in_one_line(flag: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", flag, "0", str(tmp_path / "x.sqlite")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "must be >= 1" in done.stderr and "Traceback" not in done.stderr


# --- a real epoch, profiled by the real product -----------------------------------------


@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("epochs", [1, 2])
def test_real_epochs_match_their_own_timing(nsys: str, tmp_path: Path, epochs: int) -> None:
    """Full epochs on the CPU: dataset and model built, 48 steps and an evaluation loop per
    epoch. The script times its run itself (from after its imports to the end of the last
    evaluation); the projection of as many epochs (start-up + steps + what is no step) must
    match it within 10 %, and its parts must match the script's own parts. With two
    epochs the first evaluation falls inside an iteration (DLProf's rule: the time before
    a step is the step's): it must count as time outside steps, not as step time."""
    pytest.importorskip("torch")
    out, truth_path = tmp_path / "report", tmp_path / "truth.json"
    script = [str(SCRIPTS / "epoch.py"), "--epochs", str(epochs), "--eval-rounds", "10",
              "--truth", str(truth_path)]  # fmt: skip
    cmd = [sys.executable, "-m", "dlprof_lite", "--quiet", "--nsys", nsys, "-o", str(out),
           "--epochs", str(epochs), *script]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    truth = json.loads(truth_path.read_text(encoding="utf-8"))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    steps = [s["step"] for s in truth["steps"]]
    assert summary["projection_steps_per_epoch"] == truth["loader_length"] == 48
    assert len(steps) == epochs * 48 and summary["projection_epochs"] == epochs
    measured = truth["epoch_s"] * 1e9
    assert summary["projection_train_ns"] == pytest.approx(measured, rel=0.10), (
        summary["projection_train_ns"], measured, summary["warnings"])  # fmt: skip
    # The parts: outside steps is the evaluation (per epoch); start-up is the set-up plus
    # what the first (warm-up) step took beyond the mean step.
    assert summary["projection_outside_ns"] == pytest.approx(
        truth["eval_s"] / epochs * 1e9, rel=0.10, abs=20e6
    )
    setup = truth["setup_s"] + max(0.0, steps[0] - sum(steps[1:]) / len(steps[1:]))
    assert summary["projection_startup_ns"] == pytest.approx(setup * 1e9, rel=0.10, abs=20e6)
    # The run form writes the module tree too (tests/test_graph.py checks it in detail).
    graph = parse_dot((out / "layers.dot").read_text(encoding="utf-8"))
    assert {("model", "0"), ("model", "2"), ("model", "4")} <= set(graph.edges)
    # The same profile analysed again for three epochs: start-up once, the epoch three times.
    again = tmp_path / "again"
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", "--quiet", "--epochs", "3", "-o",
         str(again), str(out / "profile.sqlite")], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    three = json.loads((again / "summary.json").read_text(encoding="utf-8"))
    assert three["projection_train_ns"] == pytest.approx(
        summary["projection_startup_ns"] + 3 * summary["projection_epoch_ns"]
    )
