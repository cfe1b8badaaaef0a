"""Column helpers that more than one stage needs: exact integer sums per group, string tests
evaluated once per distinct value of a categorical column, the row positions of range ids,
and the last interval that still reaches an instant.

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


def range_positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row position of each ``wanted`` range id in ``ids``; -1 where absent or negative.

    ingest's ``build_ranges`` numbers ranges 0..n-1 in row order, where
    an id is its position: that common case needs no sort or hash table over millions of ids.
    """
    wanted = np.asarray(wanted, dtype=np.int64)
    if np.array_equal(ids, np.arange(len(ids))):
        return np.where((wanted >= 0) & (wanted < len(ids)), wanted, -1)
    if len(ids) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = np.minimum(np.searchsorted(ids[order], wanted), len(ids) - 1)
    found = (wanted >= 0) & (ids[order][at] == wanted)
    return np.where(found, order[at], -1)


def block_maxima(a: np.ndarray) -> list[np.ndarray]:
    """The maxima of ``a``'s aligned power-of-two blocks, level by level (``a`` itself
    first; 2n values in all): what :func:`last_at_least` climbs."""
    maxima = [a]
    while maxima[-1].size > 1:
        m = maxima[-1]
        maxima.append(np.maximum(m[0 : m.size - 1 : 2], m[1 : m.size : 2]))
    return maxima


def last_at_least(
    a: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: np.ndarray,
    maxima: Callable[[], list[np.ndarray]] | None = None,
) -> np.ndarray:  # fmt: skip
    """For each query, the largest ``j`` in ``[lo, hi)`` with ``a[j] >= t``, else -1.

    Finds the largest ``j < hi`` with ``a[j] >= t`` over block maxima of aligned
    power-of-two blocks (2n values in all): climb left from ``hi`` over whole blocks whose
    maximum is below ``t`` (Fenwick-style, growing blocks), then descend inside the block
    that stopped the climb; a ``j`` below ``lo`` (another key's range) means none. O(log n)
    vectorised passes over the queries; no per-query loop. ``maxima``: gives
    :func:`block_maxima` of ``a``, kept by a caller that asks of one ``a`` many times.
    """
    found = np.full(t.size, -1, dtype=np.int64)
    last = np.maximum(hi - 1, 0)
    direct = (hi > lo) & (a[last] >= t)  # the usual case: the last range contains t
    found[direct] = last[direct]
    rest = np.flatnonzero((hi > lo) & ~direct)
    if rest.size == 0:
        return found
    levels = block_maxima(a) if maxima is None else maxima()
    # pos: every a[pos:hi] is below t (a[hi - 1] is, or the direct case took it)
    pos, need = hi[rest] - 1, t[rest]
    stop = np.full(rest.size, -1, dtype=np.int64)
    for k in range(len(levels)):  # climb: the block [pos - 2**k, pos) when pos has bit k
        i = np.flatnonzero((stop < 0) & ((pos >> k) & 1 == 1))
        skip = levels[k][(pos[i] >> k) - 1] < need[i]
        pos[i[skip]] -= 1 << k
        stop[i[~skip]] = k
    for k in range(len(levels) - 2, -1, -1):  # descend: right half first, then left
        i = np.flatnonzero(stop > k)
        skip = levels[k][(pos[i] >> k) - 1] < need[i]
        pos[i[skip]] -= 1 << k
    j = pos - 1
    ok = (j >= lo[rest]) & (a[np.maximum(j, 0)] >= need)
    found[rest[ok]] = j[ok]
    return found
