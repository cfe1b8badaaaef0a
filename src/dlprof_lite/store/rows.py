"""A report table as rows the store writes, and back (see :mod:`dlprof_lite.store.schema`).

Place in the pipeline: store. A table becomes one plain JSON object per row (the report's
JSON writer's ``records``: NaN and NA to null, numpy to Python numbers) plus a small
``layout``: each column's pandas dtype name and, for categorical columns, the categories
when they are not simply the sorted distinct values (kernel names: the common case costs
nothing). :func:`dlprof_lite.store.stored.table` reverses it, checking every cell as the
report reader does: the DataFrame compares equal to the report's with
``pd.testing.assert_frame_equal`` (dtypes, categories and column order included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import sqlalchemy as sa

from dlprof_lite.render.writers import plain, records
from dlprof_lite.report.summary_types import scalar

Row = dict[str, object]


def layout(table: pd.DataFrame) -> dict[str, Any]:
    """``{"columns": [[name, dtype], ...], "categories": {name: [...] or None}}``."""
    columns = [[str(c), str(t)] for c, t in table.dtypes.items()]
    categories: dict[str, Any] = {}
    for name, dtype in table.dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype):
            cats = plain(list(dtype.categories))
            categories[str(name)] = None if _is_default(table[name], cats) else cats
    return {"columns": columns, "categories": categories}


def _is_default(column: pd.Series, cats: object) -> bool:
    """True when ``cats`` are what ``astype("category")`` would give: sorted distinct values."""
    try:
        return bool(cats == sorted({plain(v) for v in column.dropna().tolist()}))  # type: ignore[type-var]
    except TypeError:  # mixed types do not sort: keep the list
        return False


def table_rows(table: pd.DataFrame, keys: Sequence[sa.Column[Any]]) -> list[Row]:
    """One store row per table row: ``position``, the key columns, and ``data`` (all)."""
    convert = [(c.name, _converter(c.type)) for c in keys]
    out: list[Row] = []
    for position, data in enumerate(records(table)):
        row: Row = {"position": position, "data": data}
        for name, to_sql in convert:
            row[name] = to_sql(scalar(data.get(name)))
        out.append(row)
    return out


def _converter(sql_type: sa.types.TypeEngine[Any]) -> Callable[[object], object]:
    """A cell to a key column's type, None when it is not one (the cell stays in ``data``):
    a strict server refuses 'n/a' in a number column."""
    if isinstance(sql_type, sa.Boolean):
        return lambda v: v if isinstance(v, bool) else None
    if isinstance(sql_type, sa.Integer):
        return lambda v: int(n) if (n := _number(v)) is not None and n == int(n) else None
    if isinstance(sql_type, sa.Float):
        return _number
    return sql_text


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def sql_text(value: object) -> str | None:
    """Text a text column takes: NUL (PostgreSQL refuses it) as U+FFFD, a lone surrogate
    (a non-UTF-8 file name decoded by Python; no driver encodes it) as '?'. A row's exact
    text stays in its JSON ``data``."""
    if value is None:
        return None
    text = str(value).replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")
