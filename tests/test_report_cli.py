"""``dlprof-lite report FOLDER``: the page and the trace written again from a folder's tables,
equal to what ``analyze`` wrote, never over an existing file without ``--force``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlprof_lite.cli import main
from make_profile import make_profile


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "p.sqlite"
    make_profile(path, iterations=8, layers=3, kernels_per_layer=2, seed=5)
    return path


def test_the_page_and_trace_again_equal_the_first(export, tmp_path, capsys) -> None:
    first = tmp_path / "first"
    assert main(["analyze", str(export), "-o", str(first), "--quiet", "--no-db"]) == 0
    tables_only = tmp_path / "tables"
    assert main(["analyze", str(export), "-o", str(tables_only), "--quiet", "--no-db",
                 "--formats", "csv,json"]) == 0  # fmt: skip
    assert not (tables_only / "report.html").exists()
    capsys.readouterr()
    assert main(["report", str(tables_only), "--html"]) == 0
    assert capsys.readouterr().out == f"wrote {tables_only / 'report.html'}\n"
    # The page comes from the tables alone: the same page as analyze wrote.
    html = (tables_only / "report.html").read_text(encoding="utf-8")
    assert html == (first / "report.html").read_text(encoding="utf-8")
    trace = (first / "trace.json").read_bytes()
    (first / "trace.json").unlink()
    assert main(["report", str(first), "--trace"]) == 0
    assert (first / "trace.json").read_bytes() == trace


def test_existing_files_need_force(export, tmp_path, capsys) -> None:
    folder = tmp_path / "r"
    assert main(["analyze", str(export), "-o", str(folder), "--quiet", "--no-db"]) == 0
    stamp = (folder / "report.html").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert (folder / "report.html").stat().st_mtime_ns == stamp
    assert main(["report", str(folder), "--force"]) == 0  # neither named: both
    assert json.loads((folder / "trace.json").read_text())["traceEvents"]


def test_not_a_report_folder_is_one_line(tmp_path, capsys) -> None:
    assert main(["report", str(tmp_path), "--html"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlprof-lite: error: ") and err.count("\n") == 1
