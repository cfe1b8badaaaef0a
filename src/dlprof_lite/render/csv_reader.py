"""A report table or summary read back from its CSV file, strictly (issue 40).

Place in the pipeline: report (the read side, for folders written with ``--formats csv``).
The CSV writer (:class:`~dlprof_lite.render.writers.CsvWriter`) writes the registry's columns
in order, one row per line, every line ending in a newline, empty cells for missing values
and a quote before text that would start a spreadsheet formula. So a file that does not end
in a newline is truncated, a row with more or fewer cells than the header is refused (pandas
would shift every column), and each column's cells must be what its kind allows
(:mod:`dlprof_lite.render.read_schema`): numbers parsed exactly (64-bit integers stay
integers), ``True``/``False``, or text.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.render import read_schema as rs
from dlprof_lite.render.writers import unquote_cell
from dlprof_lite.report.summary_types import LISTS, Summary, scalar

_CHUNK_ROWS = 65_536  # rows converted to columns at a time (bounds the rows held as text)
_INTEGER = re.compile(r"-?[0-9]{1,19}")


@contextmanager
def _field_limit() -> Iterator[None]:
    """The csv module's cell limit (global, 128 KiB by default) at the report's text limit."""
    previous = csv.field_size_limit(rs.MAX_TEXT_CHARS + 2)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _rows(table: str, text: str, where: str) -> Iterator[list[list[str]]]:
    """The header, then the rows in chunks, each row as long as the header."""
    if not text.endswith("\n"):
        raise rs.refuse(where, "truncated: a report's CSV file ends with a line break")
    reader = csv.reader(io.StringIO(text, newline=""))
    limit = 1 if table == "summary" else rs.MAX_ROWS
    with _field_limit():
        try:
            header = next(reader, None)
            if header is None:
                raise rs.refuse(where, "no header line")
            yield [header]
            chunk: list[list[str]] = []
            for count, row in enumerate(reader, 1):
                if len(row) != len(header):
                    raise rs.refuse(where, f"line {reader.line_num}: {len(row)} cells, the "
                                           f"header has {len(header)}")  # fmt: skip
                if count > limit:
                    raise rs.refuse(where, f"more than {limit} rows, more than dlprof-lite "
                                           "writes")  # fmt: skip
                chunk.append(row)
                if len(chunk) == _CHUNK_ROWS:
                    yield chunk
                    chunk = []
            yield chunk
        except csv.Error as err:
            raise rs.refuse(where, f"line {reader.line_num}: {err}") from None


def csv_table(table: str, text: str, where: str) -> pd.DataFrame:
    """The table in ``text`` (a table's CSV file), every cell checked."""
    chunks = _rows(table, text, where)
    header = next(chunks)[0]
    names = rs.check_columns(table, header, where)
    parts: dict[str, list[Any]] = {name: [] for name in header}
    offset = 0
    for chunk in chunks:
        if not chunk:
            continue
        for name, cells in zip(header, zip(*chunk, strict=True), strict=True):
            parts[name].append(_cells(name, cells, where, offset))
        offset += len(chunk)
    frame = pd.DataFrame({name: _column(table, name, parts[name], where) for name in names},
                         columns=names)  # fmt: skip
    return rs.complete(table, frame)


def _cells(name: str, cells: tuple[str, ...], where: str, offset: int) -> Any:
    """One chunk of a column: numbers as an array (NaN: empty), else Python values."""
    kind = rs.kind(name)
    if kind == "text":
        return [None if c == "" else unquote_cell(c) for c in cells]
    if kind == "bool":
        values = {"True": True, "False": False, "": None}
        bad = next((i for i, c in enumerate(cells) if c not in values), None)
        if bad is not None:
            raise rs.refuse(where, f"column {name!r}, row {offset + bad}: "
                                   f"{rs.short(cells[bad])!r} is not True or False")  # fmt: skip
        return [values[c] for c in cells]
    return _numbers(name, cells, where, offset)


def _numbers(name: str, cells: tuple[str, ...], where: str, offset: int) -> Any:
    """Numbers exactly: int64 when every cell is an integer, Int64 with empty cells among
    integers, else float64 (NaN: empty)."""
    text = np.array(cells, dtype=object)
    empty = text == ""
    present = text[~empty]
    if not len(present):
        return np.full(len(cells), np.nan)
    try:
        parsed = pd.to_numeric(pd.Series(present, dtype=object), errors="raise").to_numpy()
    except (ValueError, TypeError, OverflowError) as err:
        raise rs.refuse(where, f"column {name!r}: {str(err)[:120]} (not a number)") from None
    if parsed.dtype.kind not in "if":
        raise rs.refuse(where, f"column {name!r}: a number beyond 64 bits")
    if parsed.dtype.kind == "f" and np.isnan(parsed).any():
        at = int(np.flatnonzero(~empty)[np.flatnonzero(np.isnan(parsed))[0]])
        raise rs.refuse(where, f"column {name!r}, row {offset + at}: {rs.short(cells[at])!r} "
                               "is not a number dlprof-lite writes")  # fmt: skip
    if parsed.dtype.kind == "i":
        if not empty.any():
            return parsed.astype(np.int64)
        out = pd.array([None] * len(cells), dtype="Int64")
        out[~empty] = parsed
        return out
    floats = np.full(len(cells), np.nan)
    floats[~empty] = parsed
    return floats


def _as_float(part: Any) -> np.ndarray:
    if isinstance(part, np.ndarray):
        return part.astype(np.float64)
    return np.asarray(part.to_numpy(dtype=np.float64, na_value=np.nan))


def _column(table: str, name: str, parts: list[Any], where: str) -> pd.Series:
    kind = rs.kind(name)
    if kind != "number":
        values = [v for part in parts for v in part]
        if kind == "text":
            rs.check_text(values, f"{where}: column {name!r}")
            return pd.Series(values, dtype=object)
        return pd.Series(values, dtype="boolean" if None in values else "bool")
    if not parts:
        return pd.Series([], dtype=object)
    unit = _unit(table, name)
    rs.check_numbers(np.concatenate([_as_float(p) for p in parts]), name, unit, where)
    if all(isinstance(p, np.ndarray) and p.dtype == np.int64 for p in parts):
        return pd.Series(np.concatenate(parts), dtype="int64")
    if all(not isinstance(p, np.ndarray) or p.dtype == np.int64 for p in parts):
        return pd.Series(pd.array(np.concatenate([np.asarray(p, dtype=object) for p in parts]),
                                  dtype="Int64"))  # fmt: skip
    return pd.Series(np.concatenate([_as_float(p) for p in parts]), dtype="float64")


def _unit(table: str, name: str) -> str:
    from dlprof_lite.report.metrics import REPORTS

    return next((c.unit for c in REPORTS[table] if c.name == name), "")


def csv_summary(text: str, advice: pd.DataFrame, where: str) -> Summary:
    """The summary of ``summary.csv`` (the flat row), its advice from the advice table and
    its warnings split back; checked as ``summary.json`` is."""
    chunks = list(_rows("summary", text, where))
    header = chunks[0][0]
    rs.check_columns("summary", header, where)
    rows = [row for chunk in chunks[1:] for row in chunk]
    if len(rows) != 1:
        raise rs.refuse(where, f"{len(rows)} summary rows, not 1 (a truncated file)")
    specs = rs.summary_fields()
    flat = {name: _scalar(cell, specs[name], f"{where}: {name!r}")
            for name, cell in zip(header, rows[0], strict=True)}  # fmt: skip
    warnings = str(flat.get("warnings") or "")
    doc: dict[str, Any] = {**flat, **{name: [] for name in LISTS}}  # the CSV has no lists
    doc["warnings"] = [w for w in warnings.split("; ") if w]
    doc["advice"] = [{str(k): scalar(v) for k, v in r.items()} for r in advice.to_dict("records")]
    return rs.summary(doc, where)


def _scalar(cell: str, spec: rs.Field, where: str) -> object:
    """One summary cell as its field's type (the checks of ``check_value`` follow)."""
    base = spec[0]
    if cell == "":
        return None
    if base is str:
        return unquote_cell(cell)
    if base is int and _INTEGER.fullmatch(cell):
        return int(cell)
    if base is float:
        try:
            return int(cell) if _INTEGER.fullmatch(cell) else float(cell)
        except ValueError:
            pass
    word = "an integer" if base is int else "a number"
    raise rs.refuse(where, f"{rs.short(cell)!r} is not {word}")
