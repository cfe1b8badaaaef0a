"""Column-wise fetching of query results into numpy, read-only, through the fastest driver.

Reading rows is the floor of ingest's time (DESIGN.md "Scale"), so results are fetched as
whole columns: through ADBC's SQLite driver into Arrow when it is installed (the ``fast``
extra), else through the standard library's ``sqlite3``. Both open the file with
``mode=ro``; neither can write to it.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

BATCH_ROWS_OPTION = "adbc.sqlite.query.batch_rows"


def readonly_uri(path: Path) -> str:
    """A SQLite URI that opens ``path`` read-only (any characters in the path are quoted)."""
    return f"{path.resolve().as_uri()}?mode=ro"


def connect_readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(readonly_uri(path), uri=True, check_same_thread=False)


class Fetcher(Protocol):
    def columns(self, query: str) -> dict[str, Any]:
        """Run ``query``; return its result columns by name: int64 arrays for integers,
        object arrays (or a ``pd.Categorical``) for text."""
        ...


class SqliteFetcher:
    """The standard library driver: rows, then transposed into column arrays."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def columns(self, query: str) -> dict[str, np.ndarray]:
        cur = self._conn.execute(query)
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
        if not rows:
            return {n: np.empty(0, dtype=np.int64) for n in names}
        try:  # the common case: an all-integer result, converted in one call
            table = np.array(rows, dtype=np.int64)
            return {n: table[:, i].copy() for i, n in enumerate(names)}
        except (TypeError, ValueError, OverflowError):
            pass
        out = {}
        for i, n in enumerate(names):
            col = [r[i] for r in rows]
            try:
                out[n] = np.array(col, dtype=np.int64)
            except (TypeError, ValueError, OverflowError):
                out[n] = np.array(col, dtype=object)
        return out


class ArrowFetcher:
    """ADBC's SQLite driver: results arrive as Arrow columns, no Python object per row."""

    BATCH_ROWS = 65_536

    def __init__(self, conn: object) -> None:
        self._conn = conn

    def columns(self, query: str) -> dict[str, Any]:
        return arrow_columns(self.table(query))

    def table(self, query: str) -> Any:
        """The result as one Arrow table (no conversion yet)."""
        cur = self._conn.cursor()  # type: ignore[attr-defined]
        try:
            # Large batches: the driver's default (1,024 rows) leaves thousands of chunks
            # per column, and joining them costs more than the whole scan at 5M rows.
            cur.adbc_statement.set_options(**{BATCH_ROWS_OPTION: str(self.BATCH_ROWS)})
            cur.execute(query)
            return cur.fetch_arrow_table()
        finally:
            cur.close()


def arrow_columns(table: Any) -> dict[str, Any]:
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
            out[name] = pd.Categorical.from_codes(
                enc.indices.to_numpy(zero_copy_only=False).astype(np.int32),
                categories=pd.Index(enc.dictionary.to_pylist(), dtype=object),
            )
        else:
            out[name] = col.to_numpy(zero_copy_only=False).astype(object)
    return out


@contextmanager
def open_fetcher(path: Path, *, prefer_arrow: bool | None = None) -> Iterator[Fetcher]:
    """The Arrow fetcher when ADBC is installed, else sqlite3; ``DLPROF_LITE_READER=sqlite``
    forces the standard library driver."""
    if prefer_arrow is None:
        prefer_arrow = os.environ.get("DLPROF_LITE_READER", "arrow") != "sqlite"
    if prefer_arrow:
        try:
            import adbc_driver_sqlite.dbapi as adbc
            import pyarrow  # noqa: F401
        except ImportError:
            pass
        else:
            arrow_conn = adbc.connect(readonly_uri(path))
            try:
                yield ArrowFetcher(arrow_conn)
            finally:
                arrow_conn.close()
            return
    conn = connect_readonly(path)
    try:
        yield SqliteFetcher(conn)
    finally:
        conn.close()


class SplitFetcher:
    """Reads one large table on several threads, each over its own range of rowids.

    SQLite steps one statement on one core; the drivers release the GIL while stepping, so
    a table read in ``parts`` rowid ranges on as many connections uses as many cores
    (about 1.8x on two). Results are concatenated in rowid order, which is the order a
    plain scan returns. The queries are this package's own (``schema``), each reading
    one table named in its ``FROM`` clause.
    """

    MIN_ROWS_TO_SPLIT = 200_000

    def __init__(self, path: Path, pool: Executor, parts: int) -> None:
        self._path = path
        self._pool = pool
        self._parts = parts

    def columns(self, query: str) -> dict[str, Any]:
        table = _FROM.search(query)
        bounds = self._bounds(table.group(1)) if table else None
        if bounds is None:
            return _fetch_once(self._path, query)
        glue = "AND" if " WHERE " in query else "WHERE"
        parts = [f"{query} {glue} rowid >= {a} AND rowid < {b}" for a, b in bounds]
        return _join(list(self._pool.map(lambda q: _fetch_part(self._path, q), parts)))

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


def _fetch_once(path: Path, query: str) -> dict[str, Any]:
    with open_fetcher(path) as fetch:
        return fetch.columns(query)


def _fetch_part(path: Path, query: str) -> Any:
    """One part of a split read: an Arrow table (joined before any conversion), or columns."""
    with open_fetcher(path) as fetch:
        return fetch.table(query) if isinstance(fetch, ArrowFetcher) else fetch.columns(query)


def _join(parts: list[Any]) -> dict[str, Any]:
    """The parts of a split read as one result, in part order.

    Arrow tables are joined by their chunk lists (no copy) and converted once; the driver
    infers each part's types from its own rows, so parts whose types cannot be unified are
    converted one by one and concatenated.
    """
    if all(not isinstance(p, dict) for p in parts):
        import pyarrow as pa

        try:
            return arrow_columns(pa.concat_tables(parts, promote_options="permissive"))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            parts = [arrow_columns(p) for p in parts]
    return {name: _concat([p[name] for p in parts]) for name in parts[0]}


def _concat(chunks: list[Any]) -> Any:
    """One column from its rowid-range chunks (an empty chunk may come back untyped)."""
    filled = [c for c in chunks if len(c)] or chunks[:1]
    if all(isinstance(c, pd.Categorical) for c in filled):
        return union_categoricals(filled) if len(filled) > 1 else filled[0]
    return np.concatenate([np.asarray(c, dtype=object) if isinstance(c, pd.Categorical)
                           else c for c in filled])  # fmt: skip
