"""Nesting levels of the ``ranges`` table: rows by depth, and sums passed up to parents.

Helpers for :mod:`dlprof_lite.ingest.paths` and :mod:`dlprof_lite.ingest.correlate`. A
trace can nest thousands of levels deep (recursive modules, pushes that are never popped),
so nothing here walks a chain range by range or materialises an (item, ancestor) pair per
level: each pass handles one level, over that level's rows only, which keeps the work
linear in the number of ranges whatever the depth.
"""

from __future__ import annotations

import numpy as np

from dlprof_lite.errors import SchemaError


def by_level(depth: np.ndarray) -> list[np.ndarray]:
    """Row positions grouped by depth, shallowest first, row order kept inside a level."""
    if depth.size == 0:
        return []
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[bounds[d] : bounds[d + 1]] for d in range(bounds.size - 1)]


def consistent_depth(parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``depth`` when every parent sits one level above its child (what ``build_ranges``
    gives); otherwise the number of ancestors, by pointer jumping (hand-built frames).

    ``parent``: row position of each row's parent, -1 at the top.
    """
    has = parent >= 0
    top_ok = bool((depth[~has] == 0).all())
    if top_ok and bool((depth[parent[has]] == depth[has] - 1).all()):
        return depth
    dist = has.astype(np.int64)
    jump = parent.copy()
    for _ in range(63):  # doubling reaches 2**63 levels: more means a cycle
        live = np.flatnonzero(jump >= 0)
        if live.size == 0:
            return dist
        up = jump[live]
        dist[live] += dist[up]
        jump[live] = jump[up]
    raise SchemaError("ranges: parent_id chains form a cycle")


def accumulate_up(
    parent: np.ndarray,
    levels: list[np.ndarray],
    sums: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
) -> None:
    """In place: every row's ``sums`` (quantities x rows), ``low`` (min) and ``high``
    (max) also cover all of its descendants.

    Deepest level first, so a child is complete before it is added to its parent. One
    1-D ``ufunc.at`` per quantity: numpy's fast path (a 2-D ``add.at`` is several times
    slower on large levels).
    """
    for rows in reversed(levels[1:]):
        up = parent[rows]
        for column in sums:
            np.add.at(column, up, column[rows])
        np.minimum.at(low, up, low[rows])
        np.maximum.at(high, up, high[rows])
