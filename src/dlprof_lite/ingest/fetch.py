"""Column-wise fetching of query results into numpy, read-only, through the fastest driver.

Reading rows is the floor of ingest's time (docs/design.md "Scale"), so results are fetched as
whole columns: through ADBC's SQLite driver into Arrow when it is installed (the ``fast``
extra), else through the standard library's ``sqlite3``.

The file is untrusted (issue 13). Both drivers open it read-only and ``immutable=1`` (no lock,
no ``-wal``/``-shm`` file next to it, a read-only folder works; nsys never writes an export
while we read it), with ``trusted_schema`` off, and within limits: SQLite's per-connection
limits (:data:`SQLITE_LIMITS`, stdlib driver; ADBC's copy of SQLite keeps its symbols private,
so there a heap limit, :data:`ADBC_HEAP_LIMIT`, bounds any one value instead) and a cap on
the bytes one query may return (:func:`result_budget`), so no file can make us hold more
than a fixed multiple of its own size. A cap hit raises :class:`ReadLimitError`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

BATCH_ROWS_OPTION = "adbc.sqlite.query.batch_rows"


MiB = 1 << 20
# Per-connection limits (sqlite3 only). Generous for any export nsys writes: its longest
# strings are demangled kernel names (kilobytes), its widest table ~60 columns, and our own
# queries are a few hundred bytes with shallow expressions.
SQLITE_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: 32 * MiB,  # any one string, blob or row
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 2000,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 4,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 1_000_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 16,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1000,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 100,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
# The most memory ADBC's private copy of SQLite may hold (page caches, one row's values).
# Process-wide for that copy only; never raised above a lower limit someone else set.
ADBC_HEAP_LIMIT = 512 * MiB
# What one query may return: this multiple of the file's size, at least MIN_RESULT_BYTES.
# A stored value costs at most ~9x its bytes in the file once fetched (a 1-byte integer
# becomes 8 bytes), so only computed values can pass this.
RESULT_BYTES_PER_FILE_BYTE = 32
MIN_RESULT_BYTES = 1024 * MiB
HARDENING_PRAGMAS = ("PRAGMA trusted_schema = OFF", "PRAGMA cell_size_check = ON",
                     "PRAGMA mmap_size = 0")  # fmt: skip


class ReadLimitError(Exception):
    """A query hit one of the read limits (the message says which)."""


def result_budget(path: Path) -> int:
    """Bytes one query may return for the file at ``path``."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    return max(MIN_RESULT_BYTES, RESULT_BYTES_PER_FILE_BYTE * size)


def readonly_uri(path: Path) -> str:
    """A SQLite URI that opens ``path`` read-only and immutable (the path is quoted)."""
    return f"{path.resolve().as_uri()}?mode=ro&immutable=1"


def connect_readonly(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(readonly_uri(path), uri=True, check_same_thread=False)
    try:
        for limit, value in SQLITE_LIMITS.items():
            conn.setlimit(limit, value)
        for pragma in HARDENING_PRAGMAS:
            conn.execute(pragma)
    except BaseException:
        conn.close()
        raise
    return conn


class ReadLog:
    """What the fetchers had to repair while reading, shared by every thread of one read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.replaced: dict[tuple[str, str], int] = {}  # (query's table, column) -> values
        self.blobs: dict[tuple[str, str], int] = {}  # BLOBs where text belongs, the same way

    def note_replaced(self, query: str, column: str, count: int) -> None:
        table = _FROM.search(query)
        key = (table.group(1) if table else "?", column)
        with self._lock:
            self.replaced[key] = self.replaced.get(key, 0) + count

    def note_blobs(self, query: str, column: str, count: int) -> None:
        table = _FROM.search(query)
        key = (table.group(1) if table else "?", column)
        with self._lock:
            self.blobs[key] = self.blobs.get(key, 0) + count


class Fetcher(Protocol):
    def columns(self, query: str) -> dict[str, Any]:
        """Run ``query``; return its result columns by name: int64 arrays for integers,
        object arrays (or a ``pd.Categorical``) for text."""
        ...


class SqliteFetcher:
    """The standard library driver: rows, then transposed into column arrays."""

    CHUNK_ROWS = 65_536

    def __init__(self, conn: sqlite3.Connection, budget: int, log: ReadLog) -> None:
        self._conn = conn
        self._budget = budget
        self._log = log

    def columns(self, query: str) -> dict[str, np.ndarray]:
        try:
            return self._columns(query)
        except sqlite3.OperationalError as err:
            if "decode to UTF-8" not in str(err):
                raise
        # Text that is not UTF-8: read again, decoding with U+FFFD replacements (counted).
        bad: dict[str, int] = {}

        def decode(raw: bytes) -> str:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                bad["n"] = bad.get("n", 0) + 1
                return raw.decode(errors="replace")

        self._conn.text_factory = decode
        try:
            out = self._columns(query)
        finally:
            self._conn.text_factory = str
        for name, col in out.items():
            if col.dtype == object and bad:
                hits = sum(1 for v in col if isinstance(v, str) and "\ufffd" in v)
                if hits:
                    self._log.note_replaced(query, name, hits)
        return out

    def _columns(self, query: str) -> dict[str, np.ndarray]:
        cur = self._conn.execute(query)
        names = [d[0] for d in cur.description]
        chunks, size = [], 0
        while rows := cur.fetchmany(self.CHUNK_ROWS):
            chunk = _transpose(rows, names)
            size += sum(_bytes_of(c) for c in chunk.values())
            if size > self._budget:
                raise ReadLimitError(f"the result is larger than {self._budget // MiB} MiB")
            chunks.append(chunk)
        if not chunks:
            return {n: np.empty(0, dtype=np.int64) for n in names}
        if len(chunks) == 1:
            return chunks[0]
        return {n: _concat([c[n] for c in chunks]) for n in names}


def _transpose(rows: list[tuple[Any, ...]], names: list[str]) -> dict[str, np.ndarray]:
    """Rows as column arrays: int64 where every value is an integer, else object.

    No dtype is forced on the whole block: ``np.array(..., dtype=int64)`` would silently
    truncate a float (and the reader must see it, as Arrow shows it).
    """
    try:
        table = np.array(rows)
    except (UnicodeDecodeError, ValueError, TypeError, OverflowError):
        table = np.empty(0, dtype=object)
    if table.dtype == np.int64:  # the common case: an all-integer result in one call
        return {n: table[:, i].copy() for i, n in enumerate(names)}
    out = {}
    for i, n in enumerate(names):
        values = [r[i] for r in rows]
        try:
            col = np.array(values)
        except (UnicodeDecodeError, ValueError, TypeError, OverflowError):
            col = None  # text mixed with bytes numpy cannot unify, and the like
        out[n] = col if col is not None and col.dtype == np.int64 else _object_column(values)
    return out


def _object_column(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _bytes_of(col: np.ndarray) -> int:
    if col.dtype != object:
        return int(col.nbytes)
    return 8 * len(col) + sum(len(v) for v in col if isinstance(v, (str, bytes)))


class ArrowFetcher:
    """ADBC's SQLite driver: results arrive as Arrow columns, no Python object per row."""

    BATCH_ROWS = 65_536

    def __init__(self, conn: object, budget: int, log: ReadLog) -> None:
        self._conn = conn
        self._budget = budget
        self._log = log

    def columns(self, query: str) -> dict[str, Any]:
        return arrow_columns(self.table(query), self._log, query)

    def table(self, query: str) -> Any:
        """The result as one Arrow table (no conversion yet), batch by batch within budget."""
        import pyarrow as pa

        cur = self._conn.cursor()  # type: ignore[attr-defined]
        try:
            # Large batches: the driver's default (1,024 rows) leaves thousands of chunks
            # per column, and joining them costs more than the whole scan at 5M rows.
            cur.adbc_statement.set_options(**{BATCH_ROWS_OPTION: str(self.BATCH_ROWS)})
            cur.execute(query)
            reader = cur.fetch_record_batch()
            batches, size = [], 0
            for batch in reader:
                size += batch.nbytes
                if size > self._budget:
                    raise ReadLimitError(f"the result is larger than {self._budget // MiB} MiB")
                batches.append(batch)
            return pa.Table.from_batches(batches, schema=reader.schema)
        finally:
            cur.close()


def arrow_columns(table: Any, log: ReadLog | None = None, query: str = "") -> dict[str, Any]:
    """An Arrow table's columns as :meth:`Fetcher.columns` returns them (one copy each)."""
    import pyarrow as pa

    out = {}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_integer(col.type) and col.null_count == 0:
            out[name] = col.to_numpy().astype(np.int64, copy=False)
        elif pa.types.is_null(col.type):
            out[name] = np.full(len(col), None, dtype=object)
        elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            # Dictionary-encoded in Arrow: repeated names cost one string each.
            enc = col.combine_chunks().dictionary_encode()
            categories, replaced = _decoded(enc.dictionary)
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
            if replaced.any() and log is not None:
                log.note_replaced(query, name, int(np.isin(codes, np.flatnonzero(replaced)).sum()))
            out[name] = pd.Categorical.from_codes(
                codes, categories=pd.Index(categories, dtype=object)
            )
        else:
            out[name] = col.to_numpy(zero_copy_only=False).astype(object)
    return out


def _decoded(dictionary: Any) -> tuple[list[str], np.ndarray]:
    """A string dictionary's values; text that is not UTF-8 (the driver passes SQLite's bytes
    through unchecked) decoded with U+FFFD replacements, flagged in the second result."""
    import pyarrow as pa

    try:
        return dictionary.to_pylist(), np.zeros(len(dictionary), dtype=bool)
    except UnicodeDecodeError:
        pass
    raw = dictionary.cast(pa.binary()).to_pylist()
    values, replaced = [], np.zeros(len(raw), dtype=bool)
    for i, b in enumerate(raw):
        try:
            values.append(b.decode())
        except UnicodeDecodeError:
            values.append(b.decode(errors="replace"))
            replaced[i] = True
    # Two byte strings may decode to the same text: keep the dictionary's values unique.
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        if v in seen:
            values[i] = f"{v}\ufffd{i}"
        seen.setdefault(values[i], i)
    return values, replaced


@contextmanager
def open_fetcher(
    path: Path, *, prefer_arrow: bool | None = None, log: ReadLog | None = None
) -> Iterator[Fetcher]:
    """The Arrow fetcher when ADBC is installed, else sqlite3; ``DLPROF_LITE_READER=sqlite``
    forces the standard library driver. Repairs are noted in ``log``."""
    if prefer_arrow is None:
        prefer_arrow = os.environ.get("DLPROF_LITE_READER", "arrow") != "sqlite"
    log = log if log is not None else ReadLog()
    if prefer_arrow:
        try:
            import adbc_driver_sqlite.dbapi as adbc
            import pyarrow  # noqa: F401
        except ImportError:
            pass
        else:
            arrow_conn = adbc.connect(readonly_uri(path))
            try:
                _harden_adbc(arrow_conn)
                yield ArrowFetcher(arrow_conn, result_budget(path), log)
            finally:
                arrow_conn.close()
            return
    conn = connect_readonly(path)
    try:
        yield SqliteFetcher(conn, result_budget(path), log)
    finally:
        conn.close()


def _harden_adbc(conn: Any) -> None:
    cur = conn.cursor()
    try:
        for pragma in HARDENING_PRAGMAS:
            cur.execute(pragma)
        cur.execute("PRAGMA hard_heap_limit")
        current = int(cur.fetchone()[0])
        if current == 0 or current > ADBC_HEAP_LIMIT:
            cur.execute(f"PRAGMA hard_heap_limit = {ADBC_HEAP_LIMIT}")
    finally:
        cur.close()


class SplitFetcher:
    """Reads one large table on several threads, each over its own range of rowids.

    SQLite steps one statement on one core; the drivers release the GIL while stepping, so
    a table read in ``parts`` rowid ranges on as many connections uses as many cores
    (about 1.8x on two). Results are concatenated in rowid order, which is the order a
    plain scan returns. The queries are this package's own (``schema``), each reading
    one table named in its ``FROM`` clause.
    """

    MIN_ROWS_TO_SPLIT = 200_000

    def __init__(self, path: Path, pool: Executor, parts: int, log: ReadLog | None = None) -> None:
        self._path = path
        self._pool = pool
        self._parts = parts
        self._log = log if log is not None else ReadLog()

    def columns(self, query: str) -> dict[str, Any]:
        table = _FROM.search(query)
        bounds = self._bounds(table.group(1)) if table else None
        if bounds is None:
            return _fetch_once(self._path, query, self._log)
        glue = "AND" if " WHERE " in query else "WHERE"
        parts = [f"{query} {glue} rowid >= {a} AND rowid < {b}" for a, b in bounds]
        got = list(self._pool.map(lambda q: _fetch_part(self._path, q, self._log), parts))
        return _join(got, self._log, query)

    def _bounds(self, table: str) -> list[tuple[int, int]] | None:
        with connect_readonly(self._path) as conn:
            # Two subqueries: SQLite answers each from the b-tree's ends, but scans the
            # table for MIN and MAX in one SELECT.
            lo, hi = conn.execute(
                f"SELECT (SELECT MIN(rowid) FROM {table}), (SELECT MAX(rowid) FROM {table})"
            ).fetchone()
        if lo is None or self._parts < 2 or hi - lo < self.MIN_ROWS_TO_SPLIT:
            return None
        edges = np.linspace(lo, hi + 1, self._parts + 1).astype(np.int64)
        return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


_FROM = re.compile(r"\bFROM (\w+)")


def _fetch_once(path: Path, query: str, log: ReadLog) -> dict[str, Any]:
    with open_fetcher(path, log=log) as fetch:
        return fetch.columns(query)


def _fetch_part(path: Path, query: str, log: ReadLog) -> Any:
    """One part of a split read: an Arrow table (joined before any conversion), or columns."""
    with open_fetcher(path, log=log) as fetch:
        return fetch.table(query) if isinstance(fetch, ArrowFetcher) else fetch.columns(query)


def _join(parts: list[Any], log: ReadLog | None = None, query: str = "") -> dict[str, Any]:
    """The parts of a split read as one result, in part order.

    Arrow tables are joined by their chunk lists (no copy) and converted once; the driver
    infers each part's types from its own rows, so parts whose types cannot be unified are
    converted one by one and concatenated.
    """
    if all(not isinstance(p, dict) for p in parts):
        import pyarrow as pa

        try:
            return arrow_columns(pa.concat_tables(parts, promote_options="permissive"), log, query)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            parts = [arrow_columns(p, log, query) for p in parts]
    return {name: _concat([p[name] for p in parts]) for name in parts[0]}


def _concat(chunks: list[Any]) -> Any:
    """One column from its rowid-range chunks (an empty chunk may come back untyped)."""
    filled = [c for c in chunks if len(c)] or chunks[:1]
    if all(isinstance(c, pd.Categorical) for c in filled):
        return union_categoricals(filled) if len(filled) > 1 else filled[0]
    return np.concatenate([np.asarray(c, dtype=object) if isinstance(c, pd.Categorical)
                           else c for c in filled])  # fmt: skip
