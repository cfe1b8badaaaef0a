"""Writers: one per output format, behind one two-member interface.

A writer turns a :class:`Table` into text; :mod:`dlprof_lite.render.output` decides where the
text goes and writes it atomically. Every JSON document carries the schema version, the
table name and the one-line definition of each column from the metric registry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import (
    ADVICE_REPORT,
    GPU_FIELDS,
    SCHEMA,
    SUMMARY_LISTS,
    column_names,
    definitions,
)
from dlprof_lite.report.summary_types import scalar


@dataclass(frozen=True)
class Table:
    """One report table: its rows, and for JSON optionally a document replacing ``rows``.

    ``name`` selects the column definitions; the file is ``<file or name>.<format>``;
    ``window``: the steps a table covers (the summary's ``window_*`` fields), in its JSON.
    """

    name: str
    frame: pd.DataFrame
    document: Mapping[str, object] | None = None
    file: str | None = None
    window: Mapping[str, object] | None = None

    @property
    def stem(self) -> str:
        return self.file or self.name


class Writer(Protocol):
    suffix: str

    def render(self, table: Table) -> str: ...


class CsvWriter:
    """CSV with formula-safe text cells (:func:`formula_safe`); numbers are written as-is."""

    suffix = "csv"

    def render(self, table: Table) -> str:
        return formula_safe(table.frame).to_csv(index=False, lineterminator="\n")


# A spreadsheet runs a cell starting with one of these as a formula (OWASP, "CSV Injection");
# a quote is added before them, and before a leading quote so that the rule can be undone.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_QUOTED = (*FORMULA_START, "'")


def quote_cell(value: object) -> object:
    """``value`` with a ``'`` before it when it is text that starts a formula or a quote."""
    return "'" + value if isinstance(value, str) and value.startswith(_QUOTED) else value


def unquote_cell(value: object) -> object:
    """The inverse of :func:`quote_cell`, for reading a report's CSV back."""
    return value[1:] if isinstance(value, str) and value.startswith("'") else value


def formula_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its text cells quoted by :func:`quote_cell` (a copy only when one is).

    Names come from the profile, which may be hostile: ``=cmd|' /C calc'!A0`` as a kernel
    name must reach a spreadsheet as text. Categorical columns are fixed in their categories.
    """
    fixed: dict[str, pd.Series] = {}
    for name, column in frame.items():
        dtype = column.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            if any(_needs_quote(c) for c in cats):
                fixed[str(name)] = column.cat.rename_categories([quote_cell(c) for c in cats])
        elif dtype == np.dtype(object) or isinstance(dtype, pd.StringDtype):
            cells = column.to_numpy(dtype=object)  # a loop over cells: no Series.map per column
            if any(_needs_quote(c) for c in cells):
                fixed[str(name)] = pd.Series([quote_cell(c) for c in cells], index=column.index,
                                             dtype=object)  # fmt: skip
    return frame.assign(**fixed) if fixed else frame


def _needs_quote(value: object) -> bool:
    return isinstance(value, str) and value.startswith(_QUOTED)


class JsonWriter:
    """``{"schema", "table", "definitions", ["window",] "dtypes", "categories", "rows": [...]}``,
    written by the ``json`` module (``window``: the kernels, ranges and layers tables').

    ``dtypes`` (pandas dtype names) and the categories of categorical columns let
    :func:`dlprof_lite.render.reader.open_report` give a table back with the dtypes it was
    written with; NaN, infinities and NA become null.
    """

    suffix = "json"

    def render(self, table: Table) -> str:
        head: dict[str, object] = {
            "schema": SCHEMA,
            "table": table.name,
            "definitions": _definitions(table.name),
        }
        if table.window is not None:
            head["window"] = plain(dict(table.window))
        if table.document is not None:  # the summary: small, indented for reading
            doc = plain({**head, **dict(table.document)})
            return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        frame = table.frame
        dtypes = {str(c): str(t) for c, t in frame.dtypes.items()}
        categories = {
            str(c): plain(list(frame[c].cat.categories))
            for c, t in frame.dtypes.items()
            if isinstance(t, pd.CategoricalDtype)
        }
        rows = records(frame)
        doc = {**head, "dtypes": dtypes, "categories": categories, "rows": rows}
        # Tables unindented: json's C encoder only runs without indent (1 M rows: about 1 s
        # instead of 4); a reader wants the CSV, or json.tool, anyway.
        return json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n"


def records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """The rows as plain JSON-ready dicts (orient records); floats keep every digit.

    Converted a column at a time (numpy's ``tolist`` gives Python numbers), so only object
    columns pay a Python call per cell.
    """
    columns = [str(c) for c in frame.columns]
    values = [_plain_column(frame[c]) for c in frame.columns]
    return [dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True)]


def _plain_column(column: pd.Series) -> list[object]:
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):  # each category converted once
        names = [plain(c) for c in dtype.categories.tolist()] + [None]  # code -1: missing
        return [names[code] for code in column.cat.codes.to_numpy().tolist()]
    if isinstance(dtype, pd.StringDtype):
        return list(column.astype(object).where(column.notna(), None).tolist())
    if not isinstance(dtype, np.dtype):  # nullable numbers: cell by cell
        return [plain(v) for v in column.astype(object).tolist()]
    if dtype.kind in "iub":
        return list(column.to_numpy().tolist())
    if dtype.kind == "f":
        array = column.to_numpy(dtype="float64")
        cells: list[object] = array.tolist()
        for i in np.flatnonzero(~np.isfinite(array)).tolist():
            cells[i] = None  # NaN and infinities: null
        return cells
    return [plain(v) for v in column.astype(object).tolist()]


WRITERS: dict[str, Writer] = {w.suffix: w for w in (CsvWriter(), JsonWriter())}


def _definitions(table: str) -> dict[str, str]:
    defs = definitions(table)
    if table == "summary":
        # summary.json nests the GPUs and the advice rows: define their fields too.
        defs.update({f"gpus[].{c.name}": c.doc for c in GPU_FIELDS})
        defs.update({f"advice[].{c.name}": c.doc for c in ADVICE_REPORT})
        defs.update(SUMMARY_LISTS)
    return defs


def plain(value: object) -> object:
    """A JSON-ready copy: numpy scalars to Python, NaN and pandas NA to None."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return scalar(value)


def combined_table(rows: Sequence[Mapping[str, object]]) -> Table:
    """The ``runs`` table (one summary row per input), written as ``summary.*``."""
    # object columns: a failed input's empty row must not turn every count into a float.
    frame = pd.DataFrame(rows, dtype=object).reindex(columns=column_names("runs"))
    return Table("runs", frame, file="summary")
