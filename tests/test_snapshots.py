"""Whole reports of three real corpus exports against stored snapshots, and against nsys.

The three exports differ on purpose: the oldest schema (cuDF, nsys 2020.3, library NVTX ranges
that become iterations), a DLProf/pyprof run (nsys 2022.1, JSON NVTX payloads, conv layers)
and the newest (a torchrun transformer slice, nsys 2026.2, two processes, NCCL ranges).

For each, ``tests/snapshots/<case>/`` holds the flat summary row (``summary.json``) and, per
table, its column list, dtypes, row count, first rows and the sum of every numeric column
(``<table>.json``): small files, yet a change anywhere in a table moves its sums. Numbers
compare with a relative tolerance of 1e-9 (float noise from summation order), everything else
exactly; a mismatch lists every differing cell by its path.

The snapshot only says "nothing changed"; whether the numbers are right is checked against the
real ``nsys stats`` on the same file: kernel time and count, per-kernel totals (the live table
and the stored top rows), memcpy/memset totals, and every NVTX range name's instances and
total time (``nvtxsum``, against the live table and the stored sums).

The report is made with ``dlprof_lite.analyze(..., all_iterations=True)`` (tables over the
whole run, as nsys stats counts); the same report written with ``Report.save``
and read back with ``dlprof_lite.open_report`` must match the same snapshot.

After an intended change of the report, regenerate the snapshots and review their diff::

    DLPROF_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_snapshots.py
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.report.model import Report
from dlprof_lite.rules.templates import template
from nsys_oracle import nsys_report

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("DLPROF_UPDATE_SNAPSHOTS", "") not in ("", "0")
CASES = {
    "cudf-nsys2020.3": "quasiben__nvtx-examples__cudf.sqlite",
    "dlprof-nsys2022.1": "MohanadOdema__DLProf__nsys_profile.sqlite",
    "torchrun-nsys2026.2": "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite",
}
TABLES = ("kernels", "ranges", "layers", "iterations", "advice")
TOP = 8  # rows kept per table: enough to see the order, small enough to review
REL = 1e-9

Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]


@cache
def report_of(case: str) -> Report:
    # Whole-run tables (the window is tested in test_layer_table.py): nsys stats sums the run.
    return dlprof_lite.analyze(CORPUS / CASES[case], all_iterations=True)


def plain(value: object) -> Json:
    """One cell as a JSON value: missing (None, NaN, NA) is null, numpy scalars are Python's."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


def summary_snapshot(report: Report) -> dict[str, Json]:
    row: dict[str, object] = dict(report.summary.row())
    # The absolute path of the corpus differs between machines; the file name does not.
    row["source"] = Path(str(row["source"])).name
    return {str(k): plain(v) for k, v in row.items()}


def table_snapshot(frame: pd.DataFrame) -> dict[str, Json]:
    numeric = [
        c for c in frame.columns
        if pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
    ]  # fmt: skip
    return {
        "columns": [str(c) for c in frame.columns],
        "dtypes": {str(c): str(t) for c, t in frame.dtypes.items()},
        "rows": len(frame),
        "sums": {str(c): plain(frame[c].sum()) for c in numeric},
        "top": [
            {str(k): plain(v) for k, v in row.items()}
            for row in frame.head(TOP).to_dict(orient="records")
        ],
    }


def snapshot(report: Report) -> dict[str, dict[str, Json]]:
    files: dict[str, dict[str, Json]] = {"summary": summary_snapshot(report)}
    for table in TABLES:
        files[table] = table_snapshot(getattr(report, table))
    return files


def differences(stored: Json, now: Json, where: str) -> list[str]:
    """Every cell where ``now`` differs from ``stored`` (numbers to ``REL``), by its path."""
    if isinstance(stored, dict) and isinstance(now, dict):
        out = [f"{where}.{k}: in the snapshot, missing now" for k in stored if k not in now]
        out += [f"{where}.{k}: new (not in the snapshot)" for k in now if k not in stored]
        for key in stored.keys() & now.keys():
            out += differences(stored[key], now[key], f"{where}.{key}")
        return out
    if isinstance(stored, list) and isinstance(now, list):
        if len(stored) != len(now):
            return [f"{where}: {len(stored)} items in the snapshot, {len(now)} now"]
        return [
            d
            for i, (a, b) in enumerate(zip(stored, now))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    if _is_number(stored) and _is_number(now):
        if stored == now or math.isclose(float(stored), float(now), rel_tol=REL):  # type: ignore[arg-type]
            return []
    elif type(stored) is type(now) and stored == now:
        return []
    return [f"{where}: snapshot {stored!r} != now {now!r}"]


def _is_number(value: Json) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def write_snapshot(folder: Path, files: Mapping[str, Json]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = json.dumps(content, indent=1, ensure_ascii=False, allow_nan=False)
        (folder / f"{name}.json").write_text(text + "\n", encoding="utf-8")


def read_snapshot(folder: Path, name: str) -> Json:
    path = folder / f"{name}.json"
    if not path.is_file():
        pytest.fail(f"no snapshot {path}: create it with DLPROF_UPDATE_SNAPSHOTS=1")
    loaded: Json = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def assert_matches(case: str, files: Mapping[str, Json], what: str) -> None:
    folder = SNAPSHOTS / case
    found: list[str] = []
    for name, now in files.items():
        found += differences(read_snapshot(folder, name), now, name)
    shown = "\n  ".join(found[:40]) + ("\n  ..." if len(found) > 40 else "")
    assert not found, (
        f"{case}: {what} differs from tests/snapshots/{case}/ in {len(found)} places:\n  "
        f"{shown}\nIf the change is intended: DLPROF_UPDATE_SNAPSHOTS=1 pytest "
        "tests/test_snapshots.py, and review the snapshot diff."
    )


@pytest.mark.corpus
@pytest.mark.parametrize("case", CASES)
def test_report_equals_its_snapshot(corpus_dir: Path, case: str) -> None:
    files = snapshot(report_of(case))
    if UPDATE:
        write_snapshot(SNAPSHOTS / case, files)
    assert_matches(case, files, "the report of dlprof_lite.analyze")


@pytest.mark.corpus
@pytest.mark.parametrize("case", CASES)
def test_saved_and_reopened_report_equals_the_same_snapshot(
    corpus_dir: Path, tmp_path: Path, case: str
) -> None:
    folder = report_of(case).save(tmp_path / case)
    assert_matches(case, snapshot(dlprof_lite.open_report(folder)), "the reopened report")


def _nsys_range_names(ranges: pd.DataFrame) -> pd.Series:
    """nsys names a range of a named domain ``domain:name``."""
    name = ranges["name"].astype(str)
    domain = ranges["domain"].astype(str)
    return name.where(domain == "", domain + ":" + name)


def _check_kernels(report: Report, stored: Json, nsys: str, export: Path) -> None:
    oracle = nsys_report(nsys, export, "gpukernsum")
    # gpukernsum splits a name by grid and block size: sum its rows per name.
    theirs = oracle.groupby("Name")[["Instances", "Total Time (ns)"]].sum()
    summary = summary_snapshot(report)
    assert summary["kernel_ns"] == oracle["Total Time (ns)"].sum() > 0
    assert summary["kernel_count"] == oracle["Instances"].sum()
    ours = report.kernels.set_index(report.kernels["name"].astype(str))
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["total_ns"].to_numpy() == theirs["Total Time (ns)"].to_numpy()).all()
    assert (ours["instances"].to_numpy() == theirs["Instances"].to_numpy()).all()
    assert isinstance(stored, dict) and isinstance(stored["top"], list)
    for row in stored["top"]:  # the snapshot's own figures are nsys's too
        assert isinstance(row, dict)
        want = theirs.loc[str(row["name"])]
        assert (row["instances"], row["total_ns"]) == (want["Instances"], want["Total Time (ns)"])


def _check_memory(report: Report, nsys: str, export: Path) -> None:
    oracle = nsys_report(nsys, export, "gpumemtimesum")
    summary = summary_snapshot(report)
    for kind in ("memcpy", "memset"):
        rows = oracle[oracle["Operation"].str.contains(kind)] if len(oracle) else oracle
        want_ns = int(rows["Total Time (ns)"].sum()) if len(rows) else 0
        want_count = int(rows["Count"].sum()) if len(rows) else 0
        assert (summary[f"{kind}_ns"], summary[f"{kind}_count"]) == (want_ns, want_count), kind


def _check_ranges(report: Report, stored: Json, nsys: str, export: Path) -> None:
    oracle = nsys_report(nsys, export, "nvtxsum")
    # The ranges table has one row per path (a counter's names under their template,
    # rules/templates.py): per template, its rows add up to nsys's rows.
    theirs = oracle.groupby(oracle["Range"].astype(str).map(template))[
        ["Instances", "Total Time (ns)"]].sum()  # fmt: skip
    ranges = report.ranges
    ours = ranges.groupby(_nsys_range_names(ranges).map(template))[["instances", "wall_ns"]].sum()
    assert len(ours) > 0
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["instances"].to_numpy() == theirs["Instances"].to_numpy()).all()
    assert (ours["wall_ns"].to_numpy() == theirs["Total Time (ns)"].to_numpy()).all()
    assert isinstance(stored, dict) and isinstance(stored["sums"], dict)
    assert stored["sums"]["instances"] == oracle["Instances"].sum()
    assert stored["sums"]["wall_ns"] == oracle["Total Time (ns)"].sum()


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("case", CASES)
def test_key_numbers_equal_nsys_stats(corpus_dir: Path, nsys: str, case: str) -> None:
    """The live report's key numbers and the stored snapshot's are those of ``nsys stats``."""
    export = CORPUS / CASES[case]
    report = report_of(case)
    folder = SNAPSHOTS / case
    _check_kernels(report, read_snapshot(folder, "kernels"), nsys, export)
    _check_memory(report, nsys, export)
    _check_ranges(report, read_snapshot(folder, "ranges"), nsys, export)
    stored = read_snapshot(folder, "summary")
    assert isinstance(stored, dict)
    assert stored["kernel_ns"] == summary_snapshot(report)["kernel_ns"]
    assert stored["kernel_count"] == summary_snapshot(report)["kernel_count"]
