"""The ranks table: compute vs communication per (process, device), exposed communication,
the straggler (report/ranks/table.py, rules/ranks.py).

Oracles: hand-built timelines with round numbers (the arithmetic by hand, in the comments),
and on real multi-GPU exports the real ``nsys stats -r gpukernsum`` of each timeline (the
export copied with only that timeline's kernels) and a direct SQL count of the NCCL kernels.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from builders import fact_mark, make_profile, phase
from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.ranks.table import collectives, ranks_table
from dlprof_lite.report.steps.window import choose_window
from nsys_oracle import nsys_report

NCCL_NEW = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
DECOY = "void gemm<ncclKernel_AllReduce>(float*)"  # mentions NCCL, is not NCCL's


def k(name: str, start: int, end: int, pid: int = 1, device: int = 0, tid: int = 10,
      stream: int = 7) -> dict:  # fmt: skip
    return dict(name=name, start_ns=start, dur_ns=end - start, pid=pid, device_id=device,
                tid=tid, stream_id=stream)  # fmt: skip


def _table(profile):
    """The ranks table over the whole run (every iteration's kernels)."""
    session = (profile.meta.session_start_ns, profile.meta.session_end_ns)
    return ranks_table(profile, choose_window(profile.iterations, session, all_iterations=True))


def test_collectives_by_name() -> None:
    names = pd.Series([NCCL_NEW, NCCL_OLD, DECOY, "k", None], dtype="category")
    assert list(collectives(names)) == ["AllReduce", "AllReduce", "", "", ""]


def test_compute_comm_and_exposed_arithmetic() -> None:
    profile = make_profile(kernels=[
        # pid 1, device 0: compute [0, 200) in two kernels; comm [150, 250) overlaps compute
        # for 50, comm [300, 400) for none: comm 200, exposed 150, overlap 25 %.
        k("gemm", 0, 100), k(DECOY, 100, 200), k(NCCL_NEW, 150, 250, stream=9),
        k(NCCL_OLD, 300, 400, stream=9),
        # pid 2, device 1: compute [0, 300) (two streams overlap on [50, 150): counted once);
        # comm [100, 200) wholly under compute: exposed 0, overlap 100 %.
        k("gemm", 0, 150, pid=2, device=1), k("relu", 50, 300, pid=2, device=1, stream=8),
        k(NCCL_NEW, 100, 200, pid=2, device=1, stream=9),
        # pid 2 also on device 0 (each process sees its own "device 0"): a timeline of its own.
        k("gemm", 0, 40, pid=2, device=0),
    ], session=(0, 1000))  # fmt: skip
    t = _table(profile).set_index(["pid", "device_id"])
    assert list(_table(profile).columns) == column_names("ranks")
    a, b, c = t.loc[(1, 0)], t.loc[(2, 1)], t.loc[(2, 0)]
    assert (a["compute_ns"], a["comm_ns"], a["exposed_comm_ns"]) == (200, 200, 150)
    assert a["overlap_pct"] == pytest.approx(25.0)
    assert (a["kernels"], a["kernel_ns"], a["comm_kernels"]) == (4, 400, 2)
    assert (b["compute_ns"], b["comm_ns"], b["exposed_comm_ns"]) == (300, 100, 0)
    assert b["overlap_pct"] == pytest.approx(100.0)
    assert (c["compute_ns"], c["comm_ns"], c["comm_kernels"]) == (40, 0, 0)
    assert np.isnan(c["overlap_pct"])
    # No rank facts: ranks in pid order; both timelines of pid 2 are rank 1.
    assert (a["rank"], b["rank"], c["rank"]) == (0, 1, 1)
    assert not t["straggler"].any()  # no steps: no per-step work to compare
    s = build_report(profile).summary.communication
    assert s.comm_ns == 300 and s.ranks == 2
    assert s.comm_share == pytest.approx(300 / (300 + 540))
    # No steps: exposed communication over the window, wall x timelines = 1000 x 3.
    assert s.exposed_comm_ns == 150 and s.exposed_comm_pct == pytest.approx(5.0)


STEP = 1000


def _two_ranks(exposed: bool) -> object:
    """Four 1000 ns steps (the first warm-up) of two processes, each its own GPU:

    pid 1 (rank 1 by its fact): data 100, compute [100, 600), comm [600, 990): exposed 390
    per step (``exposed``; else comm [500, 590), under compute).
    pid 2 (rank 0): data 500 (the slow loader), compute [500, 990), comm [900, 990) under it.
    Work per step: 600 and 990: rank 0 exceeds the other's by 390 (>= 5 % of 1000) and the
    other's exposed communication 390 >= 0.5 x 390: rank 0 (pid 2) is the straggler.
    """
    ranges, kernels = [], []
    for i in range(4):
        t = i * STEP
        ranges += [phase("iteration", t, t + STEP), phase("data", t, t + 100),
                   phase("iteration", t, t + STEP, tid=20), phase("data", t, t + 500, tid=20)]
        comm = (t + 600, t + 990) if exposed else (t + 500, t + 590)
        kernels += [k("gemm", t + 100, t + 600), k(NCCL_NEW, *comm, stream=9),
                    k("gemm", t + 500, t + 990, pid=2, device=0, tid=20),
                    k(NCCL_NEW, t + 900, t + 990, pid=2, device=0, tid=20, stream=9)]
    steps = [(i * STEP, (i + 1) * STEP, i == 0, True) for i in range(4)]
    marks = [fact_mark("process", {"rank": 1}, 1, pid=1),
             fact_mark("process", {"rank": 0}, 2, pid=2)]  # fmt: skip
    profile = make_profile(ranges=ranges, kernels=kernels, iterations=steps, marks=marks,
                           session=(0, 4 * STEP))  # fmt: skip
    r = profile.ranges.copy()
    r["pid"] = np.where(r["tid"].to_numpy() == 20, 2, 1).astype(np.int32)  # the 2nd process
    return replace(profile, ranges=r)


def test_straggler_is_the_rank_with_slow_data_that_the_others_wait_for() -> None:
    report = build_report(_two_ranks(exposed=True))
    t = report.ranks.set_index("pid")
    assert list(report.ranks["rank"]) == [0, 1]  # by the process facts, not pid order
    one, two = t.loc[1], t.loc[2]
    assert (one["steps"], two["steps"]) == (3, 3)  # warm-up left out
    assert one["step_median_ns"] == STEP
    assert (one["step_compute_ns"], one["step_exposed_comm_ns"]) == (500, 390)
    assert (one["step_data_ns"], two["step_data_ns"]) == (100, 500)
    assert (two["step_compute_ns"], two["step_exposed_comm_ns"]) == (490, 0)
    assert (two["comm_ns"], two["overlap_pct"]) == (270, 100.0)
    assert bool(two["straggler"]) and not bool(one["straggler"])
    s = report.summary.communication
    assert s.straggler_rank == 0
    assert s.straggler_excess_ns == pytest.approx(390) and s.straggler_data_ns == 400
    assert s.rank_imbalance == pytest.approx(1.0)
    assert s.exposed_comm_ns == pytest.approx(195)  # (390 + 0) / 2 timelines
    assert s.exposed_comm_pct == pytest.approx(19.5)
    problems = {a.problem: a for a in report.summary.advice}
    slow = [a for a in problems.values() if a.metric == "straggler_data_ns"]
    assert len(slow) == 1 and "rank 0" in slow[0].problem + slow[0].evidence
    assert any(a.metric == "exposed_comm_pct" for a in report.summary.advice)


def test_no_straggler_when_nobody_waits() -> None:
    report = build_report(_two_ranks(exposed=False))
    assert not report.ranks["straggler"].any()
    assert report.summary.communication.straggler_rank is None
    assert report.summary.communication.exposed_comm_ns == 0


def test_report_round_trip_keeps_the_ranks_table(tmp_path: Path) -> None:
    from dlprof_lite.render.reader import open_report

    report = build_report(_two_ranks(exposed=True))
    back = open_report(report.save(tmp_path / "r", formats=("json",)))
    assert back.summary.communication == report.summary.communication
    pd.testing.assert_frame_equal(back.ranks, report.ranks, check_dtype=False)


MFU = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"
SAXPY = "hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
_NCCL_SQL = ("SELECT (k.globalPid >> 24) & 16777215, k.deviceId, COUNT(*) "
             "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
             "WHERE s.value GLOB 'ncclKernel_*' OR s.value GLOB 'ncclDevKernel_*' "
             "GROUP BY 1, 2")  # fmt: skip


def _one_timeline(export: Path, pid: int, device: int, folder: Path) -> Path:
    """A copy of ``export`` holding only the kernels of one (pid, device)."""
    out = folder / f"{pid}_{device}.sqlite"
    shutil.copyfile(export, out)
    out.chmod(0o644)
    with closing(sqlite3.connect(out)) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "
                   "((globalPid >> 24) & 16777215) != ? OR deviceId != ?", (pid, device))
        db.commit()  # fmt: skip
    return out


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("name", [MFU, SAXPY])
def test_per_timeline_kernel_totals_equal_nsys_stats(
    corpus_dir: Path, nsys: str, name: str, tmp_path: Path
) -> None:
    export = corpus_dir / name
    table = _table(load(export))
    assert len(table) == (2 if name == MFU else 1)
    for row in table.itertuples(index=False):
        copy = _one_timeline(export, int(row.pid), int(row.device_id), tmp_path)
        oracle = nsys_report(nsys, copy, "gpukernsum")
        assert row.kernel_ns == oracle["Total Time (ns)"].sum(), (row.pid, row.device_id)
        assert row.kernels == oracle["Instances"].sum()
    with closing(sqlite3.connect(f"{export.resolve().as_uri()}?mode=ro", uri=True)) as db:
        nccl = {(p, d): n for p, d, n in db.execute(_NCCL_SQL)}
    got = {(int(r.pid), int(r.device_id)): int(r.comm_kernels) for r in table.itertuples()}
    assert got == {key: nccl.get(key, 0) for key in got}
    if name == MFU:  # two processes, one GPU each, 33 NCCL SendRecv kernels each
        assert sorted(got.values()) == [33, 33] and list(table["rank"]) == [0, 1]
        assert (table["comm_ns"] > 0).all() and (table["exposed_comm_ns"] <= table["comm_ns"]).all()


def test_a_slow_ranks_warm_up_step_is_left_out_like_the_others() -> None:
    """pid 2's first step ends 300 ns after the shared first (warm-up) iteration, inside the
    analysed window; step i of a rank is iteration i, so it is still warm-up."""
    ranges = [phase("iteration", i * STEP, (i + 1) * STEP) for i in range(4)]
    ranges += [phase("iteration", 0, STEP + 300, tid=20)]
    ranges += [phase("iteration", i * STEP + 300, (i + 1) * STEP + 300, tid=20)
               for i in range(1, 4)]  # fmt: skip
    steps = [(i * STEP, (i + 1) * STEP, i == 0, True) for i in range(4)]
    profile = make_profile(ranges=ranges, iterations=steps, session=(0, 5 * STEP))
    r = profile.ranges.copy()
    r["pid"] = np.where(r["tid"].to_numpy() == 20, 2, 1).astype(np.int32)
    t = build_report(replace(profile, ranges=r)).ranks.set_index("pid")
    assert list(t["steps"]) == [3, 3] and list(t["device_id"].isna()) == [True, True]
    assert (t.loc[2, "step_mean_ns"], t.loc[1, "step_mean_ns"]) == (STEP, STEP)
