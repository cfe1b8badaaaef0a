"""Small DataFrame helpers the report tables share (no analysis of their own)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import column_names


def ordered(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """The declared columns of a report table, in declared order, with a fresh index; a
    missing value of a text (object) column is None, as JSON's null reads back (a join
    leaves NaN there: ``open_report`` would not give the same frame back)."""
    out = frame.loc[:, column_names(table)].reset_index(drop=True)
    for name in out.columns:
        column = out[name]
        if column.dtype == object and column.isna().any():
            out[name] = column.where(column.notna(), None)
    return out


def groups(
    frame: pd.DataFrame, columns: list[str], rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The distinct combinations of ``columns`` among the ``rows`` (a mask) of ``frame``,
    missing values included, numbered in order of first appearance (``groupby(sort=False,
    dropna=False)``'s order): each row's group number, and each group's first row (a
    position in ``frame``).

    One column at a time, on small integer codes renumbered through a dense table: a pandas
    groupby of a million rows held 60 MB of codes and hash tables (``pd.factorize`` sizes
    its table for every row, not for the few distinct keys)."""
    key = np.zeros(int(np.count_nonzero(rows)), dtype=np.int64)
    for name in columns:
        found = _column_codes(frame[name], rows)  # 0: missing
        if found is None:  # one value in every row (one process, one GPU): no split
            continue
        codes, size = found
        key *= size + 1
        key += codes
        del codes
        key = _renumbered(key)
    count = int(key.max()) + 1 if key.size else 0
    if count <= 1:  # one group (or none): every row's number is 0
        return key, np.flatnonzero(rows)[:count]
    # Renumber in order of first appearance: a group's first row is the least row holding it.
    first = np.full(count, key.size, dtype=np.int64)
    np.minimum.at(first, key, np.arange(key.size))
    order = np.empty(count, dtype=np.int64)
    order[np.argsort(first, kind="stable")] = np.arange(count)
    return order[key], np.flatnonzero(rows)[np.sort(first)]


def _column_codes(column: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The ``rows`` of one column as codes 1..size (0: missing), and size; None where
    every row holds the same value."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()[rows].astype(np.int64)
        codes += 1
        return codes, len(column.cat.categories)
    values = column.array[rows]  # its own array: a nullable one's to_numpy() is Python ints
    if pd.api.types.is_integer_dtype(values.dtype):
        missing = np.asarray(values.isna(), dtype=bool)
        ints = values.to_numpy(dtype=np.int64, na_value=0)
        if ints.size and not missing.any() and ints.min() == ints.max():
            return None
        codes = _renumbered(ints) + 1
        codes[missing] = 0
        # Size: the codes present (a missing row's value, 0, may have made one of its own).
        return codes, int(codes.max()) if codes.size else 0
    found, uniques = pd.factorize(values)  # other kinds (text): rare, small frames
    return found.astype(np.int64) + 1, len(uniques)


_DENSE = 1 << 22  # values spanning up to this many (or the row count) go through a table


def _renumbered(values: np.ndarray) -> np.ndarray:
    """Integers as 0..k-1 in value order (k distinct values); a dense table of the span when
    it is small, a sort-free hash table otherwise."""
    if values.size == 0:
        return values.astype(np.int64)
    low = int(values.min())
    span = int(values.max()) - low + 1
    if span > max(values.size, _DENSE):
        found, _ = pd.factorize(values, sort=True)
        return found.astype(np.int64)
    offset = values - low
    present = np.zeros(span, dtype=bool)
    present[offset] = True
    rank = np.cumsum(present, dtype=np.int64)
    rank -= 1
    out: np.ndarray = rank[offset]
    return out


def ancestors(parent: Mapping[str, object], layer: str) -> list[str]:
    """``layer``'s ancestors, nearest first, from the layers table's ``parent`` links (a
    layer called inside itself: each once)."""
    found: list[str] = []
    up = parent.get(layer)
    while isinstance(up, str) and up not in found and up != layer:
        found.append(up)
        up = parent.get(up)
    return found


def share(part: pd.Series | np.ndarray, whole: pd.Series | np.ndarray) -> np.ndarray:
    """part / whole, NaN where whole is 0."""
    part = np.asarray(part, dtype="float64")
    whole = np.asarray(whole, dtype="float64")
    out = np.full(part.shape, np.nan)
    np.divide(part, whole, out=out, where=whole != 0)
    return out


def gpu_ops(kernels: pd.DataFrame, memops: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Kernels and memops stacked, keeping ``columns`` (categoricals become plain objects)."""
    parts = [f.loc[:, columns] for f in (kernels, memops) if len(f)]
    if not parts:
        return kernels.loc[:, columns].iloc[0:0]
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)
    return pd.concat(parts, ignore_index=True)
