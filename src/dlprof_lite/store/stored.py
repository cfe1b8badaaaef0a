"""Runs read back from the store, checked like a report folder (issue 40).

Place in the pipeline: store. A store may come from elsewhere, so nothing it holds is taken on
trust: every value a query returns is checked against what :meth:`RunStore.record` writes
before it becomes a :class:`RunInfo`, :class:`RunContext` or :class:`RunRecord`: the run row's
types and domains here, the summary and the report tables by the report reader's own schema
(:mod:`dlprof_lite.render.read_schema`). Sizes are bounded in the query itself: text columns
come back cut at their limit plus one character (``substr``; longer is refused), and a
table's rows are counted and measured before they are fetched. JSON columns are fetched as
text and parsed here (bounded nesting), never by the driver.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from dlprof_lite.errors import InputError, StoreError
from dlprof_lite.render import read_schema as rs
from dlprof_lite.report.summary_types import Summary
from dlprof_lite.store.record import RunContext
from dlprof_lite.store.schema import ROW_TABLES, runs

MiB = 1 << 20
# A run's text columns: paths, tags, host and GPU names, versions. The longest the command
# line can give is one argument or path (Linux: 128 KiB and 4 KiB); 2 MiB is ARG_MAX.
TEXT_LIMIT = 2 * MiB
COMMAND_LIMIT = 8 * MiB  # the command line as JSON: all of ARG_MAX, escaped
SMALL_LIMIT = rs.MAX_SMALL_BYTES  # the summary and the tables' layout, as JSON
ROW_LIMIT = rs.MAX_TEXT_CHARS + MiB  # one stored table row, as JSON
MAX_ID = 2**63 - 1
_TEXT = ("tag", "run_group", "cwd", "script", "host", "gpus", "git_commit", "report_dir",
         "source", "tool_version", "nsys_version")  # fmt: skip


def valid_id(run_id: int) -> bool:
    """Whether ``run_id`` can be a run's id (1 to 2^63 - 1: SQLite's and PostgreSQL's)."""
    return 0 < run_id <= MAX_ID


class _BoundedText(FunctionElement[Any]):
    """A text column cut at ``limit`` + 1 characters by the database (see :func:`text`)."""

    type = sa.Text()
    inherit_cache = True
    name = "bounded_text"


@compiles(_BoundedText)
def _bounded(element: _BoundedText, compiler: Any, **kw: Any) -> str:
    column, limit = (compiler.process(c, **kw) for c in element.clauses)
    return f"substr(CAST({column} AS TEXT), 1, {limit})"


@compiles(_BoundedText, "sqlite")
def _bounded_sqlite(element: _BoundedText, compiler: Any, **kw: Any) -> str:
    # SQLite keeps any type in any column: only text is cut (a CAST would turn a BLOB or a
    # number into text and hide it); anything else comes back as it is, and is refused.
    column, limit = (compiler.process(c, **kw) for c in element.clauses)
    return (f"CASE WHEN typeof({column}) = 'text' THEN substr({column}, 1, {limit}) "
            f"ELSE {column} END")


def text(column: sa.ColumnElement[Any], limit: int) -> sa.ColumnElement[Any]:
    """``column``'s text, cut at ``limit`` + 1 characters by the database (a longer one is
    refused here without being fetched whole); on SQLite a value that is not text comes
    back as it is (and is refused as not text)."""
    return _BoundedText(column, sa.literal(limit + 1, sa.Integer))


def raw(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``column`` as the driver gives it, with no conversion of SQLAlchemy's."""
    return sa.type_coerce(column, sa.types.NullType())


def run_columns() -> list[sa.ColumnElement[Any]]:
    """The run row as :func:`checked_row` reads it."""
    cols: list[sa.ColumnElement[Any]] = [raw(runs.c.id).label("id"),
                                         raw(runs.c.created_at).label("created_at")]
    cols += [text(runs.c[name], TEXT_LIMIT).label(name) for name in _TEXT]
    cols += [raw(runs.c[name]).label(name) for name in
             ("repeat_index", "git_dirty", "steps", "step_mean_ns", "step_median_ns")]
    cols.append(text(runs.c.command, COMMAND_LIMIT).label("command"))
    return cols  # fmt: skip


def checked_row(row: Mapping[Any, Any], display: str) -> dict[str, Any]:
    """The run row's values, each checked; :class:`StoreError` names the run and column."""
    run_id = row["id"]
    if type(run_id) is not int or not valid_id(run_id):
        raise StoreError(f"run database {display}: a run id {rs.short(run_id)!r} that is not "
                         "a positive 64-bit integer")  # fmt: skip
    where = f"run database {display}, run {run_id}"
    out: dict[str, Any] = {"id": run_id, "created_at": _time(row["created_at"], where)}
    for name in _TEXT:
        out[name] = _text(row[name], TEXT_LIMIT, f"{where}: {name}")
    out["repeat_index"] = _int(row["repeat_index"], f"{where}: repeat_index", empty=True)
    out["steps"] = _int(row["steps"], f"{where}: steps", empty=False)
    for name in ("step_mean_ns", "step_median_ns"):
        out[name] = _float(row[name], f"{where}: {name}")
    out["git_dirty"] = _bool(row["git_dirty"], f"{where}: git_dirty")
    command = json_value(_text(row["command"], COMMAND_LIMIT, f"{where}: command"),
                         f"{where}: command", rs.MAX_JSON_VALUES // 8)  # fmt: skip
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise StoreError(f"{where}: command: not a list of arguments")
    out["command"] = tuple(command)
    return out


def context(values: Mapping[str, Any]) -> RunContext:
    return RunContext(
        created_at=values["created_at"], tag=values["tag"], group=values["run_group"],
        repeat_index=values["repeat_index"], command=values["command"], cwd=values["cwd"],
        script=values["script"], host=values["host"], git_commit=values["git_commit"],
        git_dirty=values["git_dirty"], report_dir=values["report_dir"],
        tool_version=values["tool_version"],
    )  # fmt: skip


def _time(value: object, where: str) -> datetime:
    # SQLite keeps the text the store wrote (UTC, no zone); PostgreSQL gives a datetime.
    if isinstance(value, str) and len(value) <= 64:
        with contextlib.suppress(ValueError):
            value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise StoreError(f"{where}: created_at {rs.short(value)!r} is not a time")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _text(value: object, limit: int, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise StoreError(f"{where}: {rs.short(value)!r} is not text")
    if len(value) > limit:
        raise StoreError(f"{where}: longer than {limit} characters, more than dlprof-lite "
                         "writes")  # fmt: skip
    return value


def _int(value: object, where: str, *, empty: bool) -> int | None:
    if value is None and empty:
        return None
    if type(value) is not int or not 0 <= value <= MAX_ID:
        raise StoreError(f"{where}: {rs.short(value)!r} is not a count")
    return value


def _float(value: object, where: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or type(value) is bool:
        raise StoreError(f"{where}: {rs.short(value)!r} is not a duration")
    if not math.isfinite(value) or value < 0:
        raise StoreError(f"{where}: {value!r} is not a duration")
    return float(value)


def _bool(value: object, where: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    if type(value) is int and value in (0, 1):  # SQLite keeps booleans as 0 and 1
        return bool(value)
    raise StoreError(f"{where}: {rs.short(value)!r} is not true or false")


def json_value(value: str | None, where: str, budget: int = rs.MAX_JSON_VALUES) -> Any:
    if value is None:
        raise StoreError(f"{where}: empty, where dlprof-lite always writes a value")
    try:
        return rs.load_json(value, where, budget)
    except InputError as err:
        raise StoreError(str(err)) from None


# --- a whole run ----------------------------------------------------------------------------


def summary(value: object, where: str) -> Summary:
    text = _text(value, SMALL_LIMIT, f"{where}: summary")
    try:
        doc = json_value(text, f"{where}: summary", rs.MAX_JSON_VALUES // 8)
        return rs.summary(doc, f"{where}: summary")
    except InputError as err:
        raise StoreError(str(err)) from None


def layouts(value: object, where: str) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """Each row table's dtypes and categories as ``rows.layout`` stored them."""
    text = _text(value, SMALL_LIMIT, f"{where}: tables")
    doc = json_value(text, f"{where}: tables", rs.MAX_JSON_VALUES // 8)
    if not isinstance(doc, dict) or set(doc) != set(ROW_TABLES):
        raise StoreError(f"{where}: tables: not the layout of {', '.join(ROW_TABLES)}")
    out = {}
    for name, table in doc.items():
        at = f"{where}: tables: {name}"
        if not isinstance(table, dict) or set(table) != {"columns", "categories"}:
            raise StoreError(f"{at}: not a layout of columns and categories")
        columns, categories = table["columns"], table["categories"]
        if not isinstance(columns, list) or len(columns) > 1000 or not all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c)
            for c in columns
        ):
            raise StoreError(f"{at}: columns: not a list of [name, dtype] pairs dlprof-lite "
                             "writes")  # fmt: skip
        dtypes = dict(columns)
        if len(dtypes) != len(columns) or not isinstance(categories, dict):
            raise StoreError(f"{at}: a column named twice, or categories not a map")
        out[name] = (dtypes, categories)
    return out


def table(
    name: str, layout: tuple[dict[str, str], dict[str, Any]], rows: Sequence[str | None],
    where: str,
) -> pd.DataFrame:  # fmt: skip
    """A stored report table from its rows' JSON, checked as the report reader checks one."""
    dtypes, categories = layout
    at = f"{where}: {name}"
    texts = [_text(r, ROW_LIMIT, at) for r in rows]
    if sum(rs.json_values(t) for t in texts if t is not None) > rs.MAX_JSON_VALUES:
        raise StoreError(f"{at}: more than {rs.MAX_JSON_VALUES} JSON values, more than "
                         "dlprof-lite writes")  # fmt: skip
    data = [json_value(t, at) for t in texts]
    categories = dict(categories)
    for column, dtype in dtypes.items():
        if dtype == "category" and categories.get(column) is None:
            # rows.layout leaves out the common categories: the sorted distinct values.
            cells = [row.get(column) for row in data if isinstance(row, dict)]
            if not all(v is None or isinstance(v, str) for v in cells):
                raise StoreError(f"{at}: column {column!r}: a category that is not text")
            categories[column] = sorted(set(cells) - {None})
    try:
        return rs.typed_frame(name, dtypes, categories, data, at)
    except InputError as err:
        raise StoreError(str(err)) from None
