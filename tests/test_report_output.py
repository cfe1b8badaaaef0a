"""Report files and folders: formats, schema, atomic writes, never a half-written report."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from dlprof_lite.errors import OutputError
from dlprof_lite.render import output
from dlprof_lite.render.output import GRAPH_FILE, PAGE_FILE, TRACE_FILE
from dlprof_lite.render.writers import WRITERS, JsonWriter, Table
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import SCHEMA, column_names
from dlprof_lite.report.model import TABLES
from example_profiles import training_profile


@pytest.fixture(scope="module")
def report():
    return build_report(training_profile())


def written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def no_leftovers(parent: Path) -> bool:
    """No staging folder, set-aside old folder or temporary file remains."""
    return not [p for p in parent.rglob(".*") if p.name.endswith((".partial", ".old", ".tmp"))]


def test_report_folder_holds_every_table_in_every_format(report, tmp_path: Path) -> None:
    formats = ("csv", "json", "html")
    target = output.write_report(report, tmp_path / "r.dlprof", formats, force=False)
    assert target == tmp_path / "r.dlprof"
    assert written(target) == sorted(
        [*(f"{t}.{f}" for t in TABLES for f in ("csv", "json")), GRAPH_FILE, PAGE_FILE,
         TRACE_FILE]
    )  # fmt: skip
    assert no_leftovers(tmp_path)


@pytest.mark.parametrize("table", TABLES)
def test_csv_columns_are_the_declared_columns(report, tmp_path: Path, table: str) -> None:
    target = output.write_report(report, tmp_path / "r", ("csv",), force=False)
    with open(target / f"{table}.csv", newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header == column_names(table)
    assert written(target) == sorted([*(f"{t}.csv" for t in TABLES), GRAPH_FILE, TRACE_FILE])


@pytest.mark.parametrize("table", [t for t in TABLES if t != "summary"])
def test_json_tables(report, tmp_path: Path, table: str) -> None:
    target = output.write_report(report, tmp_path / "r", ("json",), force=False)
    doc = json.loads((target / f"{table}.json").read_text(encoding="utf-8"))
    assert (doc["schema"], doc["table"]) == (SCHEMA, table)
    assert list(doc["definitions"]) == column_names(table)
    assert len(doc["rows"]) == len(getattr(report, table))
    for row in doc["rows"]:
        assert list(row) == column_names(table)


def test_summary_json(report, tmp_path: Path) -> None:
    target = output.write_report(report, tmp_path / "r", ("json",), force=False)
    doc = json.loads((target / "summary.json").read_text(encoding="utf-8"))
    assert (doc["schema"], doc["table"]) == (SCHEMA, "summary")
    for key in column_names("summary"):
        assert key in doc and key in doc["definitions"], key
    assert doc["gpus"][0]["compute_capability"] == "9.0"
    assert [a["metric"] for a in doc["advice"]][:2] == [
        "eligible_non_tc_share",
        "launch_overhead_pct",
    ]
    assert "advice[].citation" in doc["definitions"] and "gpus[].sm_count" in doc["definitions"]
    # 7, and the idle causes past 5 % of the step: the loop's code, fc1's host work, the optimizer
    assert doc["advice_count"] == len(doc["advice"]) == 10
    # the fixture records no DataLoader length: the only warning says there is no projection
    assert doc["steady_start"] is None and [w.split(":")[0] for w in doc["warnings"]] == [
        "no projected training time"
    ]
    # launch overhead: 1290 + 1290 of 5000 ns (each step's copy gap clipped to its step)
    assert doc["kernel_ns"] == 1110 and doc["launch_overhead_pct"] == pytest.approx(51.6)


def test_json_has_no_nan(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"a": [1.0, float("nan")], "b": pd.array([1, None], dtype="Int64")})
    doc = json.loads(JsonWriter().render(Table("kernels", frame)))
    assert doc["rows"] == [{"a": 1.0, "b": 1}, {"a": None, "b": None}]


def test_report_stem_and_default_names(tmp_path: Path) -> None:
    assert output.report_stem(Path("run.nsys-rep.sqlite")) == "run"
    assert output.report_stem(Path("a.b.qdrep")) == "a.b"
    assert output.report_stem(Path(".sqlite")) == "report"
    src = tmp_path / "run.sqlite"
    assert output.default_report_dir(src) == tmp_path / "run.dlprof"
    (tmp_path / "run.dlprof").mkdir()
    (tmp_path / "run.dlprof-2").write_text("a file takes the name too")
    assert output.default_report_dir(src) == tmp_path / "run.dlprof-3"


def test_existing_target_is_refused_without_force(report, tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="already exists; pass --force"):
        output.write_report(report, target, ("csv",), force=False)
    assert written(target) == ["keep.txt"]
    assert no_leftovers(tmp_path)


def test_force_replaces_a_report_but_never_another_folder(report, tmp_path: Path) -> None:
    target = output.write_report(report, tmp_path / "out", ("csv",), force=False)
    (target / "stale.txt").write_text("old")
    output.write_report(report, target, ("json",), force=True)
    assert written(target) == sorted([*(f"{t}.json" for t in TABLES), GRAPH_FILE, TRACE_FILE])
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(OutputError, match="not a dlprof-lite report folder"):
        output.write_report(report, home, ("csv",), force=True)
    assert written(home) == ["thesis.tex"]
    file_target = tmp_path / "file"
    file_target.write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        output.write_report(report, file_target, ("csv",), force=True)
    assert no_leftovers(tmp_path)


class Boom(RuntimeError):
    pass


class FailingWriter:
    """Writes two files, then fails: a disk full or a bug halfway through a report."""

    suffix = "csv"

    def __init__(self) -> None:
        self.calls = 0

    def render(self, table: Table) -> str:
        self.calls += 1
        if self.calls > 2:
            raise Boom("writer failed")
        return "a\n1\n"


def test_failure_midway_leaves_no_folder(report, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(WRITERS, "csv", FailingWriter())
    with pytest.raises(Boom):
        output.write_report(report, tmp_path / "new", ("csv",), force=False)
    assert written(tmp_path) == []


def test_failure_midway_with_force_keeps_the_old_report(report, tmp_path: Path, monkeypatch):
    target = output.write_report(report, tmp_path / "out", ("json",), force=False)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    monkeypatch.setitem(WRITERS, "csv", FailingWriter())
    with pytest.raises(Boom):
        output.write_report(report, target, ("csv",), force=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert written(tmp_path) == ["out"]


def test_interrupt_midway_leaves_no_folder(report, tmp_path: Path, monkeypatch) -> None:
    def interrupted(*_args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "atomic_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        output.write_report(report, tmp_path / "new", ("csv",), force=False)
    assert written(tmp_path) == []


def test_atomic_write_replaces_whole_files_only(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.csv"
    output.atomic_write(path, "old\n")

    def broken_replace(src, dst) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        output.atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert written(tmp_path) == ["t.csv"]


def test_files_follow_the_umask(report, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        target = output.write_report(report, tmp_path / "r", ("csv",), force=False)
    finally:
        os.umask(old)
    assert (target.stat().st_mode & 0o777) == 0o755
    assert ((target / "summary.csv").stat().st_mode & 0o777) == 0o644
