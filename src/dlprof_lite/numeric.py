"""Column helpers that more than one stage needs: exact integer sums per group, and string
tests evaluated once per distinct value of a categorical column.

A shared leaf (``tests/test_stages.py``): it imports numpy and pandas, nothing of ours.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group number (``n`` groups; bincount's float
    weights would round past 2**53)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, values)
    return out


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
