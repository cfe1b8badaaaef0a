"""Collectives matched across real ranks: torchrun on the CPU (gloo) under the real nsys.

tests/real_scripts/collectives.py all-reduces a known tensor every step and one rank sleeps
D ms (100) before each all-reduce: the ground truth is the script's own sleep. Every other rank must
wait about D per all-reduce (within 10 %), the slow rank almost nothing (below 0.3 D), the slow
rank must be the one the others wait for (the straggler), and the bytes must be the tensor's.
An async all-reduce (``async_op=True``, then ``wait()``) is timed to its completion: the others'
calls return at once, yet their waits are D all the same.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).parent / "real_scripts" / "collectives.py")
SLEEP_MS = 100.0  # well above the few ms a loaded 2-core machine adds
NUMEL = 4096


def profile(tmp_path: Path, nsys: str, ranks: int, *extra: str) -> Path:
    out = tmp_path / f"coll{ranks}{''.join(extra)}.dlprof"
    command = [sys.executable, "-m", "dlprof_lite", "--nsys", nsys, "-o", str(out), "--quiet",
               "--", "torchrun", "--standalone", f"--nproc_per_node={ranks}", SCRIPT,
               "--steps", "8", "--slow-rank", "1", "--sleep-ms", str(SLEEP_MS),
               "--numel", str(NUMEL), *extra]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def check(out: Path, ranks: int) -> None:
    d = SLEEP_MS * 1e6
    calls = [r for r in rows(out / "collectives.csv") if r["op"] == "all_reduce"]
    assert len({r["seq"] for r in calls}) >= 6  # the analysed steps' all-reduces
    assert {int(r["ranks"]) for r in calls} == {ranks} and {r["complete"] for r in calls} == {
        "True"}  # fmt: skip
    assert {int(r["bytes"]) for r in calls} == {4 * NUMEL}  # float32 x numel
    assert {int(r["last_rank"]) for r in calls} == {1}  # the sleeping rank arrives last
    for rank in range(ranks):
        waits = [float(r["wait_ns"]) for r in calls if int(r["rank"]) == rank]
        median = statistics.median(waits)
        if rank == 1:
            assert median < 0.3 * d, (rank, median)
        else:
            assert abs(median - d) <= 0.1 * d, (rank, median)
    table = rows(out / "ranks.csv")
    assert [int(r["rank"]) for r in table if r["straggler"] == "True"] == [1]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["straggler_rank"] == 1
    # the others' mean wait per step for it: the table's own figures (a mean, so a slow first
    # call of a loaded machine weighs in: at least D, as the median is)
    waited = sum(float(r["wait_ns"]) for r in calls if r["rank"] != r["last_rank"])
    steps = summary["window_steps"]
    assert summary["straggler_waited_ns"] == pytest.approx(waited / (ranks - 1) / steps)
    # per analysed step: each rank's calls count in its own analysed steps
    assert summary["straggler_waited_ns"] >= 0.9 * d
    assert any(a["problem"] == "Rank 1 makes the others wait in collectives"
               for a in summary["advice"])  # fmt: skip


@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_the_others_wait_for_the_late_rank(nsys: str, tmp_path: Path, ranks: int) -> None:
    pytest.importorskip("torch.distributed")
    check(profile(tmp_path, nsys, ranks), ranks)


@pytest.mark.nsys
@pytest.mark.slow
def test_an_async_all_reduce_is_timed_to_its_completion(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    out = profile(tmp_path, nsys, 2, "--async")
    calls = [r for r in rows(out / "collectives.csv") if r["op"] == "all_reduce"]
    assert {r["async"] for r in calls} == {"True"}
    check(out, 2)
