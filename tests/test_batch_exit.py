"""A batch with a bad input, and --quiet warnings, through the real command line (issue 13,
item 3): the good input's folder is written, the bad one has its one-line error on stderr and
in summary.csv, and the exit code is 2 because one failed, serially and in a process pool.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = "quasiben__nvtx-examples__cupy.sqlite"  # a real export without iterations: warnings


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlprof_lite", "analyze", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


@pytest.fixture
def inputs(corpus_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    good = tmp_path / "good.sqlite"
    shutil.copyfile(corpus_dir / GOOD, good)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not an export at all\n")
    return good, bad


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_bad_input_keeps_the_good_and_exits_2(inputs, tmp_path: Path, jobs: str) -> None:
    good, bad = inputs
    out = tmp_path / f"reports-j{jobs}"
    proc = cli(str(good), str(bad), "-o", str(out), "-j", jobs, "--quiet", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("dlprof-lite: error:")]
    assert len(errors) == 1 and "bad.sqlite" in errors[0], proc.stderr
    assert proc.stdout.strip() == f"reports: {out}"
    assert sorted(p.name for p in out.iterdir()) == [
        "good.dlprof", "summary.csv", "summary.json",
    ]  # fmt: skip
    assert (out / "good.dlprof" / "summary.json").is_file()
    with open(out / "summary.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [Path(r["source"]).name for r in rows] == ["good.sqlite", "bad.sqlite"]
    assert rows[0]["error"] == "" and rows[0]["report_dir"] == str(out / "good.dlprof")
    assert rows[1]["error"] and rows[1]["error"] in errors[0]
    # A failed row's empty cells leave the good row's counts integers, not "15.0".
    assert rows[0]["kernel_count"].isdigit() and int(rows[0]["kernel_count"]) > 0
    # The good input's warnings reach stderr, one line naming it.
    assert any(
        line.startswith("dlprof-lite: warning:") and "good.sqlite" in line
        for line in proc.stderr.splitlines()
    ), proc.stderr


def test_no_good_input_names_each_failure(inputs, tmp_path: Path) -> None:
    _, bad = inputs
    other = tmp_path / "other.sqlite"
    other.write_bytes(b"")
    out = tmp_path / "none"
    proc = cli(str(bad), str(other), "-o", str(out), "-j", "2", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("dlprof-lite: error: none of the 2 inputs could be analysed: ")
    assert "bad.sqlite" in line and "other.sqlite" in line
    assert not out.exists()


def test_quiet_prints_the_summary_warnings(inputs, tmp_path: Path) -> None:
    good, _ = inputs
    out = tmp_path / "one.dlprof"
    proc = cli(str(good), "-o", str(out), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"report: {out}\n"
    warnings = [line for line in proc.stderr.splitlines() if line.strip()]
    assert warnings and all(w.startswith("dlprof-lite: warning: ") for w in warnings), warnings
    # The same warnings as the report's own summary (the oracle: summary.json).
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert doc["warnings"]
    assert [w.removeprefix("dlprof-lite: warning: ") for w in warnings] == [
        " ".join(w.split()) for w in doc["warnings"]
    ]
