"""Small DataFrame helpers the report tables share (no analysis of their own)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import column_names


def empty_report(table: str) -> pd.DataFrame:
    """A report table with its declared columns and no rows."""
    return pd.DataFrame({name: pd.Series(dtype="object") for name in column_names(table)})


def ordered(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """The declared columns of a report table, in declared order, with a fresh index."""
    return frame.loc[:, column_names(table)].reset_index(drop=True)


def cat_mask(series: pd.Series, predicate: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """Evaluate a string predicate once per distinct value of a categorical column.

    ``predicate`` maps a Series of strings to booleans; missing values are False. Evaluating
    on the categories instead of the rows keeps string matching off the per-event path.
    """
    if len(series) == 0:
        return np.zeros(0, dtype=bool)
    if not isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype("category")
    cats = pd.Series(series.cat.categories.astype(str))
    hit = np.append(predicate(cats).to_numpy(dtype=bool), False)  # code -1 (NA) -> False
    return hit[series.cat.codes.to_numpy()]


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
