"""Reading a written report folder back into a :class:`Report` (``dlprof_lite.open_report``).

The JSON files are the faithful form: each table's ``dtypes`` (and ``categories``) give the
frame back with the dtypes it was written with, floats keep every digit, and ``summary.json``
holds every list of the :class:`Summary`. A folder written with ``csv`` only is read from the
CSV files; their dtypes are pandas' inference, and the summary's GPU list is not in them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.api.types import pandas_dtype

from dlprof_lite.errors import InputError
from dlprof_lite.report.build import TABLES, Report
from dlprof_lite.report.frames import empty_report
from dlprof_lite.report.metrics import SCHEMA, column_names
from dlprof_lite.report.ranks import empty_ranks
from dlprof_lite.report.summary_types import Advice, Summary, build_summary, scalar
from dlprof_lite.report.timeline import empty_timeline
from dlprof_lite.report.writers import unquote_cell

# Tables a report folder may lack (written by an older dlprof-lite): how to read their absence.
OPTIONAL: dict[str, Callable[[], pd.DataFrame]] = {"timeline": empty_timeline,
                                                   "ranks": empty_ranks}  # fmt: skip


def open_report(folder: str | Path) -> Report:
    """The report written in ``folder`` (by ``Report.save`` or the command line)."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: no such report folder")
    if not any((root / f"summary.{s}").is_file() for s in ("json", "csv")):
        raise InputError(f"{root}: not a dlprof-lite report folder (no summary.json or .csv)")
    tables = [name for name in TABLES if name != "summary" and name not in OPTIONAL]
    frames = {name: _read_table(root, name) for name in tables}
    for name, empty in OPTIONAL.items():
        present = any((root / f"{name}.{s}").is_file() for s in ("json", "csv"))
        frames[name] = _read_table(root, name) if present else empty()
    return Report(summary=_read_summary(root, frames["advice"]), **frames)


def _load_json(path: Path, table: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: not a readable report file ({err})") from err
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("table") != table:
        raise InputError(f"{path}: not a {SCHEMA} {table!r} table")
    return doc


def _read_table(root: Path, name: str) -> pd.DataFrame:
    path = root / f"{name}.json"
    if path.is_file():
        return _from_json(path, name)
    path = root / f"{name}.csv"
    if not path.is_file():
        raise InputError(f"{root}: incomplete report, no {name}.json or {name}.csv")
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return empty_report(name)
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: not a readable report table ({err})") from err
    if not len(frame):
        return empty_report(name)
    # The writer quoted text cells that a spreadsheet would run as formulas: undo it.
    text = [c for c in frame.columns if frame[c].dtype == object
            or isinstance(frame[c].dtype, pd.StringDtype)]  # fmt: skip
    return frame.assign(**{str(c): frame[c].map(unquote_cell) for c in text})


def _from_json(path: Path, name: str) -> pd.DataFrame:
    doc = _load_json(path, name)
    dtypes: dict[str, str] = doc.get("dtypes") or {c: "object" for c in column_names(name)}
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise InputError(f"{path}: no rows")
    columns = list(dtypes)
    data = {c: [r.get(c) for r in rows] for c in columns}
    frame = pd.DataFrame({c: pd.Series(data[c], dtype="object") for c in columns})
    categories: dict[str, list[Any]] = doc.get("categories") or {}
    try:
        for c, dtype in dtypes.items():
            if dtype == "category":
                frame[c] = frame[c].astype(pd.CategoricalDtype(categories.get(c)))
            elif dtype != "object":
                frame[c] = frame[c].astype(pandas_dtype(dtype))
    except (TypeError, ValueError) as err:
        raise InputError(f"{path}: a column does not match its dtype ({err})") from err
    return frame


def _read_summary(root: Path, advice: pd.DataFrame) -> Summary:
    path = root / "summary.json"
    if path.is_file():
        return Summary.from_document(_load_json(path, "summary"))
    # CSV only: the flat row; the advice from advice.csv, the warnings split back.
    row = _read_table(root, "summary")
    flat = {str(k): scalar(v) for k, v in row.iloc[0].items()} if len(row) else {}
    warnings = str(flat.get("warnings") or "")
    rows = [{str(k): scalar(v) for k, v in r.items()} for r in advice.to_dict("records")]
    return build_summary(
        flat,
        warnings=[w for w in warnings.split("; ") if w],
        advice=[Advice(**r) for r in rows],  # type: ignore[arg-type]
    )
