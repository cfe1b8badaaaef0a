"""``open_report(analyze(p).save(d))`` is the report written, on every corpus export (issue 26,
item 7): every table, column order, dtypes, categories and every cell, a missing value of one
kind (None, NaN, pandas NA) read back as the same kind, and the summary with its lists.

``pandas.testing.assert_frame_equal`` takes None and NaN in an object column for equal; a
reader of the JSON (``null``) does not, so cells are compared here with their kind of missing.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import dlprof_lite
from conftest import corpus_files
from dlprof_lite.report.model import TABLES

CORPUS = corpus_files()


def _cell(value: object) -> tuple[object, ...]:
    """A cell with its kind of missing: None, NaN and NA are three different things."""
    if value is None:
        return ("None",)
    if value is pd.NA:
        return ("NA",)
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return (type(value).__name__, value)


def differences(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """Where two frames differ: columns, dtypes, categories or a cell (first few)."""
    if list(a.columns) != list(b.columns):
        return [f"columns {list(a.columns)} != {list(b.columns)}"]
    if len(a) != len(b):
        return [f"{len(a)} rows != {len(b)}"]
    out = []
    for name in a.columns:
        x, y = a[name], b[name]
        if x.dtype != y.dtype:
            out.append(f"{name}: dtype {x.dtype} != {y.dtype}")
            continue
        left = [_cell(v) for v in x.astype(object).tolist()]
        right = [_cell(v) for v in y.astype(object).tolist()]
        bad = [(i, p, q) for i, (p, q) in enumerate(zip(left, right)) if p != q]
        if bad:
            out.append(f"{name}: {len(bad)} cell(s) differ, e.g. row {bad[0]}")
    return out


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_a_saved_report_reads_back_equal(corpus_dir: Path, path: Path, tmp_path: Path) -> None:
    report = dlprof_lite.analyze(path)
    back = dlprof_lite.open_report(report.save(tmp_path / "report"))
    assert back.summary == report.summary
    found = {t: differences(report.table(t), back.table(t)) for t in TABLES}
    assert not any(found.values()), {t: d for t, d in found.items() if d}
