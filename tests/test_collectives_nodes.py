"""Several nodes' exports on one clock: aligned on the ends of the collectives they share.

scripts/make_nccl_profile.py writes one export per node of one job (the same history, each
node its own ranks), the second node's clock a known offset ahead and every all-reduce's end
jittered per rank by up to tens of µs (completion skew). The ground truth is the generator's:
the offset must be recovered within the jitter's spread and its error reported; the waits,
matched across the nodes on the aligned clock, must equal the planted ones within it, and the
late rank on the other node must be named the straggler of the job.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlprof_lite.report.collectives.clocks import align
from make_nccl_profile import make

OFFSET_NS = 5_000_000
END_JITTER_NS = 20_000


def node_exports(tmp_path: Path, annotated: bool) -> tuple[list[Path], dict[int, dict]]:
    paths, truth = [], {}
    for name, ranks, offset in (("node1", range(0, 2), 0), ("node2", range(2, 4), OFFSET_NS)):
        path = tmp_path / f"{name}.sqlite"
        got = make(path, ranks=4, steps=8, skew_ns=[0, 0, 0, 300_000], transfer_ns=150_000,
                   jitter_ns=20_000, annotated=annotated, nbytes=25 * 2**20, node_ranks=ranks,
                   clock_offset_ns=offset, end_jitter_ns=END_JITTER_NS)  # fmt: skip
        for instance in got["instances"]:  # type: ignore[attr-defined]
            truth.setdefault(int(instance["seq"]), {}).update(instance)
        paths.append(path)
    return paths, truth


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("annotated", [True, False])
def test_two_nodes_are_aligned_and_matched(tmp_path: Path, annotated: bool) -> None:
    """With the annotation's records, and from the NCCL kernels alone."""
    paths, truth = node_exports(tmp_path, annotated)
    out = tmp_path / "job"
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", "analyze", *map(str, paths),
                           "-o", str(out), "--no-db"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    clocks = {r["node"]: r for r in rows(out / "clock_offsets.csv")}
    second = clocks["node2.dlprof"]
    assert abs(float(second["offset_ns"]) - OFFSET_NS) <= END_JITTER_NS
    assert 0 < float(second["error_ns"]) <= END_JITTER_NS and int(second["instances"]) == 8
    assert float(clocks["node1.dlprof"]["offset_ns"]) == 0.0
    line = next(x for x in done.stdout.splitlines() if "clock of node2.dlprof: +" in x)
    assert line.endswith("from the first input's (8 collectives)"), line
    calls = rows(out / "collectives.csv")
    assert {r["ranks"] for r in calls} == {"4"} and len({r["seq"] for r in calls}) >= 6
    assert {r["group"] for r in calls} == ({"0-3"} if annotated else {"job"})
    for r in calls:
        planted = truth[int(r["seq"])]
        assert int(r["last_rank"]) == planted["last_rank"] == 3
        # the wait as planted, give or take the completion skew and the offset's error
        assert abs(float(r["wait_ns"]) - planted[f"wait_{r['rank']}"]) <= 2 * END_JITTER_NS
    table = rows(out / "ranks.csv")
    assert [int(r["rank"]) for r in table if r["straggler"] == "True"] == [3]
    assert "straggler across the 2 inputs: rank 3: the others wait" in done.stdout


def test_the_offset_is_the_median_of_the_shared_ends() -> None:
    def calls(ranks: list[int], shift: int, ends: list[int]) -> pd.DataFrame:
        return pd.DataFrame([{"rank": r, "group": "0-3", "op": "all_reduce", "seq": i + 1,
                              "start_ns": e - 100 + shift, "end_ns": e + shift}
                             for r in ranks for i, e in enumerate(ends)])  # fmt: skip

    ends = [1_000, 2_000, 3_000, 4_000, 5_000]
    nodes = [("b", calls([2, 3], 700, ends)), ("a", calls([0, 1], 0, ends)),
             ("c", calls([4], 0, [9_000]).assign(seq=99))]  # fmt: skip
    moved, offsets = align(nodes)
    table = offsets.set_index("node")
    assert table.loc["a", "offset_ns"] == 0 and table.loc["b", "offset_ns"] == 700
    assert table.loc["b", "error_ns"] == 0 and table.loc["b", "instances"] == 5
    assert pd.isna(table.loc["c", "offset_ns"]) and table.loc["c", "instances"] == 0
    on_b = moved[moved["rank"].isin([2, 3])]
    assert sorted(set(on_b["end_ns"])) == ends  # moved onto a's clock
    assert json.dumps(list(offsets.columns)) == json.dumps(
        ["node", "node_ranks", "offset_ns", "error_ns", "instances"])
