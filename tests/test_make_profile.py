"""The synthetic export writer and profile generator (scripts/), checked against real oracles.

The schema against a real nsys 2022.4 export; the generated files against the real
``nsys stats`` (gpukernsum, nvtxkernsum, kernexecsum, nvtxsum); the ground truth against slow,
straightforward recomputations from the rows written. The generator's own code is not reused
by any reference here.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from builders import query, query_frame
from make_profile import GroundTruth, main, make_profile
from nsys_db import NsysDb
from nsys_oracle import nsys_report
from nsys_schema import ENUMS, TABLES, global_pid, global_tid, short_name

REAL_2022_4 = "MohanadOdema__DLProf__nsys_profile.nsys-rep.sqlite"
SMALL = {"iterations": 6, "layers": 4, "kernels_per_layer": 2, "per_kernel_ranges": True}


@pytest.fixture(scope="module")
def two_procs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    path = tmp_path_factory.mktemp("gen") / "two_procs.sqlite"
    return path, make_profile(path, processes=2, seed=3, **SMALL)


@pytest.fixture(scope="module")
def two_threads(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    path = tmp_path_factory.mktemp("gen") / "two_threads.sqlite"
    return path, make_profile(path, threads=2, seed=5, stall_probability=0.2, **SMALL)


# -- schema and writer ------------------------------------------------------------------------


@pytest.mark.corpus
def test_schema_is_the_real_2022_4_schema(corpus_dir: Path, tmp_path: Path) -> None:
    db = NsysDb(tmp_path / "empty.sqlite")
    db.close(drop_empty=False)
    for table in [*TABLES, *ENUMS]:
        info = f"SELECT name, type, \"notnull\", pk FROM pragma_table_info('{table}')"
        assert query(tmp_path / "empty.sqlite", info) == query(corpus_dir / REAL_2022_4, info)
    for table, rows in ENUMS.items():
        assert query(corpus_dir / REAL_2022_4, f"SELECT * FROM {table}") == rows, table


def test_global_ids_use_the_nsys_layout() -> None:
    assert global_tid(0x177E, 0x177E) == 0x1_00177E_00177E
    assert global_pid(9908) == 281641205366784  # a kernel's globalPid in the real export
    assert global_tid(np.array([1, 2]), 3).tolist() == [(1 << 48) | (1 << 24) | 3,
                                                         (1 << 48) | (2 << 24) | 3]  # fmt: skip
    assert short_name("void at::native::(anonymous namespace)::k<float>(int)") == "k"
    assert short_name("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


def _hand_built(path: Path) -> None:
    with NsysDb(path) as db:
        db.process(1)
        db.gpu(0)
        db.push(1000, 9000, "iteration", pid=1, tid=1, domain="dlprof-lite")
        db.push(1500, 5000, "aten::mm, seq = 3", pid=1, tid=1, registered=False)
        db.runtime(2000, 2500, "cudaLaunchKernel_v7000", pid=1, tid=1, correlation_id=7)
        db.kernel(3001, 4001, "volta_sgemm_128x64_nn", pid=1, correlation_id=7)
        db.graph_launch(6000, 6500, [(7001, 7501, "k1"), (7601, 8001, "k2")], pid=1, tid=1,
                        correlation_id=8)  # fmt: skip
        db.start_end(500, 9500, "epoch", pid=1, tid=1, end_tid=2)
        db.start_end(600, 9400, "same-thread", pid=1, tid=1, end_tid=1)
        db.mark(1000, "step", pid=1, tid=1)


def test_hand_built_rows_look_like_a_real_export(tmp_path: Path) -> None:
    path = tmp_path / "hand.sqlite"
    _hand_built(path)
    tables = {r[0] for r in query(path, "SELECT name FROM sqlite_master")}
    assert "CUPTI_ACTIVITY_KIND_MEMSET" not in tables  # no rows: absent, as nsys does
    assert query(path, "SELECT value FROM EXPORT_META_DATA WHERE name LIKE '%VERSION'") == [
        ("2022.4.2.1",), ("3.0.0",)]  # fmt: skip
    nvtx = query(path, "SELECT eventType, text, textId IS NOT NULL, domainId, endGlobalTid, "
                       "end IS NULL FROM NVTX_EVENTS ORDER BY rowid")  # fmt: skip
    assert [r[0] for r in nvtx] == [75, 59, 59, 60, 60, 34, 76]
    assert nvtx[0][1:4] == ("dlprof-lite", 0, 1) and nvtx[1][2:4] == (1, 1)
    assert nvtx[2][1:4] == ("aten::mm, seq = 3", 0, 0)
    assert nvtx[3][4] == global_tid(1, 2) and nvtx[4][4] is None  # ended on another thread
    assert nvtx[5][5] == 1
    graph = query(path, "SELECT k.graphNodeId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) JOIN "
                        "StringIds s ON s.id = r.nameId WHERE k.correlationId = 8")  # fmt: skip
    assert graph == [(1, "cudaGraphLaunch_v10000"), (2, "cudaGraphLaunch_v10000")]
    # As nsys writes it: events from 0 to duration; startTime/stopTime on another clock.
    [(duration, start, stop)] = query(path, "SELECT duration, startTime, stopTime "
                                            "FROM ANALYSIS_DETAILS")  # fmt: skip
    assert duration == 9500 and stop - start == duration and start > 10**12


@pytest.mark.nsys
def test_hand_built_rows_through_nsys_stats(nsys: str, tmp_path: Path) -> None:
    path = tmp_path / "hand.sqlite"
    _hand_built(path)
    ex = nsys_report(nsys, path, "kernexecsum")
    assert ex["Count"].sum() == ex["QCount"].sum() == 3  # k1 and k2 via cudaGraphLaunch
    nk = nsys_report(nsys, path, "nvtxkernsum").groupby("NVTX Range")["Kern Inst"].sum()
    # nsys leaves out start/end ranges ended on another thread (endGlobalTid set).
    assert nk.to_dict() == {"aten::mm, seq = 3": 1, "dlprof-lite:iteration": 3, "same-thread": 3}


# -- generated profiles against nsys stats ---------------------------------------------------


def _nsys_name(name: str, row: dict) -> str:
    return f"{row['domain']}:{name}" if row["domain"] else name


@pytest.mark.nsys
@pytest.mark.parametrize("case", ["two_procs", "two_threads"])
def test_nsys_stats_equal_the_truth(nsys: str, case: str, request: pytest.FixtureRequest) -> None:
    path, truth = request.getfixturevalue(case)
    gk = nsys_report(nsys, path, "gpukernsum").groupby("Name")[["Instances", "Total Time (ns)"]]
    assert gk.sum().to_dict("index") == {
        name: {"Instances": k["instances"], "Total Time (ns)": k["total_ns"]}
        for name, k in truth.kernels.items()}  # fmt: skip
    nk = nsys_report(nsys, path, "nvtxkernsum").groupby("NVTX Range")
    got = nk[["Kern Inst", "Total Time (ns)"]].sum().to_dict("index")
    want = {_nsys_name(name, r): {"Kern Inst": r["kernels"], "Total Time (ns)": r["kernel_ns"]}
            for name, r in truth.ranges.items() if r["kernels"]}  # fmt: skip
    if truth.params["threads"] > 1:  # nsys: a start/end range holds only its own thread's kernels
        epoch = want.pop("epoch")
        assert got.pop("epoch")["Kern Inst"] == epoch["Kern Inst"] // truth.params["threads"]
    assert got == want
    ns = nsys_report(nsys, path, "nvtxsum").set_index("Range")["Instances"].to_dict()
    assert ns == {_nsys_name(name, r): r["instances"] for name, r in truth.ranges.items()}
    ex = nsys_report(nsys, path, "kernexecsum")
    assert ex["Count"].sum() == ex["QCount"].sum() == truth.totals["kernels"]


# -- the truth against straightforward recomputations ------------------------------------------


def test_processes_reuse_correlation_ids(two_procs: tuple[Path, GroundTruth]) -> None:
    path, truth = two_procs
    ids = query(path, "SELECT globalPid >> 24 & 0xFFFFFF, group_concat(correlationId) "
                      "FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1")  # fmt: skip
    assert len(ids) == 2 and ids[0][1] == ids[1][1]
    joins = query(path, "SELECT count(*), count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k"
                        " JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON k.correlationId = r.correlationId"
                        " AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)")  # fmt: skip
    assert joins == [(truth.totals["kernels"], truth.totals["kernels"])]
    naive = query(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                        "CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)")  # fmt: skip
    assert naive[0][0] == 2 * truth.totals["kernels"]


def _gpu_ops(path: Path) -> pd.DataFrame:
    sql = ("SELECT o.deviceId AS device, o.start, o.end, r.start AS launch FROM {t} o "
           "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = o.correlationId "
           "AND r.globalTid >> 24 = o.globalPid >> 24")  # fmt: skip
    frames = [query_frame(path, sql.format(t=t))
              for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")]  # fmt: skip
    return pd.concat(frames).sort_values(["device", "start"])


@pytest.mark.parametrize("case", ["two_procs", "two_threads"])
def test_host_gaps_equal_a_slow_reference(case: str, request: pytest.FixtureRequest) -> None:
    path, truth = request.getfixturevalue(case)
    host: dict[int, int] = defaultdict(int)
    idle = 0
    for device, ops in _gpu_ops(path).groupby("device"):
        busy_until = None
        for start, end, launch in ops[["start", "end", "launch"]].itertuples(index=False):
            if busy_until is not None and start > busy_until:
                idle += start - busy_until
                if launch > busy_until:  # the call began after the GPU had gone idle
                    host[int(device)] += start - busy_until
            busy_until = end if busy_until is None else max(busy_until, end)
    assert truth.host_gap_by_device == {str(d): g for d, g in host.items()}
    assert truth.totals["host_gap_ns"] == sum(host.values()) > 0
    assert truth.totals["idle_ns"] == idle > truth.totals["host_gap_ns"]
    per_iteration = sum(sum(it["host_gap_ns"]) for it in truth.iterations)
    per_phase = sum(p["host_gap_ns"] for p in truth.phases.values())
    assert per_iteration == per_phase == sum(host.values())


def test_ranges_equal_a_slow_reference(two_threads: tuple[Path, GroundTruth]) -> None:
    """Inclusive kernel totals per push/pop range name, by brute force over the rows."""
    path, truth = two_threads
    ranges = pd.DataFrame(query(path, "SELECT start, end, globalTid, coalesce(text, "
                                      "(SELECT value FROM StringIds WHERE id = textId)) "
                                      "FROM NVTX_EVENTS WHERE eventType = 59"),
                          columns=["start", "end", "tid", "name"])  # fmt: skip
    launches = query(path, "SELECT r.start, r.end, r.globalTid, k.end - k.start "
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "ON r.correlationId = k.correlationId "
                           "AND r.globalTid >> 24 = k.globalPid >> 24")  # fmt: skip
    count: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for r_start, r_end, tid, dur in launches:
        inside = ranges[(ranges.tid == tid) & (ranges.start <= r_start) & (ranges.end >= r_end)]
        for name in inside.name:
            count[name] += 1
            total[name] += dur
    want = {n: (r["kernels"], r["kernel_ns"]) for n, r in truth.ranges.items()
            if r["style"] == "PushPop" and r["kernels"]}  # fmt: skip
    assert {n: (count[n], total[n]) for n in count} == want


def test_truth_is_self_consistent(two_threads: tuple[Path, GroundTruth]) -> None:
    path, truth = two_threads
    t = truth.totals
    assert t["kernels"] == query(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert t["kernel_ns"] == sum(k["total_ns"] for k in truth.kernels.values())
    assert t["tc_kernel_ns"] == sum(k["total_ns"] for k in truth.kernels.values()
                                    if k["tensor_core"]) > 0  # fmt: skip
    assert t["kernel_ns"] == truth.ranges["iteration"]["kernel_ns"]
    layers = sum(v["fwd_ns"] + v["bwd_ns"] for v in truth.layers.values())
    assert layers + truth.phases["optimizer"]["kernel_ns"] == t["kernel_ns"]
    assert truth.phases["forward"]["kernel_ns"] == truth.ranges["forward"]["kernel_ns"]
    assert {k["tensor_core"] for k in truth.kernels.values()} == {True, False}
    for it in truth.iterations:
        assert it["count"] == truth.params["iterations"]
        start, end = np.array(it["start_ns"]), np.array(it["end_ns"])
        assert (start < end).all() and (end[:-1] < start[1:]).all()
    assert sum(sum(it["kernel_ns"]) for it in truth.iterations) == t["kernel_ns"]


def test_same_seed_same_file(tmp_path: Path) -> None:
    a = make_profile(tmp_path / "a.sqlite", seed=1, **SMALL)
    b = make_profile(tmp_path / "b.sqlite", seed=1, **SMALL)
    c = make_profile(tmp_path / "c.sqlite", seed=2, **SMALL)
    assert a.totals == b.totals and a.kernels == b.kernels and a.totals != c.totals
    assert GroundTruth.load(f"{tmp_path / 'a.sqlite'}.truth.json") == a


def test_cli_hits_the_requested_kernel_count(tmp_path: Path) -> None:
    out = tmp_path / "cli.sqlite"
    assert main([str(out), "--kernels", "3000", "--layers", "8", "--processes", "2"]) == 0
    truth = GroundTruth.load(f"{out}.truth.json")
    assert 3000 <= truth.totals["kernels"] < 3000 + 2 * 2 * (2 * 8 * 3 + 2)


@pytest.mark.slow
def test_a_million_kernels_with_ranges_in_under_a_minute(tmp_path: Path) -> None:
    import time

    t0 = time.perf_counter()
    truth = make_profile(tmp_path / "big.sqlite", iterations=5000, layers=32,
                         kernels_per_layer=3, per_kernel_ranges=True)  # fmt: skip
    assert truth.totals["kernels"] == 1_000_000
    assert time.perf_counter() - t0 < 60
