"""Ingest step 2: NVTX events → the ``ranges`` table (ids, nesting depth, parents, paths).

Pipeline (:mod:`dlprof_lite.ingest.load`): ``read_export`` → **``build_ranges``** →
``correlate.attach_launches`` → ``correlate.attribute_ranges`` → analyses → ``Profile``.

The reader hands over one row per NVTX range with no structure (nsys stores none: nesting
is implicit in the timestamps of ranges on one thread). This module gives each range

* ``range_id``: 0-based in start order; equal starts put the longer range first and equal
  intervals keep input order, so a parent always precedes its children;
* ``end_ns``: the session end for a push without a pop (``closed`` False), and never before
  ``start_ns`` (a broken trace's negative range is clipped to zero length);
* ``depth`` / ``parent_id`` / ``path`` for push/pop ranges, nested per ``(pid, tid)``;
* ``path_id`` / ``parent_path_id``: one id per chain of ``(name, domain)`` pairs.

Nesting rule. On one thread, range *j* encloses range *i* when ``j`` comes first in range
order and ``start_j <= start_i <= end_i <= end_j`` (closed intervals, as nsys'
``nvtxgpuproj`` report). ``depth`` is the length of the longest chain of enclosing ranges
and ``parent_id`` is the latest-starting enclosing range one level up. In a valid trace
push/pop ranges on a thread are properly nested, and this is the usual stack: the parent is
the innermost enclosing range. A broken trace (clipped window, lost pop) can hold ranges
that overlap without nesting; the rule above still gives every range one deterministic
parent that encloses it, never a crash.

Start/end ranges (``nvtxRangeStart``/``End``) are process-wide and may end on another
thread; they are not part of any thread's stack, so they get depth 0, ``parent_id`` -1 and
``path`` = their own name, and they never parent a push/pop range.

``path`` is a bounded label (:mod:`dlprof_lite.ingest.paths`): the names from the top-level
range down joined by ``'/'``, with the middle of a very deep chain elided. Names are not
escaped: a name that itself contains ``'/'`` (e.g. ``"a/b"``) reads like two levels.
``depth`` and ``parent_id`` are the structure, and the full chain; ``path`` is a label. A
missing name counts as ``''`` in paths.

Everything is vectorised and linear-ish in the number of ranges whatever the depth: nesting
is counted with sorted searches (O(n log n)); only a thread whose ranges overlap without
nesting (or holds a zero-length range exactly where one range ends and the next begins,
which two unrelated ranges enclose) falls back to peeling one nesting level per pass
(O(n x depth) on that thread); paths take one pass per level over that level's ranges
only. Nothing recurses.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.ingest.columns import coerce, empty_frame
from dlprof_lite.ingest.paths import PATH_SEP, path_labels, with_path_ids
from dlprof_lite.ingest.templates import path_names
from dlprof_lite.numeric import range_positions
from dlprof_lite.rules.names import PUSH_POP, START_END

__all__ = [
    "PATH_SEP",
    "PUSH_POP",
    "START_END",
    "build_ranges",
    "pair_key",
    "range_positions",
    "value_offsets",
]


def build_ranges(nvtx: pd.DataFrame, *, session_end_ns: int) -> pd.DataFrame:
    """The ``ranges`` table of :mod:`~dlprof_lite.ingest.columns` from ``nvtx_events`` rows."""
    nvtx = coerce(nvtx, "nvtx_events")
    n = len(nvtx)
    if n == 0:
        return with_path_ids(coerce(empty_frame("ranges"), "ranges"))
    start_raw = nvtx["start_ns"].to_numpy(dtype=np.int64)
    closed_raw = nvtx["end_ns"].notna().to_numpy()
    end_raw = nvtx["end_ns"].to_numpy(dtype=np.int64, na_value=session_end_ns)
    end_raw = np.maximum(end_raw, start_raw)
    # lexsort is stable and its last key is primary: start, then longer first, then input order.
    order = np.lexsort((-end_raw, start_raw))
    start, end = start_raw[order], end_raw[order]
    pid = nvtx["pid"].to_numpy(dtype=np.int64)[order]
    tid = nvtx["tid"].to_numpy(dtype=np.int64)[order]
    push_pop = (nvtx["style"] == PUSH_POP).to_numpy(dtype=bool)[order]
    name = nvtx["name"].array.take(order)
    domain = nvtx["domain"].array.take(order)
    depth, parent = _nest(_thread_codes(pid, tid, push_pop), start, end, push_pop)
    labelled = path_names(name, domain, parent, depth, pid, tid)  # counters under their template
    ranges = pd.DataFrame(
        {
            "range_id": np.arange(n, dtype=np.int32),  # ids and counts: int32 (columns.py)
            "name": name,
            "domain": domain,
            "style": nvtx["style"].array.take(order),
            "pid": pid.astype(np.int32),
            "tid": tid.astype(np.int32),
            "start_ns": start,
            "end_ns": end,
            "closed": closed_raw[order],
            "depth": depth.astype(np.int32),
            "parent_id": parent.astype(np.int32),
            "path": path_labels(labelled, parent, depth),
            "path_name": labelled,
        },
        copy=False,
    )
    return with_path_ids(ranges)


def _thread_codes(pid: np.ndarray, tid: np.ndarray, push_pop: np.ndarray) -> np.ndarray:
    """A dense code per ``(pid, tid)`` for push/pop rows; -1 for start/end rows."""
    codes = np.full(pid.size, -1, dtype=np.int64)
    rows = np.flatnonzero(push_pop)
    codes[rows] = pd.factorize(pair_key(pid[rows], tid[rows]))[0]
    return codes


def pair_key(a: np.ndarray, b: np.ndarray) -> npt.NDArray[np.int64]:
    """One int64 per ``(a, b)`` pair, equal exactly when both are equal.

    Decoded nsys ids fit ``a << 32 | b`` (pid < 2**24, tid and correlation id < 2**32), one
    cheap hashable key; anything else falls back to combining factorized codes.
    """
    a64, b64 = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if a64.size == 0 or (
        a64.min() >= 0 and a64.max() < 2**31 and b64.min() >= 0 and b64.max() < 2**32
    ):
        return (a64 << 32) | b64
    code_a, _ = pd.factorize(a64)
    code_b, uniq_b = pd.factorize(b64)
    return code_a.astype(np.int64) * max(len(uniq_b), 1) + code_b


def _nest(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, push_pop: np.ndarray
) -> tuple[np.ndarray, ...]:
    """``depth`` and ``parent_id`` of every range (rows in range order).

    Counted for every thread at once (:func:`_nest_counted`); a thread whose ranges overlap
    without nesting is peeled level by level instead (:func:`_nest_peeled`), which also
    defines the answer for such broken traces.
    """
    depth, parent, rows = _unnested(thread, push_pop)
    if rows.size == 0:
        return depth, parent
    d, up, bad = _nest_counted(thread[rows], start[rows], end[rows])
    depth[rows] = d
    parent[rows] = np.where(up >= 0, rows[np.maximum(up, 0)], -1)
    if bad.size:
        broken = push_pop & np.isin(thread, bad)
        d_broken, p_broken = _nest_peeled(thread, end, broken)
        depth[broken], parent[broken] = d_broken[broken], p_broken[broken]
    return depth, parent


def _unnested(thread: np.ndarray, push_pop: np.ndarray) -> tuple[np.ndarray, ...]:
    """Depth 0 and no parent for every range, and the push/pop rows sorted by thread (range
    order kept inside a thread): where both nesting rules start."""
    depth = np.zeros(thread.size, dtype=np.int64)
    parent = np.full(thread.size, -1, dtype=np.int64)
    rows = np.flatnonzero(push_pop)
    return depth, parent, rows[np.argsort(thread[rows], kind="stable")]


def _nest_counted(
    th: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth and parent (positions in these rows) of ranges sorted by thread, then range
    order; and the threads whose ranges do not nest properly (their answers are unused).

    In a properly nested thread the ranges enclosing ``i`` are exactly the earlier ranges
    that have not ended before it: ``depth = (earlier ranges) - (earlier ranges ending at
    or before its start)``. For a range of positive length those are the ranges with
    ``end <= start_i`` less the zero-length ranges at ``start_i`` (they come after ``i``);
    for a zero-length range, the ranges with ``end < start_i``. The parent is the last
    earlier range one level up. A thread passes when every range's parent ends no earlier
    than the range itself: then its ``depth`` ancestors are distinct enclosing ranges and
    make up all of the earlier ranges still open at its start, so no two ranges overlap
    without nesting and the answer is the level peeling's.
    """
    m = th.size
    first = np.searchsorted(th, th)  # first row of each row's thread (codes are sorted)
    (end_key, start_key), _ = _thread_keys(th, end, start)
    ends = np.sort(end_key)
    dot = np.sort(start_key[start == end])  # zero-length ranges by (thread, start)
    at_or_before = np.searchsorted(ends, start_key, side="right") - first
    before = np.searchsorted(ends, start_key, side="left") - first
    dots_here = np.searchsorted(dot, start_key, "right") - np.searchsorted(dot, start_key, "left")
    closed = np.where(end > start, at_or_before - dots_here, before)
    depth = np.arange(m) - first - closed
    # parent: the last earlier row of the same thread at depth - 1
    level_key = th * (m + 1) + depth  # fits int64: th, depth < m
    levels, level_code = np.unique(level_key, return_inverse=True)
    by_level = np.sort(level_code * m + np.arange(m))
    want = np.minimum(np.searchsorted(levels, level_key - 1), levels.size - 1)
    has_level = (depth > 0) & (levels[want] == level_key - 1)
    at = np.searchsorted(by_level, want * m + np.arange(m)) - 1
    hit = has_level & (at >= 0) & (by_level[np.maximum(at, 0)] // m == want)
    parent = np.where(hit, by_level[np.maximum(at, 0)] % m, -1)
    ok = (depth == 0) | (hit & (end[np.maximum(parent, 0)] >= end))
    return depth, parent, np.unique(th[~ok])


def _thread_keys(th: np.ndarray, *values: np.ndarray) -> tuple[list[np.ndarray], int]:
    """``thread * scale + offset(value)`` for several value arrays on one scale."""
    offset, scale = value_offsets(np.concatenate(values), int(th.max()) + 1)
    parts = np.split(offset, len(values))
    return [th * scale + part for part in parts], scale


def _nest_peeled(
    thread: np.ndarray, end: np.ndarray, push_pop: np.ndarray
) -> tuple[np.ndarray, ...]:
    """``depth`` and ``parent_id`` by peeling one nesting level per pass.

    Within a thread, in range order, a range is at the current level when no earlier range
    still in play ends at or after it (a running maximum of ends); those found are removed
    and the next pass finds the next level. A range's parent is the nearest earlier range
    of the previous level, which (being a maximal range of that level before it) encloses
    it and lies on the same thread.
    """
    depth, parent, rows = _unnested(thread, push_pop)
    if rows.size == 0:
        return depth, parent
    th = thread[rows]
    m = rows.size
    # "thread block, then end" as one int64, so one running maximum serves every thread.
    offset, scale = value_offsets(end[rows], m)
    remaining = np.arange(m)
    previous = np.empty(0, dtype=np.int64)
    level = 0
    while remaining.size:
        t = th[remaining]
        block = np.cumsum(np.r_[True, t[1:] != t[:-1]]) - 1
        key = block * scale + offset[remaining]
        before = np.r_[-1, np.maximum.accumulate(key)[:-1]]
        top = key > before
        found = remaining[top]
        depth[rows[found]] = level
        if level:
            nearest = np.searchsorted(previous, found, side="right") - 1
            parent[rows[found]] = rows[previous[nearest]]
        previous, remaining = found, remaining[~top]
        level += 1
    return depth, parent


def value_offsets(values: np.ndarray, blocks: int) -> tuple[np.ndarray, int]:
    """Order-preserving offsets in ``[0, scale)`` with ``blocks * scale`` inside int64.

    So ``block * scale + offset`` sorts by block, then value, in one int64 (one sort, one
    running maximum or one searchsorted for all threads). Raw offsets from the minimum
    when they fit (the usual case: a session is far shorter than 2**62 ns / blocks);
    dense ranks otherwise.
    """
    low = int(values.min())
    span = int(values.max()) - low + 1
    if blocks * span < 2**62:
        return values - low, span
    uniq, rank = np.unique(values, return_inverse=True)
    return rank.astype(np.int64), len(uniq)
