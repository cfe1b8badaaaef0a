"""Sends and receives paired across real pipeline stages: torchrun on the CPU (gloo), real nsys.

tests/real_scripts/pipeline_p2p.py runs three stages that pass activations by ``send`` and
``recv``; stage 1 sleeps D ms (100) before each send. The ground truth is that sleep: stage 2
must wait about D in each receive from stage 1 (within 10 %), stage 1 almost nothing in its
sends to it, and each pair's late rank must be stage 1. Every step ends in all-reduces over
the three ranks: they must match on every rank (stages send different numbers of tensors, so
a send that took a number in the group's sequence would shift the group's collectives).
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).parent / "real_scripts" / "pipeline_p2p.py")
SLEEP_MS = 100.0


@pytest.mark.nsys
@pytest.mark.slow
def test_a_receive_waits_for_its_late_sender(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    out = tmp_path / "p2p.dlprof"
    command = [sys.executable, "-m", "dlprof_lite", "--nsys", nsys, "-o", str(out), "--quiet",
               "--", "torchrun", "--standalone", "--nproc_per_node=3", SCRIPT, "--steps", "6",
               "--slow-stage", "1", "--sleep-ms", str(SLEEP_MS)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "collectives.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    reduces = [r for r in rows if r["op"] == "all_reduce"]
    assert len(reduces) >= 3 * 6 and all(r["complete"] == "True" and r["ranks"] == "3"
                                         for r in reduces)  # fmt: skip
    late = [r for r in rows if r["group"] == "1>2"]
    assert {r["op"] for r in late} == {"send", "recv"} and {r["last_rank"] for r in late} == {"1"}
    assert {int(r["bytes"]) for r in late} == {16 * 64 * 4}  # the float32 activation
    d = SLEEP_MS * 1e6
    waits = {rank: statistics.median(float(r["wait_ns"]) for r in late if r["rank"] == rank)
             for rank in ("1", "2")}  # fmt: skip
    assert abs(waits["2"] - d) <= 0.1 * d and waits["1"] < 0.3 * d, waits
    for r in late:  # each side's wait and the pair's transfer are its call's duration
        assert int(r["duration_ns"]) == float(r["transfer_ns"]) + float(r["wait_ns"])
