"""Damaged and hostile report folders (issue 40): one error line or the right result.

Each case of the issue is a folder written by dlprof-lite (the hand-built example profile,
in JSON and CSV) and then changed the way the issue's hostile sender did. Every reader sees
it: the notebook API (``open_report``: ``InputError`` with the line), ``dlprof-lite report``
and ``dlprof-lite compare`` (in-process: exit 2, exactly one ``dlprof-lite: error:`` line
naming the file, no traceback, nothing written). The oracles are the cases themselves (the
file and field each message must name) and the folder's bytes, unchanged. The limits cases
(a 20 MB CSV of 10 M rows, 10 M ``{}`` rows, a 200 MB string, 100k-deep JSON, 200k dtype
entries) must end within seconds and a few hundred MB.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import dlprof_lite
from conftest import CORPUS, missing
from dlprof_lite.cli import main
from dlprof_lite.errors import InputError
from dlprof_lite.render import read_schema as rs
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import REPORTS, column_names
from example_profiles import training_profile

Edit = Callable[[Path], None]
# Real exports whose reports hold every table with rows of every kind (layers, ranks, ...).
CORPUS_SOURCES = (
    "MohanadOdema__DLProf__nsys_profile.sqlite",
    "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite",
    "amir-ghz__DynamicViT__nsys_profile.sqlite",
)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One report folder as dlprof-lite writes it (tables in JSON and CSV)."""
    root = tmp_path_factory.mktemp("written")
    return build_report(training_profile()).save(root / "good", formats=("csv", "json"))


def copy(written: Path, tmp_path: Path, *, csv_only: bool = False) -> Path:
    folder = tmp_path / "r"
    shutil.copytree(written, folder, symlinks=True)
    for name in ("report.html", "trace.json", "layers.dot"):
        (folder / name).unlink(missing_ok=True)
    if csv_only:
        for path in folder.glob("*.json"):
            path.unlink()
    return folder


def state(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.is_symlink() and not path.name.startswith("fifo"):
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[path.name] = os.readlink(path) if path.is_symlink() else "special"
    return out


def cli(args: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue().splitlines()


def refused(folder: Path, good: Path, tmp_path: Path, *needles: str) -> str:
    """Every reader refuses ``folder`` with one line holding each of ``needles``; the
    folder is unchanged. Returns the line."""
    before = state(folder)
    with pytest.raises(InputError) as caught:
        dlprof_lite.open_report(folder)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    for args in (["report", str(folder)],
                 ["compare", str(good), str(folder), "-o", str(tmp_path / "cmp"), "--quiet"]):
        code, lines = cli(args)
        assert code == 2, (args, lines)
        assert len(lines) == 1 and lines[0].startswith("dlprof-lite: error: "), lines
        assert "unexpected" not in lines[0] and all(n in lines[0] for n in needles), lines
    assert not (tmp_path / "cmp").exists()
    assert state(folder) == before
    return message


def edit_json(folder: Path, table: str, change: Callable[[dict], object]) -> None:
    path = folder / f"{table}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")


def edit_text(folder: Path, name: str, change: Callable[[str], str]) -> None:
    path = folder / name
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")


def set_cell(table: str, column: str, value: object, row: int = 0) -> Edit:
    def edit(folder: Path) -> None:
        edit_json(folder, table, lambda d: d["rows"][row].__setitem__(column, value))

    return edit


def set_summary(field: str, value: object) -> Edit:
    return lambda folder: edit_json(folder, "summary", lambda d: d.__setitem__(field, value))


# --- JSON: wrong types, values outside their domain, the writer's schema -------------------

JSON_CASES: dict[str, tuple[Edit, tuple[str, ...]]] = {
    "text in a number column": (set_cell("layers", "forward_gpu_ns", "12"),
                                ("layers.json", "forward_gpu_ns", "'12'")),
    "a list in a number column": (set_cell("layers", "gpu_ns", [1]), ("layers.json", "gpu_ns")),
    "an object in a text column": (set_cell("kernels", "api_name", {"a": 1}),
                                   ("kernels.json", "api_name", "not text")),
    "a row that is a list": (lambda f: edit_json(f, "layers",
                                                 lambda d: d["rows"].__setitem__(0, [1, 2])),
                             ("layers.json", "not an object")),
    "a list in a summary number": (set_summary("kernel_ns", [1, 2]),
                                   ("summary.json", "kernel_ns", "not an integer")),
    "text in a summary number": (set_summary("iterations_median_ns", "fast"),
                                 ("summary.json", "iterations_median_ns")),
    "a GPU that is not an object": (set_summary("gpus", ["H100"]), ("summary.json", "gpus")),
    "a narrow dtype (745270 in int8)": (
        lambda f: edit_json(f, "layers", lambda d: (
            d["dtypes"].__setitem__("forward_gpu_ns", "int8"),
            d["rows"][0].__setitem__("forward_gpu_ns", 745270))),
        ("layers.json", "forward_gpu_ns", "int8")),
    "a negative iteration time": (set_cell("iterations", "wall_ns", -500_000_000_000),
                                  ("iterations.json", "wall_ns", "below 0")),
    "a negative layer time": (set_cell("layers", "step_forward_gpu_ns", -1.5),
                              ("layers.json", "step_forward_gpu_ns", "below 0")),
    "a share above 1": (set_cell("kernels", "pct_kernel_time", 250.0),
                        ("kernels.json", "pct_kernel_time", "outside 0-100")),
    "a negative summary duration": (set_summary("iterations_median_ns", -5.0),
                                    ("summary.json", "iterations_median_ns", "below 0")),
    "a row with an extra cell": (set_cell("advice", "extra", "x"),
                                 ("advice.json", "row 0 has 9 cells")),
    "a row without a cell": (
        lambda f: edit_json(f, "iterations", lambda d: d["rows"][1].pop("in_window")),
        ("iterations.json", "row 1")),
    "a column the writer does not write": (
        lambda f: edit_json(f, "kernels", lambda d: d["dtypes"].__setitem__("x", "int64")),
        ("kernels.json", "'x'", "not one of the")),
    "a missing column": (
        lambda f: edit_json(f, "iterations", lambda d: (
            d["dtypes"].pop("in_window"), [r.pop("in_window") for r in d["rows"]])),
        ("iterations.json", "no column 'in_window'")),
    "a name that is not among its categories": (set_cell("kernels", "name", "other_kernel"),
                                                ("kernels.json", "not among its categories")),
    "another schema version": (lambda f: edit_json(f, "layers",
                                                   lambda d: d.__setitem__("schema", "v9")),
                               ("layers.json", "schema 'v9'")),
    "an unknown summary field": (set_summary("surprise", 1), ("summary.json", "'surprise'")),
    "a missing summary field": (lambda f: edit_json(f, "summary", lambda d: d.pop("kernel_ns")),
                                ("summary.json", "no summary field 'kernel_ns'")),
    "advice_count not the advice listed": (set_summary("advice_count", 99),
                                           ("summary.json", "advice_count")),
    "an iteration fewer than counted": (
        lambda f: edit_json(f, "iterations", lambda d: d["rows"].pop()),
        ("iterations has 2 rows but the summary counts 3",)),
}


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_a_damaged_json_table_is_one_line(case: str, written: Path, tmp_path: Path) -> None:
    edit, needles = JSON_CASES[case]
    folder = copy(written, tmp_path)
    edit(folder)
    refused(folder, written, tmp_path, *needles)


@pytest.mark.parametrize("token", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_are_refused(token: str, written: Path, tmp_path: Path) -> None:
    """Infinity in an integer column, NaN in a layer time: never shown as 0 ns or -100 %."""
    folder = copy(written, tmp_path)
    edit_text(folder, "iterations.json",
              lambda t: t.replace('"wall_ns": 2000', f'"wall_ns": {token}', 1))
    assert f'"wall_ns": {token}' in (folder / "iterations.json").read_text()
    refused(folder, written, tmp_path, "iterations.json")


def test_a_5000_digit_integer_is_refused(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    edit_text(folder, "kernels.json",
              lambda t: t.replace('"instances": 2,', '"instances": ' + "9" * 5000 + ",", 1))
    assert "9" * 5000 in (folder / "kernels.json").read_text()
    refused(folder, written, tmp_path, "kernels.json")


def test_truncated_json_is_refused(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    path = folder / "layers.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    refused(folder, written, tmp_path, "layers.json", "not valid JSON")


# --- CSV-only folders --------------------------------------------------------------------

CSV_CASES: dict[str, tuple[Callable[[str], str], str, tuple[str, ...]]] = {
    "an extra column in advice.csv": (
        lambda t: "\n".join(line + ",x" for line in t.splitlines()) + "\n", "advice.csv",
        ("advice.csv", "not one of the")),
    "no in_window column": (
        lambda t: "\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != 6)
                            for line in t.splitlines()) + "\n",
        "iterations.csv", ("iterations.csv", "no column 'in_window'")),
    "a row longer than the header": (
        lambda t: t.replace("\n", ",7\n", 2).replace(",7\n", "\n", 1), "layers.csv",
        ("layers.csv", "line 2", "cells, the header has")),
    "a layers.csv cut mid-line": (lambda t: t[: len(t) - 5], "layers.csv",
                                  ("layers.csv", "truncated")),
    "a summary.csv of the header only": (lambda t: t.split("\n")[0] + "\n", "summary.csv",
                                         ("summary.csv", "0 summary rows")),
    "a summary.csv cut mid-row": (lambda t: t[: len(t) // 2], "summary.csv",
                                  ("summary.csv", "truncated")),
    "inf in a number column": (lambda t: _cell(t, "forward_gpu_ns", "inf"), "layers.csv",
                               ("layers.csv", "forward_gpu_ns", "not a finite number")),
    "nan in a number column": (lambda t: _cell(t, "forward_gpu_ns", "nan"), "layers.csv",
                               ("layers.csv", "forward_gpu_ns")),
    "text in a number column": (lambda t: _cell(t, "gpu_ns", "lots"), "layers.csv",
                                ("layers.csv", "gpu_ns")),
    "a negative iteration time": (lambda t: _cell(t, "wall_ns", "-500"), "iterations.csv",
                                  ("iterations.csv", "wall_ns", "below 0")),
    "not True or False": (lambda t: _cell(t, "warmup", "maybe"), "iterations.csv",
                          ("iterations.csv", "warmup")),
    "a NUL byte": (lambda t: t.replace("\n", "\x00\n", 2), "kernels.csv", ("kernels.csv",)),
    "a 2**64 count": (lambda t: _cell(t, "instances", str(2**64)), "kernels.csv",
                      ("kernels.csv", "instances")),
}


def _cell(text: str, column: str, value: str) -> str:
    lines = text.splitlines()
    at = lines[0].split(",").index(column)
    cells = lines[1].split(",")
    assert len(cells) == len(lines[0].split(",")), "the first row has no quoted comma"
    cells[at] = value
    lines[1] = ",".join(cells)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_a_damaged_csv_table_is_one_line(case: str, written: Path, tmp_path: Path) -> None:
    change, name, needles = CSV_CASES[case]
    folder = copy(written, tmp_path, csv_only=True)
    edit_text(folder, name, change)
    refused(folder, written, tmp_path, *needles)


def test_non_utf8_csv_is_refused(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path, csv_only=True)
    path = folder / "kernels.csv"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\xff\xfe\n", 1))
    refused(folder, written, tmp_path, "kernels.csv", "not UTF-8")


def test_a_csv_only_folder_reads_back_as_written(written: Path, tmp_path: Path) -> None:
    """The strict CSV reader gives the JSON's values (its dtypes follow from the cells)."""
    folder = copy(written, tmp_path, csv_only=True)
    back, faithful = dlprof_lite.open_report(folder), dlprof_lite.open_report(written)
    for name in ("kernels", "ranges", "layers", "iterations", "advice", "timeline", "ranks"):
        a, b = back.table(name), faithful.table(name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b)
        for column in a.columns:
            assert _plain(a[column]) == _plain(b[column]), (name, column)
    assert back.summary.totals == faithful.summary.totals


def _plain(series: pd.Series) -> list[object]:
    """Values to compare: missing as None (an empty CSV cell is also empty text)."""
    return [None if v is None or v is pd.NA or (isinstance(v, str) and not v)
            or (isinstance(v, float) and math.isnan(v)) else v
            for v in series.astype(object).tolist()]  # fmt: skip


# --- files that are not regular files inside the folder -----------------------------------


def test_a_symlink_where_a_report_file_belongs(written: Path, tmp_path: Path) -> None:
    """Even to a faithful copy: only regular files inside the folder are read."""
    folder = copy(written, tmp_path)
    outside = tmp_path / "outside.json"
    shutil.copy(folder / "summary.json", outside)
    (folder / "summary.json").unlink()
    (folder / "summary.json").symlink_to(outside)
    refused(folder, written, tmp_path, "summary.json", "symbolic link")


def test_a_symlink_loop_and_a_dangling_link(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    (folder / "layers.json").unlink()
    (folder / "layers.json").symlink_to(folder / "layers.json")
    refused(folder, written, tmp_path, "layers.json", "symbolic link")
    (folder / "layers.json").unlink()
    (folder / "layers.json").symlink_to(tmp_path / "nowhere")
    refused(folder, written, tmp_path, "layers.json", "symbolic link")


def test_a_fifo_is_refused_without_blocking(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    (folder / "kernels.json").unlink()
    os.mkfifo(folder / "kernels.json")
    started = time.monotonic()
    refused(folder, written, tmp_path, "kernels.json", "a FIFO")
    assert time.monotonic() - started < 30


def test_a_folder_where_a_table_belongs(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    (folder / "ranges.json").unlink()
    (folder / "ranges.json").mkdir()
    refused(folder, written, tmp_path, "ranges.json", "a folder")


@pytest.mark.parametrize("force", [False, True])
def test_report_html_never_replaces_a_link(written: Path, tmp_path: Path, force: bool) -> None:
    """A dangling symlink report.html is not replaced, with --force or without."""
    folder = copy(written, tmp_path)
    (folder / "report.html").symlink_to(tmp_path / "elsewhere.html")
    code, lines = cli(["report", str(folder), "--html", *(["--force"] if force else [])])
    assert code == 2 and len(lines) == 1 and "symbolic link" in lines[0], lines
    assert (folder / "report.html").is_symlink() and not (tmp_path / "elsewhere.html").exists()


def test_compare_refuses_a_linked_report_in_a_repeat_folder(written: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(written, runs / "run-1.dlprof")
    (runs / "run-2.dlprof").symlink_to(written)
    code, lines = cli(["compare", str(written), str(runs), "-o", str(tmp_path / "c")])
    assert code == 2 and len(lines) == 1 and "symbolic link" in lines[0], lines


# --- bounds before reading ----------------------------------------------------------------


def _bounded(folder: Path, good: Path, tmp_path: Path, *needles: str) -> None:
    """Refused within seconds, in a few hundred MB (this process's peak, which only rises)."""
    started, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InputError) as caught:
        dlprof_lite.open_report(folder)
    took = time.monotonic() - started
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    assert all(n in str(caught.value) for n in needles), str(caught.value)
    assert took < 10 and grew_mib < 400, (took, grew_mib)
    code, lines = cli(["report", str(folder)])
    assert code == 2 and len(lines) == 1, lines


def test_a_20_mb_iterations_csv_of_10m_rows(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path, csv_only=True)
    header = (folder / "iterations.csv").read_text().splitlines()[0]
    (folder / "iterations.csv").write_text(header + "\n" + "1\n" * 10_000_000)
    assert (folder / "iterations.csv").stat().st_size > 20_000_000
    _bounded(folder, written, tmp_path, "iterations.csv", "line 2")


def test_ten_million_empty_rows_in_layers_json(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    empty_rows = "{}," * 10_000_000
    edit_text(folder, "layers.json", lambda t: t.replace('"rows": [', '"rows": [' + empty_rows, 1))
    _bounded(folder, written, tmp_path, "layers.json", "JSON values")


def test_a_200_mb_string(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    path = folder / "kernels.json"
    text = path.read_text()
    with open(path, "w", encoding="utf-8") as fh:  # the name of a kernel, 200 MB long
        at = text.index('"name": "') + len('"name": "')
        fh.write(text[:at])
        for _ in range(200):
            fh.write("x" * 1_000_000)
        fh.write(text[at:])
    _bounded(folder, written, tmp_path, "kernels.json", "larger than 128 MiB")


def test_a_200_mb_summary_string_in_csv(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path, csv_only=True)
    path = folder / "summary.csv"
    header, row = path.read_text().splitlines()[:2]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + "\n" + "x" * 200_000_000 + row[row.index(","):] + "\n")
    _bounded(folder, written, tmp_path, "summary.csv", "larger than 16 MiB")


def test_json_100k_deep(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    (folder / "kernels.json").write_text("[" * 100_000 + "]" * 100_000)
    _bounded(folder, written, tmp_path, "kernels.json", "nested deeper")
    folder = copy(written, tmp_path / "b")
    deep = "[" * 100_000 + "]" * 100_000
    edit_text(folder, "summary.json", lambda t: t.replace('"gpus": [', f'"gpus": [{deep},', 1))
    _bounded(folder, written, tmp_path, "summary.json", "nested deeper")


def test_200k_dtype_entries(written: Path, tmp_path: Path) -> None:
    folder = copy(written, tmp_path)
    extra = {f"c{i}": "float64" for i in range(200_000)}
    edit_json(folder, "layers", lambda d: d["dtypes"].update(extra))
    assert (folder / "layers.json").stat().st_size > 4_000_000
    _bounded(folder, written, tmp_path, "layers.json", "'c0' (and 199999 more)")


def test_too_many_rows_and_list_entries_are_refused() -> None:
    with pytest.raises(InputError, match="more than dlprof-lite writes"):
        rs.typed_frame("advice", {c: "object" for c in column_names("advice")}, {},
                       [{}] * (rs.MAX_ROWS + 1), "x")  # fmt: skip
    with pytest.raises(InputError, match=r"warnings.*entries"):
        rs._list(["w"] * (rs.MAX_LIST_ITEMS + 1), "warnings", "x")


# --- the schema is the writer's ------------------------------------------------------------


@pytest.mark.parametrize("source", ["example", *CORPUS_SOURCES])
def test_column_kinds_are_the_written_dtypes(source: str, tmp_path: Path) -> None:
    """Every column the registry declares has the kind the writer's dtypes say, in the
    example and real corpus reports (a new text or true/false column must be named in
    read_schema); every real report reads back through the checks equal to itself."""
    if source == "example":
        report = build_report(training_profile())
    else:
        if not (CORPUS / source).is_file():
            missing(f"no corpus export {source}")
        report = dlprof_lite.analyze(CORPUS / source)
    for table in REPORTS:
        if table in ("summary", "runs", "clock_offsets"):  # a batch's tables, not a report's
            continue
        for column, dtype in report.table(table).dtypes.items():
            kind = rs.kind(str(column))
            assert str(dtype) in rs.DTYPES[kind], (table, column, dtype)
            if kind == "number" and str(dtype) != "object":
                assert pd.api.types.is_numeric_dtype(dtype), (table, column, dtype)
    back = dlprof_lite.open_report(report.save(tmp_path / "r", formats=("json",)))
    assert back.summary == report.summary
    for table in ("kernels", "ranges", "layers", "iterations", "advice", "timeline", "ranks"):
        pd.testing.assert_frame_equal(back.table(table), report.table(table))
