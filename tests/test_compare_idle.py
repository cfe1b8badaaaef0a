"""compare's ``idle`` section: each cause's device idle time and main-thread step time per step.

The baseline is the planted step of tests/test_idle_partition.py (every nanosecond booked by
hand there: DEVICE_PLANTED, HOST_PLANTED) repeated; the other side repeats it with a longer
data wait in some steps, a shorter sync in every step and a garbage collection in one step,
each added to the device's and the main thread's cause alike (and to the step's idle and wall
time, so both partitions still add up). Every expected mean and median below is worked out by
hand from those additions. A run recorded before the partition has no cause columns (read
back from the store: empty ones): its side gives no idle rows, never zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from dlprof_lite.compare.columns import metric_definitions, unit
from dlprof_lite.compare.comparison import compare_sides
from dlprof_lite.compare.console import render_comparison
from dlprof_lite.compare.deltas import BOTH, IDLE, Delta, side_deltas
from dlprof_lite.compare.output import comparison_frame
from dlprof_lite.compare.side import Side
from dlprof_lite.report.model import Report
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column
from dlprof_lite.store.database import RunStore
from dlprof_lite.store.record import RunContext, RunRecord
from test_idle_partition import DEVICE_PLANTED, HOST_PLANTED, planted

CAUSE_COLUMNS = [cause_column(DEVICE, c) for c in DEVICE_CAUSES] + [
    cause_column(HOST, c) for c in HOST_CAUSES
]
# B's additions per step, ns, to a cause's device and host time alike.
B_STEPS: list[dict[str, int]] = [
    {"data": 3_000, "sync": -100, "gc": 6_000},
    {"sync": -100},
    {"data": 600, "sync": -100},
]
# data: +3000, 0, +600 -> mean +1200, median +600; sync: -100 each step;
# gc: +6000 in one step of three -> mean +2000, median 0 (a stall: not ranked by).
B_MEAN = {"data": 1_200, "sync": -100, "gc": 2_000}
B_MEDIAN = {"data": 600, "sync": -100}


@pytest.fixture(scope="module")
def report() -> Report:
    built: Report = planted()
    return built


def _steps(report: Report, added: Sequence[Mapping[str, int]]) -> pd.DataFrame:
    """The planted step once per item of ``added``, each cause's columns moved by its ns
    (phase_idle_ns and wall_ns with them), the steps laid end to end."""
    row = report.iterations.iloc[0]
    rows = []
    start = 0
    for i, extra in enumerate(added):
        step = row.copy()
        for cause, ns in extra.items():
            step[cause_column(DEVICE, cause)] += ns
            step[cause_column(HOST, cause)] += ns
            step["phase_idle_ns"] += ns
            step["wall_ns"] += ns
        step["iteration"], step["start_ns"] = i, start
        step["end_ns"] = start + step["wall_ns"]
        start = int(step["end_ns"])
        rows.append(step)
    frame = pd.DataFrame(rows).reset_index(drop=True).astype(report.iterations.dtypes.to_dict())
    # The builder's own check: both partitions still add up.
    devices = [cause_column(DEVICE, c) for c in DEVICE_CAUSES]
    hosts = [cause_column(HOST, c) for c in HOST_CAUSES]
    assert (frame[devices].sum(axis=1) == frame["phase_idle_ns"]).all()
    assert (frame[hosts].sum(axis=1) == frame["wall_ns"]).all()
    return frame


def _run(report: Report, added: Sequence[Mapping[str, int]], old: bool = False) -> RunRecord:
    """A run of the planted steps; ``old``: as recorded before the partition (no columns)."""
    steps = _steps(report, added)
    if old:
        steps = steps.drop(columns=CAUSE_COLUMNS)
    return RunRecord(RunContext(), report.summary, steps, report.layers, report.kernels)


def _baseline(report: Report, old: bool = False) -> RunRecord:
    return _run(report, [{}] * 3, old)


def _slower(report: Report, old: bool = False) -> RunRecord:
    return _run(report, B_STEPS, old)


def _idle(deltas: Sequence[Delta]) -> dict[tuple[str, str], Delta]:
    return {(d.name, d.metric): d for d in deltas if d.section == IDLE}


def test_record_idle_is_the_planted_partition(report: Report) -> None:
    record = _slower(report)
    for stat, added in (("mean", B_MEAN), ("median", B_MEDIAN)):
        frame = record.idle(stat).set_index("cause")
        assert list(frame.index) == list(DEVICE_CAUSES)
        for cause in DEVICE_CAUSES:
            assert frame.at[cause, "device_ns"] == DEVICE_PLANTED[cause] + added.get(cause, 0)
            if cause in HOST_CAUSES:
                assert frame.at[cause, "host_ns"] == HOST_PLANTED[cause] + added.get(cause, 0)
            else:  # launch, queued, unknown: never the main thread's state
                assert frame["host_ns"].isna()[cause]
    with pytest.raises(ValueError, match="mean or median"):
        record.idle("p90")


def test_idle_deltas_are_the_hand_worked_means_and_medians(report: Report) -> None:
    a, b = Side("A", (_baseline(report),)), Side("B", (_slower(report),))
    rows = _idle(side_deltas(a, b))
    assert {name for name, _ in rows} == set(DEVICE_CAUSES)
    for cause in DEVICE_CAUSES:
        for kind, planted_ns in (("device", DEVICE_PLANTED), ("host", HOST_PLANTED)):
            mean, median = rows[(cause, f"{kind}_ns")], rows[(cause, f"{kind}_median_ns")]
            if kind == "host" and cause not in HOST_CAUSES:
                for row in (mean, median):  # unknown on both sides: no 0 claiming "no change"
                    assert (row.value, row.baseline_value, row.delta, row.delta_pct) == (
                        None, None, None, None)  # fmt: skip
                continue
            base = planted_ns[cause]
            assert (mean.baseline_value, mean.delta) == (base, B_MEAN.get(cause, 0))
            assert (median.baseline_value, median.delta) == (base, B_MEDIAN.get(cause, 0))
            assert mean.status == BOTH and mean.label == "B" and mean.baseline == "A"
    data = rows[("data", "device_median_ns")]
    assert data.value == 1_450 + 600
    assert data.delta_pct == pytest.approx(600 / 1_450 * 100)


def test_idle_causes_rank_by_their_medians(report: Report) -> None:
    a, b = Side("A", (_baseline(report),)), Side("B", (_slower(report),))
    rows = [d for d in side_deltas(a, b) if d.section == IDLE]
    order = list(dict.fromkeys((d.rank, d.name) for d in rows))
    # data (median +600) then sync (-100); the rest unchanged in median, by name: gc's
    # one-step stall moves its mean by 2000 but ranks with them.
    unchanged = sorted(set(DEVICE_CAUSES) - {"data", "sync"})
    assert order == list(enumerate(["data", "sync", *unchanged], start=1))
    # Each cause's metrics in one block: the ranked medians, then the means.
    assert [d.metric for d in rows[:4]] == [
        "device_median_ns", "host_median_ns", "device_ns", "host_ns"]  # fmt: skip


def test_a_side_of_old_runs_gives_no_idle_rows(report: Report) -> None:
    new_a, new_b = _baseline(report), _slower(report)
    old_a, old_b = _baseline(report, old=True), _slower(report, old=True)
    assert old_a.idle().empty and old_a.idle("median").empty
    for a, b in ((old_a, new_b), (new_a, old_b), (old_a, old_b)):
        sides = [Side("A", (a,)), Side("B", (b,))]
        comparison = compare_sides(sides, resamples=50)
        assert comparison.section(IDLE, "B") == []
        assert comparison.steps[0].label == "B"  # the rest of the comparison is made
        assert not (comparison_frame(comparison)["section"] == IDLE).any()
        console = Console(record=True, width=200)
        render_comparison(comparison, console)
        assert "by cause" not in console.export_text()


def test_a_side_pools_only_its_runs_that_have_the_partition(report: Report) -> None:
    """Like a summary field: an old run of a side is left out of its idle figures, not
    counted as 0 (which would halve the baseline's data wait here)."""
    a = Side("A", (_baseline(report), _baseline(report, old=True)))
    b = Side("B", (_slower(report),))
    rows = _idle(side_deltas(a, b))
    assert rows[("data", "device_ns")].baseline_value == DEVICE_PLANTED["data"]
    assert rows[("data", "device_ns")].delta == B_MEAN["data"]


def test_old_and_new_runs_read_back_from_the_store(report: Report, tmp_path: Path) -> None:
    with RunStore(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        new = store.get(store.record(_slower(report)))
        old = store.get(store.record(_slower(report, old=True)))
    assert old.idle().empty
    stored = new.idle("median").set_index("cause")
    assert stored.at["data", "device_ns"] == DEVICE_PLANTED["data"] + B_MEDIAN["data"]
    assert stored.at["data", "host_ns"] == HOST_PLANTED["data"] + B_MEDIAN["data"]


def test_console_names_the_causes_that_moved(report: Report) -> None:
    sides = [Side("A", (_baseline(report),)), Side("B", (_slower(report),))]
    console = Console(record=True, width=200)
    render_comparison(compare_sides(sides, resamples=50), console)
    lines = console.export_text().splitlines()
    changes = "median over steps (B vs A): data +600 ns, sync -100 ns"
    assert f"GPU idle per step by cause, {changes}" in lines
    assert f"host time per step by cause, {changes}" in lines


def test_idle_metrics_are_defined_with_their_unit(report: Report) -> None:
    sides = [Side("A", (_baseline(report),)), Side("B", (_slower(report),))]
    frame = comparison_frame(compare_sides(sides, resamples=50))
    idle = frame[frame["section"] == IDLE]
    assert set(idle["metric"]) == {"device_ns", "host_ns", "device_median_ns", "host_median_ns"}
    definitions = metric_definitions()
    for metric in set(idle["metric"]):
        assert f"{IDLE}.{metric}" in definitions and unit(IDLE, metric) == "ns"
    queued = idle[(idle["name"] == "queued") & (idle["metric"] == "host_ns")].iloc[0]
    assert pd.isna(queued["value"]) and pd.isna(queued["delta"])
