"""Per-iteration compute, communication, exposed communication and overlap (report/steps/table.py).

Oracles: a hand-built two-device timeline with round numbers (the arithmetic by hand, in the
comments); the ranks table (report/ranks/table.py, computed per timeline over the whole window) on
the same profile; on a real two-GPU export, the NCCL kernels' total time by direct SQL.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from builders import make_profile
from dlprof_lite import load
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.model import analysed

NCCL_NEW = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
DECOY = "void gemm<ncclKernel_AllReduce>(float*)"  # mentions NCCL, is not NCCL's
STEP = 1000
COMM = ["compute_ns", "comm_ns", "exposed_comm_ns"]


def k(name: str, start: int, end: int, pid: int = 1, device: int = 0, stream: int = 7) -> dict:
    return dict(name=name, start_ns=start, dur_ns=end - start, pid=pid, device_id=device,
                tid=10 * pid, stream_id=stream)  # fmt: skip


def _profile():
    """Four iterations of 1000 ns (the first is warm-up), two timelines.

    Iterations 0-1 (t = i x 1000):
      pid 1, device 0: gemm [t+100, t+400) and a decoy [t+200, t+500) on another stream:
        compute 400; NCCL [t+450, t+650): comm 200, 50 under compute, exposed 150.
      pid 2, device 1: gemm [t+100, t+300): compute 200; NCCL [t+150, t+250) hidden; NCCL
        [t+600, t+700) and [t+650, t+750) overlap: comm 100 + 150 = 250, exposed 150.
      -> compute 600, comm 450, exposed 300, overlap 150 / 450 = 33.3 %.
    Iteration 2: the same without pid 1's NCCL: compute 600, comm 250, exposed 150, 40 %.
    Iteration 3: one gemm [3100, 3400) on pid 1: compute 300, no comm, overlap empty.
    (An op belongs to the iteration its start lies in, (start, end].)
    A NCCL kernel after the last iteration belongs to none and counts nowhere.
    """
    kernels = []
    for i in range(3):
        t = i * STEP
        kernels += [k("gemm", t + 100, t + 400), k(DECOY, t + 200, t + 500, stream=8),
                    k("gemm", t + 100, t + 300, pid=2, device=1),
                    k(NCCL_NEW, t + 150, t + 250, pid=2, device=1, stream=9),
                    k(NCCL_OLD, t + 600, t + 700, pid=2, device=1, stream=9),
                    k(NCCL_NEW, t + 650, t + 750, pid=2, device=1, stream=10)]  # fmt: skip
        if i < 2:
            kernels.append(k(NCCL_NEW, t + 450, t + 650, stream=9))
    kernels += [k("gemm", 3100, 3400), k(NCCL_NEW, 5000, 5100, stream=9)]
    steps = [(i * STEP, (i + 1) * STEP, i == 0, True) for i in range(4)]
    return make_profile(kernels=kernels, iterations=steps, session=(0, 6000))


def test_per_iteration_compute_comm_exposed_and_overlap() -> None:
    table = build_report(_profile()).iterations
    assert list(table.columns) == column_names("iterations")
    got = table[COMM].to_numpy().tolist()
    assert got == [[600, 450, 300], [600, 450, 300], [600, 250, 150], [300, 0, 0]]
    pct = table["overlap_pct"].to_numpy()
    assert pct[:3] == pytest.approx([100 / 3, 100 / 3, 40.0])
    assert np.isnan(pct[3])


def test_mean_exposed_per_step_equals_the_ranks_tables_sum() -> None:
    """Analysed iterations 1-3: (300 + 150 + 0) / 3 = 150 = pid 1's 150 / 3 + pid 2's 300 / 3."""
    report = build_report(_profile())
    mean = float(analysed(report.iterations)["exposed_comm_ns"].mean())
    assert mean == pytest.approx(150.0)
    assert mean == pytest.approx(float(report.ranks["step_exposed_comm_ns"].sum()))


def test_kernels_of_one_timeline_in_two_iterations_are_unions_apart() -> None:
    """A comm kernel of iteration 0 running on into iteration 1's time, under iteration 1's
    compute on the same timeline: each iteration's union keeps its own kernels (the
    iteration-1 compute does not hide iteration 0's communication)."""
    kernels = [k("gemm", 10, 100), k(NCCL_NEW, 900, 1300, stream=9), k("gemm", 1010, 1500)]
    steps = [(0, 1000, False, True), (1000, 2000, False, True)]
    table = build_report(make_profile(kernels=kernels, iterations=steps,
                                      session=(0, 2000))).iterations  # fmt: skip
    assert table[COMM].to_numpy().tolist() == [[90, 400, 400], [490, 0, 0]]


MFU = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"
_NCCL_NS = ("SELECT SUM(k.[end] - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName "
            "WHERE s.value GLOB 'ncclKernel_*' OR s.value GLOB 'ncclDevKernel_*'")  # fmt: skip


@pytest.mark.corpus
def test_real_two_gpu_comm_is_at_most_the_nccl_kernel_time(corpus_dir: Path) -> None:
    """The export has no iteration ranges of ours; its NCCL group ranges make the steps."""
    export = corpus_dir / MFU
    report = build_report(load(export, key_range="ncclGroupStart"))
    table = report.iterations
    assert len(table) > 10
    with closing(sqlite3.connect(f"{export.resolve().as_uri()}?mode=ro", uri=True)) as db:
        (nccl_ns,) = db.execute(_NCCL_NS).fetchone()
    comm = int(table["comm_ns"].sum())
    assert 0 < comm <= nccl_ns
    assert (table["exposed_comm_ns"] <= table["comm_ns"]).all()
    talk = table["comm_ns"] > 0
    assert table.loc[talk, "overlap_pct"].between(0, 100).all()
    assert table.loc[~talk, "overlap_pct"].isna().all()
    mean = float(analysed(table)["exposed_comm_ns"].mean())
    assert mean == pytest.approx(float(report.ranks["step_exposed_comm_ns"].sum()))
