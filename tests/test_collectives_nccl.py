"""Collectives on generated multi-GPU exports shaped like real NCCL runs, with planted waits.

scripts/make_nccl_profile.py writes four ranks, each on its own GPU, whose all-reduce kernels
(recent NCCL's names, on their own stream, launched inside NCCL's own NVTX range) start when
each rank arrives and end together a fixed transfer after the last arrival; one rank is
planted late. The ground truth is the generator's own arrivals: the matched instances, each
rank's wait, the transfer and the rank the others wait for must equal them, from the kernels
alone (an export without our annotation) and from the annotation's calls timed by their kernels.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from browser import (  # noqa: F401
    REPORT_CHARTS,
    Chromium,
    chromium_fixture,
    expected_sections,
    section_problems,
)
from dlprof_lite import open_report
from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from make_nccl_profile import make

RANKS = 4


def report_of(tmp_path: Path, *, annotated: bool, skew_us: list[int], transfer_us: int = 150,
              gpu: str = "NVIDIA H100 80GB HBM3") -> tuple[object, dict]:  # fmt: skip
    path = tmp_path / f"nccl{int(annotated)}.sqlite"
    truth = make(path, ranks=RANKS, steps=8, skew_ns=[s * 1000 for s in skew_us],
                 transfer_ns=transfer_us * 1000, jitter_ns=20_000, annotated=annotated,
                 nbytes=25 * 2**20, gpu_name=gpu)  # fmt: skip
    return build_report(load(path)), truth


@pytest.mark.parametrize("annotated", [False, True])
def test_instances_and_waits_equal_the_planted_ones(tmp_path: Path, annotated: bool) -> None:
    report, truth = report_of(tmp_path, annotated=annotated, skew_us=[0, 0, 300, 0])
    calls = report.collectives  # type: ignore[attr-defined]
    planted = {int(i["seq"]): i for i in truth["instances"]}
    seqs = sorted(set(calls["seq"]))
    assert len(seqs) >= 6 and set(seqs) <= set(planted)  # the analysed steps' instances
    for row in calls.itertuples():
        want = planted[int(row.seq)]
        assert row.transfer_ns == want["transfer_ns"]
        assert row.wait_ns == want[f"wait_{row.rank}"], (row.seq, row.rank)
        assert row.last_rank == want["last_rank"] == 2
        assert row.ranks == RANKS and row.complete
    assert set(calls["op"]) == ({"all_reduce"} if annotated else {"AllReduce"})
    assert set(calls["bytes"]) == ({25 * 2**20} if annotated else {0})  # kernels: unknown
    ranks = report.ranks  # type: ignore[attr-defined]
    assert ranks.loc[ranks["straggler"], "rank"].tolist() == [2]
    waited = ranks.set_index("rank")["step_waited_for_ns"]
    others = [i for i in range(RANKS) if i != 2]
    expected = sum(sum(planted[s][f"wait_{r}"] for r in others) / 3 for s in seqs) / len(seqs)
    assert waited[2] == pytest.approx(expected) and (waited[others] == 0).all()


def test_the_late_ranks_extra_compute_is_named_by_layer(tmp_path: Path) -> None:
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 300, 0])
    c = report.summary.communication  # type: ignore[attr-defined]
    assert c.straggler_rank == 2 and c.straggler_layer == "decoder"
    # the planted 300 us, give or take the jitter (0-20 us per rank and step)
    assert 280_000 <= c.straggler_layer_ns <= 320_000
    (advice,) = [a for a in report.summary.advice  # type: ignore[attr-defined]
                 if a.problem == "Rank 2 makes the others wait in collectives"]  # fmt: skip
    assert "most in layer decoder" in advice.evidence


def test_bus_bandwidth_follows_nccl_tests(tmp_path: Path) -> None:
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 300, 0])
    (row,) = report.collective_ops.itertuples()  # type: ignore[attr-defined]
    assert row.algbw_gbps == pytest.approx(25 * 2**20 / 150_000)  # bytes per ns = GB/s
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * (RANKS - 1) / RANKS)


SLOW_LINK = "all_reduce moves its data far below the link's speed"


@pytest.mark.parametrize(("transfer_us", "gpu", "fires"), [
    (2000, "NVIDIA H100 80GB HBM3", True),  # 25 MiB in 2 ms: busbw 19.7 GB/s, 4 % of 450
    (150, "NVIDIA H100 80GB HBM3", False),  # 262 GB/s: 58 % of the link
    (2000, "NVIDIA H100 PCIe", False),  # NVLink only with a bridge: the link is not known
])  # fmt: skip
def test_a_slow_link_is_told_apart_from_a_late_rank(tmp_path: Path, transfer_us: int, gpu: str,
                                                    fires: bool) -> None:  # fmt: skip
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 0, 0],
                          transfer_us=transfer_us, gpu=gpu)  # fmt: skip
    problems = [a.problem for a in report.summary.advice]  # type: ignore[attr-defined]
    assert (SLOW_LINK in problems) is fires
    assert not any("makes the others wait" in p for p in problems)


def test_nvlink_peaks_by_product() -> None:
    from dlprof_lite.rules.collectives import nvlink_gbps

    want = {"NVIDIA H100 80GB HBM3": 450.0, "NVIDIA H100 SXM5 80GB": 450.0,
            "NVIDIA H200": 450.0, "NVIDIA A100-SXM4-80GB": 300.0,
            "Tesla V100-SXM2-16GB": 150.0, "NVIDIA H100 PCIe": None, "NVIDIA H100 NVL": None,
            "NVIDIA H200 NVL": None, "NVIDIA A100 80GB PCIe": None,
            "NVIDIA GeForce RTX 4090": None}  # fmt: skip
    for name, gbps in want.items():
        found = nvlink_gbps(name)
        assert (found[0] if found else None) == gbps, name


def test_no_straggler_when_the_ranks_arrive_together(tmp_path: Path) -> None:
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 0, 0])
    ranks = report.ranks  # type: ignore[attr-defined]
    assert not ranks["straggler"].any()
    assert report.summary.communication.straggler_rank is None  # type: ignore[attr-defined]


def test_the_tables_are_written_and_read_back(tmp_path: Path) -> None:
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 300, 0])
    folder = tmp_path / "out"
    report.save(folder)  # type: ignore[attr-defined]
    with open(folder / "collectives.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and rows[0]["group"] == "0-3" and rows[0]["op"] == "all_reduce"
    back = open_report(folder)
    assert back.collectives.equals(report.collectives)  # type: ignore[attr-defined]
    assert back.collective_ops.equals(report.collective_ops)  # type: ignore[attr-defined]
    doc = json.loads((folder / "collectives.json").read_text(encoding="utf-8"))
    assert "wait_ns" in doc["definitions"]


def test_the_page_draws_who_makes_whom_wait(chromium: Chromium, tmp_path: Path) -> None:
    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 300, 0])
    folder = tmp_path / "page"
    report.save(folder)  # type: ignore[attr-defined]
    want = expected_sections(open_report(folder))
    assert "ranks" in want
    result = chromium.open_page(folder / "report.html")
    assert result.problems() == []
    assert section_problems(result, want, REPORT_CHARTS) == []
    (waits,) = [c for c in result.charts if c.id == "chart-ranks-waits"]
    assert waits.plotly and waits.traces == 1 and waits.drawn > 0


MFU_2GPU = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"


@pytest.mark.corpus
def test_a_real_two_gpu_export_is_matched_from_its_nccl_kernels(corpus_dir: Path) -> None:
    """A real torchrun 2 x H100 slice without our annotation: each rank's n-th NCCL kernel on
    its stream is the n-th instance; durations as the export holds them (read with SQL here),
    the transfer the shorter of the two, the wait the rest."""
    import sqlite3

    path = corpus_dir / MFU_2GPU
    with sqlite3.connect(path) as con:
        raw = con.execute(
            "SELECT k.globalPid, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'ncclDevKernel_%' "
            "ORDER BY k.globalPid, k.start").fetchall()  # fmt: skip
    per_process: dict[int, list[int]] = {}
    for gpid, start, end in raw:
        per_process.setdefault(gpid, []).append(end - start)
    first, second = (per_process[g] for g in sorted(per_process))
    assert len(first) == len(second) == 33
    report = build_report(load(path))
    calls = report.collectives  # type: ignore[attr-defined]
    by_seq = calls.groupby("seq")
    assert by_seq.size().eq(2).all() and set(calls["op"]) == {"SendRecv"}
    for seq, group in by_seq:
        durations = sorted(group["duration_ns"])
        want = sorted([first[seq - 1], second[seq - 1]])
        assert durations == want, seq
        assert (group["transfer_ns"] == want[0]).all()
        assert sorted(group["wait_ns"]) == [0, want[1] - want[0]]


def test_hostile_collective_facts_are_left_out_not_believed(tmp_path: Path) -> None:
    """Facts are the profile's text: a group of a billion ranks, a sequence number that is no
    number, an op with markup, a fact with no range: no crash, no huge list, nothing invented."""
    import sqlite3

    from dlprof_lite.rules.facts import fact_text
    from dlprof_lite.rules.names import COLLECTIVE, DOMAIN

    report, _ = report_of(tmp_path, annotated=True, skew_us=[0, 0, 300, 0])
    good = len(report.collectives)  # type: ignore[attr-defined]
    path = tmp_path / "nccl1.sqlite"
    junk = [
        {"op": "all_reduce", "group": "0-999999999", "seq": 1, "bytes": 8},
        {"op": "all_reduce", "group": "0-3", "seq": "x", "bytes": 8},
        {"op": "[bold]<script>", "group": "0-3", "seq": 3, "bytes": -5},
        {"op": "all_reduce"},
    ]
    with sqlite3.connect(path) as con:
        (domain,) = con.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND "
                                "text = ? LIMIT 1", (DOMAIN,)).fetchone()  # fmt: skip
        (gtid,) = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE domainId = ? LIMIT 1",
                              (domain,)).fetchone()  # fmt: skip
        for i, value in enumerate(junk):
            con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                        "VALUES (?, 34, ?, ?, ?)",
                        (2_000_000 + i, fact_text(COLLECTIVE, value), gtid, domain))  # fmt: skip
    hostile = build_report(load(path))
    calls = hostile.collectives  # type: ignore[attr-defined]
    assert len(calls) == good  # the junk matched no range of its op on its thread
    assert set(calls["group"]) == {"0-3"}


def test_the_console_table_keeps_each_row_its_own_figures() -> None:
    """Sorted by wait, each row's size and bandwidth stay that row's."""
    import pandas as pd

    from dlprof_lite.render.console import _collectives_table

    ops = pd.DataFrame([
        {"group": "0-3", "op": "broadcast", "size_bytes": 1024, "ranks": 4, "instances": 2,
         "bytes_mean": 1024.0, "transfer_median_ns": 1e3, "wait_mean_ns": 1e3,
         "wait_share": 0.1, "algbw_gbps": 1.0, "busbw_gbps": 1.0},
        {"group": "0-3", "op": "all_reduce", "size_bytes": 2**20, "ranks": 4, "instances": 2,
         "bytes_mean": 2.0**20, "transfer_median_ns": 1e3, "wait_mean_ns": 9e6,
         "wait_share": 0.9, "algbw_gbps": 2.0, "busbw_gbps": 3.0},
    ])  # fmt: skip
    table = _collectives_table(ops, 120)
    assert table is not None
    cells = [[str(c) for c in column._cells] for column in table.columns]
    assert cells[0] == ["all_reduce", "broadcast"]  # the larger wait first
    assert cells[1] == ["1.0 MiB", "1.0 KiB"] and cells[-1] == ["3", "1"]
