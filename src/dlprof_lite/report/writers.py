"""Writers: one per output format, behind one two-member interface.

A writer turns a :class:`Table` into text; :mod:`dlprof_lite.report.output` decides where the
text goes and writes it atomically. Every JSON document carries the schema version, the
table name and the one-line definition of each column from the metric registry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import (
    ADVICE_REPORT,
    GPU_FIELDS,
    SCHEMA,
    SUMMARY_LISTS,
    definitions,
)


@dataclass(frozen=True)
class Table:
    """One report table: its rows, and for JSON optionally a document replacing ``rows``.

    ``name`` selects the column definitions; the file is ``<file or name>.<format>``.
    """

    name: str
    frame: pd.DataFrame
    document: Mapping[str, object] | None = None
    file: str | None = None

    @property
    def stem(self) -> str:
        return self.file or self.name


class Writer(Protocol):
    suffix: str

    def render(self, table: Table) -> str: ...


class CsvWriter:
    suffix = "csv"

    def render(self, table: Table) -> str:
        return table.frame.to_csv(index=False, lineterminator="\n")


class JsonWriter:
    """``{"schema", "table", "definitions", "dtypes", "categories", "rows": [...]}``, written
    by the ``json`` module.

    ``dtypes`` (pandas dtype names) and the categories of categorical columns let
    :func:`dlprof_lite.report.reader.open_report` give a table back with the dtypes it was
    written with; NaN, infinities and NA become null.
    """

    suffix = "json"

    def render(self, table: Table) -> str:
        head: dict[str, object] = {
            "schema": SCHEMA,
            "table": table.name,
            "definitions": _definitions(table.name),
        }
        if table.document is not None:
            doc = plain({**head, **dict(table.document)})
        else:
            frame = table.frame
            dtypes = {str(c): str(t) for c, t in frame.dtypes.items()}
            categories = {
                str(c): plain(list(frame[c].cat.categories))
                for c, t in frame.dtypes.items()
                if isinstance(t, pd.CategoricalDtype)
            }
            doc = {**head, "dtypes": dtypes, "categories": categories, "rows": records(frame)}
        return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def records(frame: pd.DataFrame) -> list[object]:
    """The rows as plain JSON-ready dicts (orient records); floats keep every digit."""
    columns = [str(c) for c in frame.columns]
    rows = zip(*(frame[c].tolist() for c in frame.columns), strict=True)
    return [{c: plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]


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
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)
