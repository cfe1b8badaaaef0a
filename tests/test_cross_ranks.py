"""The multi-node recipe's merge: several inputs holding ranks, one cross-rank view.

Oracles: the generator's ground truth per process (scripts/make_profile.py ``processes=2``,
each process given a global rank by a ``process`` fact written into the export as the
annotation writes it), and hand-built ranks tables with round numbers for the straggler
found across nodes.
"""

from __future__ import annotations

import csv
import sqlite3
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlprof_lite.cli import main
from dlprof_lite.cross_ranks import NodeRanks, merge
from dlprof_lite.ranks_run import RANKS_STEM
from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import DOMAIN

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_profile import GroundTruth, make_profile  # noqa: E402

ITERATIONS = 5


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def give_ranks(path: Path, ranks: dict[int, int], world: int) -> None:
    """A ``process`` fact per pid, in our domain on that process's first thread."""
    with sqlite3.connect(path) as db:
        for pid, rank in ranks.items():
            did, gtid, start = db.execute(
                "SELECT domainId, globalTid, start FROM NVTX_EVENTS WHERE eventType = 75 "
                "AND text = ? AND ((globalTid >> 24) & 16777215) = ?", (DOMAIN, pid)
            ).fetchone()  # fmt: skip
            text = fact_text("process", {"rank": rank, "local_rank": rank % 2,
                                         "world_size": world})  # fmt: skip
            db.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                       "VALUES (?, 34, ?, ?, ?)", (start + 1, text, gtid, did))  # fmt: skip


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], GroundTruth]:
    folder = tmp_path_factory.mktemp("nodes")
    truth = make_profile(folder / "node0.sqlite", iterations=ITERATIONS, layers=3,
                         kernels_per_layer=2, processes=2, seed=5)  # fmt: skip
    pids = sorted({it["pid"] for it in truth.iterations})
    paths = []
    for node in (0, 1):
        path = folder / f"node{node}.sqlite"
        if node:  # the same workload on a second node
            path.write_bytes((folder / "node0.sqlite").read_bytes())
        paths.append(path)
    give_ranks(paths[0], {pids[0]: 0, pids[1]: 1}, world=4)
    give_ranks(paths[1], {pids[0]: 2, pids[1]: 3}, world=4)
    return paths, truth


def test_nodes_of_one_job_merge_into_one_cross_rank_view(
    nodes: tuple[list[Path], GroundTruth], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, truth = nodes
    per_pid: dict[int, int] = {}
    for it in truth.iterations:
        per_pid[it["pid"]] = per_pid.get(it["pid"], 0) + sum(it["kernel_ns"])
    out = tmp_path / "job"
    assert main(["analyze", *map(str, paths), "-o", str(out), "--all-iterations"]) == 0
    shown = capsys.readouterr().out
    assert f"ranks: 4 ranks over 2 inputs (cross-rank table: {out / RANKS_STEM}.csv)" in shown
    merged = rows(out / f"{RANKS_STEM}.csv")
    dirs = sorted(Path(r["report_dir"]).relative_to(out).as_posix() for r in merged)
    assert dirs == ["node0.dlprof/rank0", "node0.dlprof/rank1", "node1.dlprof/rank2",
                    "node1.dlprof/rank3"]  # fmt: skip
    pids = sorted(per_pid)
    for row in merged:
        rank = int(Path(row["report_dir"]).name.removeprefix("rank"))
        assert int(row["kernel_ns"]) == per_pid[pids[rank % 2]], row["report_dir"]
        assert int(row["iterations_count"]) == ITERATIONS
        assert Path(row["report_dir"], "summary.csv").is_file()
    table = rows(out / "ranks.csv")
    assert sorted(int(r["rank"]) for r in table) == [0, 1, 2, 3]
    assert sum(int(r["kernel_ns"]) for r in table) == 2 * truth.totals["kernel_ns"]
    for rank in range(4):
        assert f"  rank {rank} (node{rank // 2}.dlprof): {ITERATIONS} steps" in shown


def test_ranks_repeated_across_inputs_are_kept_with_a_warning(
    nodes: tuple[list[Path], GroundTruth], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, _ = nodes
    again = tmp_path / "again.sqlite"
    again.write_bytes(paths[0].read_bytes())  # ranks 0 and 1 twice: not one job
    out = tmp_path / "two"
    assert main(["analyze", str(paths[0]), str(again), "-o", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "rank(s) 0, 1 appear in several inputs" in err
    assert len(rows(out / f"{RANKS_STEM}.csv")) == 4
    assert not any(r["straggler"] == "True" for r in rows(out / "ranks.csv"))


def node_table(ranks: dict[int, tuple[float, float, float]]) -> pd.DataFrame:
    """A ranks table: per rank (compute, data, exposed communication) per step in ns, one
    GPU each, 10 steps of 1000 ns."""
    return pd.DataFrame([
        {"rank": r, "pid": 100 + r, "device_id": 0, "step_compute_ns": c, "step_data_ns": d,
         "step_exposed_comm_ns": e, "comm_ns": 10 * 100.0, "step_median_ns": 1000.0,
         "straggler": False}
        for r, (c, d, e) in ranks.items()
    ])  # fmt: skip


def test_the_straggler_is_found_across_nodes() -> None:
    """Rank 3 works 200 ns a step more than the others, who each wait 150 ns exposed: in its
    own node it would stand out too, but only the merge compares it with ranks 0 and 1."""
    a = NodeRanks(({"report_dir": "rank0"}, {"report_dir": "rank1"}),
                  node_table({0: (500, 50, 160), 1: (500, 50, 150)}))  # fmt: skip
    b = NodeRanks(({"report_dir": "rank2"}, {"report_dir": "rank3"}),
                  node_table({2: (500, 50, 150), 3: (700, 50, 0)}))  # fmt: skip
    cross = merge([(Path("job/a"), a), (Path("job/b"), b)])
    assert cross is not None and cross.nodes == 2 and not cross.warnings
    assert cross.table.loc[cross.table["straggler"], "rank"].tolist() == [3]
    assert [r["report_dir"] for r in cross.rows] == [str(Path("job/a/rank0")),
        str(Path("job/a/rank1")), str(Path("job/b/rank2")), str(Path("job/b/rank3"))]  # fmt: skip
    # A balanced job names none; one input with ranks is not merged (its folder has its view).
    even = NodeRanks(b.rank_rows, node_table({2: (500, 50, 150), 3: (510, 50, 150)}))
    cross = merge([(Path("a"), a), (Path("b"), even)])
    assert cross is not None and not cross.table["straggler"].any()
    assert merge([(Path("a"), a), (Path("b"), NodeRanks())]) is None


def test_nodes_of_one_rank_each_merge_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One GPU per node: each input is one process, its report that rank's."""
    truth = make_profile(tmp_path / "node0.sqlite", iterations=ITERATIONS, layers=2,
                         kernels_per_layer=2, processes=1, seed=7)  # fmt: skip
    (pid,) = {it["pid"] for it in truth.iterations}
    second = tmp_path / "node1.sqlite"
    second.write_bytes((tmp_path / "node0.sqlite").read_bytes())
    give_ranks(tmp_path / "node0.sqlite", {pid: 0}, world=2)
    give_ranks(second, {pid: 1}, world=2)
    out = tmp_path / "job"
    assert main(["analyze", str(tmp_path / "node0.sqlite"), str(second), "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    merged = {Path(r["report_dir"]).name: r for r in rows(out / f"{RANKS_STEM}.csv")}
    assert sorted(merged) == ["node0.dlprof", "node1.dlprof"]
    assert sorted(int(r["rank"]) for r in rows(out / "ranks.csv")) == [0, 1]
    assert f"  rank 1 (node1.dlprof): {ITERATIONS} steps" in shown
    assert not (out / "node0.dlprof" / f"{RANKS_STEM}.csv").exists()  # one rank: no folders
