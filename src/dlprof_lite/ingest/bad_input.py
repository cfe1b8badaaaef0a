"""Every way a hostile or damaged export fails, as one :class:`InputError` naming the place.

:func:`check_sqlite_file` refuses what is not a whole SQLite file before SQLite opens it.

Both drivers raise their own classes with their own wording (the standard library's
``sqlite3.Error``, ADBC's ``adbc_driver_manager.Error``, pyarrow's ``ArrowException`` and
``OSError``); :func:`translate` maps each kind of bad input to the same message whichever
driver read it: a missing or renamed column, a malformed page, a read limit hit, a full
disk. :class:`Checked` wraps a fetcher so that every query's failures are translated with
the query's table, and every column that nsys writes as integers is verified to be one
(where a value is not, a second query finds the first such row and names it).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.ingest import schema as S
from dlprof_lite.ingest.fetch import Fetcher, ReadLimitError, ReadLog, connect_readonly
from dlprof_lite.ingest.sanitize import as_text
from dlprof_lite.rules.inputs import is_report

SQLITE_MAGIC = b"SQLite format 3\x00"
REEXPORT = "export the report again (nsys export --type sqlite)"
DAMAGED = f"the export is damaged or was edited; {REEXPORT}"


def check_sqlite_file(path: Path) -> None:
    """Fail fast, with one clear line, on what is not a complete SQLite file."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not an nsys export")
    try:
        with path.open("rb") as f:
            header = f.read(100)
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    if not header:
        raise InputError(f"{path}: empty file")
    if not header.startswith(SQLITE_MAGIC):
        hint = ""
        if is_report(path):
            hint = " (a report: export it with `nsys export --type sqlite`)"
        raise InputError(f"{path}: not a SQLite file{hint}")
    if len(header) < 100:
        raise InputError(f"{path}: truncated SQLite file ({len(header)} bytes)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The in-header page count is valid when the two change counters agree (SQLite docs,
    # "Database File Format" §1.3.7); then a shorter file has lost its tail.
    if pages and header[24:28] == header[92:96] and path.stat().st_size < pages * page_size:
        raise InputError(
            f"{path}: truncated SQLite file ({path.stat().st_size} of {pages * page_size} bytes)"
        )


def driver_errors() -> tuple[type[BaseException], ...]:
    """The exception classes the drivers raise on bad files (not our own bugs)."""
    classes: list[type[BaseException]] = [sqlite3.Error, ReadLimitError, MemoryError, OSError,
                                          UnicodeDecodeError, RuntimeError]  # fmt: skip
    try:
        import adbc_driver_manager
        import pyarrow as pa
    except ImportError:
        pass
    else:
        classes += [adbc_driver_manager.Error, pa.ArrowException]
    return tuple(classes)


class Checked:
    """A fetcher whose queries fail only with :class:`InputError` and whose integer columns
    are integers (``text`` names the text columns; ``nullable`` lets NULL through)."""

    def __init__(self, path: Path, fetch: Fetcher, log: ReadLog) -> None:
        self._path = path
        self._fetch = fetch
        self._log = log

    def columns(
        self, query: str, *, text: tuple[str, ...] = (), nullable: bool = False
    ) -> dict[str, Any]:
        try:
            cols = self._fetch.columns(query)
        except driver_errors() as err:
            raise translate(self._path, err, query) from err
        for name, values in cols.items():
            if name in text:
                cols[name], blobs = as_text(values)
                if blobs:
                    self._log.note_blobs(query, name, self._stored_blobs(query, name, blobs))
            elif not _integers(values, nullable):
                raise bad_value(self._path, query, name, nullable)
        return cols

    def _stored_blobs(self, query: str, alias: str, fetched: int) -> int:
        """How many BLOBs the column a text result came from holds. Counted in the file:
        ADBC types a whole column as binary when its first batch has one BLOB, so the
        fetched values cannot tell which were BLOBs (the standard library's can)."""
        table = _table(query)
        column = select_items(query).get(alias, alias)
        column = re.sub(r"^COALESCE\((\w+), ''\)$", r"\1", column)
        if table is None or not re.fullmatch(r"\w+", column):
            return fetched
        try:
            conn = connect_readonly(self._path)
            try:
                sql = f"SELECT COUNT(*) FROM {table} WHERE typeof(\"{column}\") = 'blob'"
                return int(conn.execute(sql).fetchone()[0]) or fetched
            finally:
                conn.close()
        except driver_errors():
            return fetched


def _integers(values: Any, nullable: bool) -> bool:
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return True
    if not nullable or isinstance(values, pd.Categorical):
        return False
    # NULLs arrive as None (sqlite3) or NaN in a float column (Arrow); integers may then
    # arrive as floats, but only whole ones.
    for v in np.asarray(values, dtype=object):
        if v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)):
            continue
        if isinstance(v, (float, np.floating)) and (np.isnan(v) or float(v).is_integer()):
            continue
        return False
    return True


def _table(query: str | None) -> str | None:
    found = re.search(r"\bFROM (\w+)", query or "")
    return found.group(1) if found else None


def _detail(err: BaseException) -> str:
    """The driver's message, first line only, without its status and prefix words."""
    text = str(getattr(err, "orig", None) or err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    line = re.sub(r"^[A-Z_]+: ", "", line)
    line = re.sub(r"^\[SQLite\] ", "", line)
    return re.sub(r"^Failed to (prepare|step|execute) query: ", "", line)


def translate(path: Path, err: BaseException, query: str | None) -> InputError:
    """The one-line input error for what a driver raised while running ``query``."""
    detail = _detail(err)
    low = detail.lower()
    table = _table(query)
    where = f" while reading {table}" if table else ""
    if isinstance(err, (ReadLimitError, MemoryError)) or "out of memory" in low \
            or "too big" in low:  # fmt: skip
        return InputError(
            f"{path}: reading {table or 'the file'} hit a read limit ({detail}): values far "
            "larger than any nsys export holds (a computed or crafted column); refusing the file"
        )
    column = re.search(r"no such column: ([\w.]+)", detail)
    if column:
        return InputError(
            f"{path}: {table or 'a table'} has no column {column.group(1)} (dropped or "
            f"renamed), so it is not a table nsys wrote; {REEXPORT}"
        )
    mismatch = re.search(r"[Tt]ype mismatch in column (\d+)", detail)
    if mismatch and query:
        items = list(select_items(query))
        at = int(mismatch.group(1))
        if at < len(items):
            return bad_value(path, query, items[at], nullable=False)
    if "disk is full" in low or "file too large" in low or "no space" in low:
        return InputError(
            f"{path}: no disk space to read it{where} ({detail}): free space where SQLite "
            "keeps temporary files (SQLITE_TMPDIR, else /tmp) and run again"
        )
    if "no such table" in low or "no such module" in low:
        return InputError(f"{path}: {detail}{where}: not an export nsys wrote; {REEXPORT}")
    return InputError(f"{path}: corrupt or truncated SQLite export{where} ({detail}); {REEXPORT}")


def select_items(query: str) -> dict[str, str]:
    """Result column name -> its expression, for one of our own SELECTs (no subqueries)."""
    body = query[len("SELECT ") : query.rindex(" FROM ")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    items.append(body[start:].strip())
    out = {}
    for item in items:
        expr, _, alias = item.rpartition(" AS ")
        out[alias if expr else item] = expr or item
    return out


def bad_value(path: Path, query: str, alias: str, nullable: bool) -> InputError:
    """The error for a result column that is not all integers: finds the first stored value
    that is not one in the columns the expression reads, and names it."""
    table = _table(query) or "?"
    expr = select_items(query).get(alias, alias)
    allow_null = nullable or expr.startswith("COALESCE(")
    try:
        found = _first_non_integer(path, table, expr, allow_null)
    except driver_errors():
        found = None
    if found is None:
        return InputError(f"{path}: {table}: {alias} is not an integer in every row; {DAMAGED}")
    column, rowid, kind, sample = found
    return InputError(
        f"{path}: {table}.{column} holds {kind} {sample} (rowid {rowid}) where nsys writes an "
        f"integer; {DAMAGED}"
    )


_KINDS = {"null": "NULL", "text": "text", "real": "a float", "blob": "a BLOB"}


def _first_non_integer(
    path: Path, table: str, expr: str, allow_null: bool
) -> tuple[str, int, str, str] | None:
    conn = connect_readonly(path)
    try:
        names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        used = [n for n in names if re.search(rf"\b{re.escape(n)}\b", expr)]
        allowed = "('integer', 'null')" if allow_null else "('integer')"
        for column in used:
            row = conn.execute(
                f'SELECT rowid, typeof("{column}"), substr(quote("{column}"), 1, 40) FROM '
                f'{table} WHERE typeof("{column}") NOT IN {allowed} LIMIT 1'
            ).fetchone()
            if row is not None:
                return column, int(row[0]), _KINDS.get(row[1], row[1]), str(row[2])
    finally:
        conn.close()
    return None


def refuse_computed(path: Path, schema: S.ExportSchema) -> None:
    """Refuse tables and columns whose values SQLite would compute while we read them.

    A generated column such as ``printf('%.*c', 2e7, 'x')`` makes a small file produce
    gigabytes; nsys stores every value, so an export never has one.
    """
    for table in S.READ_TABLES:
        if table in schema.virtual:
            raise InputError(
                f"{path}: {table} is a virtual table (its rows come from code, not the file); "
                f"nsys writes plain tables and dlprof-lite runs no code from a file; {REEXPORT}"
            )
        for column in sorted(schema.computed.get(table, ())):
            raise InputError(
                f"{path}: {table}.{column} is a computed (generated) column; nsys stores every "
                f"value, and dlprof-lite computes nothing a file asks for; {REEXPORT}"
            )
