"""A script's own numbered step ranges, recorded by the real nsys and found without options.

The script (no torch, no dlprof-lite import) marks each step ``Iter: N`` under an
``epoch E`` range, logs after each step in a ``log`` range (which repeats more often than
any one numbered name: without the numbered rule it would be the key), and notes the time
of each step's end with ``perf_counter``: the oracle the iteration walls are checked against.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.nsys, pytest.mark.slow]

SCRIPT = """
import json, sys, time, nvtx
ends = []
n = 0
for epoch in range(2):
    with nvtx.annotate(f"epoch {epoch}"):
        for i in range(3):
            with nvtx.annotate(f"Iter: {n}"):
                time.sleep(0.02 + 0.01 * i)
            ends.append(time.perf_counter())
            with nvtx.annotate("log"):
                time.sleep(0.002)
            n += 1
json.dump([b - a for a, b in zip(ends, ends[1:])], open(sys.argv[1], "w"))
"""


def test_numbered_ranges_under_epochs_are_the_steps(nsys: str, tmp_path: Path) -> None:
    script, truth, out = tmp_path / "loop.py", tmp_path / "truth.json", tmp_path / "r"
    script.write_text(SCRIPT, encoding="utf-8")
    cmd = [sys.executable, "-m", "dlprof_lite", "--annotate", "none", "--quiet", "--nsys", nsys,
           "-o", str(out), str(script), str(truth)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert (summary["key_range"], summary["key_range_source"]) == ("Iter: #", "numbered-ranges")
    assert summary["iterations_count"] == 6
    assert any("--key-range '^Iter:\\ \\d+$'" in w for w in summary["warnings"]), summary
    with open(out / "iterations.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    between = json.loads(truth.read_text(encoding="utf-8"))
    # Iteration i runs from the end of Iter i-1 to the end of Iter i (the previous step's log,
    # then this step's sleep): the script times the same window, end to end, so sleeps that
    # overshoot on a loaded machine move both alike (the first has no previous end).
    for i in range(1, 6):
        wall, own = int(rows[i]["wall_ns"]) / 1e9, between[i - 1]
        assert abs(wall - own) <= 0.10 * own + 0.002, (i, wall, own)
