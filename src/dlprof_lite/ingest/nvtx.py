"""Ingest step 2: NVTX events → the ``ranges`` table (ids, nesting depth, parents, paths).

Pipeline (:mod:`dlprof_lite.ingest.load`): ``read_export`` → **``build_ranges``** →
``correlate.attach_launches`` → ``correlate.attribute_ranges`` → analyses → ``Profile``.

The reader hands over one row per NVTX range with no structure (nsys stores none: nesting
is implicit in the timestamps of ranges on one thread). This module gives each range

* ``range_id``: 0-based in start order; equal starts put the longer range first and equal
  intervals keep input order, so a parent always precedes its children;
* ``end_ns``: the session end for a push without a pop (``closed`` False), and never before
  ``start_ns`` (a broken trace's negative range is clipped to zero length);
* ``depth`` / ``parent_id`` / ``path`` for push/pop ranges, nested per ``(pid, tid)``.

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

Paths join names with ``'/'`` without escaping: a name that itself contains ``'/'`` (e.g.
``"a/b"``) reads like two levels in ``path``. ``depth`` and ``parent_id`` are the structure;
``path`` is a label. A missing name counts as ``''`` in paths.

Everything is vectorised: one sort, then a loop over nesting *levels* (bounded by the
deepest nesting), never over events.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.ingest.columns import coerce, empty_frame

PUSH_POP = "push_pop"
START_END = "start_end"
PATH_SEP = "/"


def build_ranges(nvtx: pd.DataFrame, *, session_end_ns: int) -> pd.DataFrame:
    """The ``ranges`` table of :mod:`~dlprof_lite.ingest.columns` from ``nvtx_events`` rows."""
    nvtx = coerce(nvtx, "nvtx_events")
    n = len(nvtx)
    if n == 0:
        return coerce(empty_frame("ranges"), "ranges")
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
    depth, parent = _nest(_thread_codes(pid, tid, push_pop), end, push_pop)
    return pd.DataFrame(
        {
            "range_id": np.arange(n, dtype=np.int64),
            "name": name,
            "domain": nvtx["domain"].array.take(order),
            "style": nvtx["style"].array.take(order),
            "pid": pid,
            "tid": tid,
            "end_tid": nvtx["end_tid"].array.take(order),
            "start_ns": start,
            "end_ns": end,
            "closed": closed_raw[order],
            "depth": depth,
            "parent_id": parent,
            "path": _paths(name, depth, parent),
        },
        copy=False,
    )


def _thread_codes(pid: np.ndarray, tid: np.ndarray, push_pop: np.ndarray) -> np.ndarray:
    """A dense code per ``(pid, tid)`` for push/pop rows; -1 for start/end rows."""
    codes = np.full(pid.size, -1, dtype=np.int64)
    rows = np.flatnonzero(push_pop)
    codes[rows] = pd.factorize(pair_key(pid[rows], tid[rows]))[0]
    return codes


def pair_key(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One int64 per ``(a, b)`` pair, equal exactly when both are equal.

    Decoded nsys ids fit ``a << 32 | b`` (pid < 2**24, tid and correlation id < 2**32), one
    cheap hashable key; anything else falls back to combining factorized codes.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.size == 0 or (a.min() >= 0 and a.max() < 2**31 and b.min() >= 0 and b.max() < 2**32):
        return (a << 32) | b
    code_a, _ = pd.factorize(a)
    code_b, uniq_b = pd.factorize(b)
    return code_a.astype(np.int64) * max(len(uniq_b), 1) + code_b


def _nest(thread: np.ndarray, end: np.ndarray, push_pop: np.ndarray) -> tuple[np.ndarray, ...]:
    """``depth`` and ``parent_id`` of every range (rows in range order).

    Peels one nesting level per pass. Within a thread, in range order, a range is at the
    current level when no earlier range still in play ends at or after it (a running
    maximum of ends); those found are removed and the next pass finds the next level. A
    range's parent is the nearest earlier range of the previous level, which (being a
    maximal range of that level before it) encloses it and lies on the same thread.
    """
    n = end.size
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(push_pop)
    if rows.size == 0:
        return depth, parent
    rows = rows[np.argsort(thread[rows], kind="stable")]  # by thread, range order inside
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


def _paths(name: pd.Categorical, depth: np.ndarray, parent: np.ndarray) -> pd.Categorical:
    """Names from the top-level range down, joined by :data:`PATH_SEP`, as a categorical.

    Built level by level from the parent's path; only distinct (parent path, name) pairs
    are joined as Python strings, so a million ranges with a few thousand distinct paths
    cost a few thousand concatenations.
    """
    labels = [str(c) for c in name.categories] + [""]  # last slot: missing name
    name_code = np.asarray(name.codes, dtype=np.int64)
    name_code = np.where(name_code < 0, len(labels) - 1, name_code)
    strings: list[str] = list(labels)
    code = name_code.copy()  # depth 0 and start/end: the path is the name
    by_depth = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(int(depth.max()) + 2))
    for level in range(1, bounds.size - 1):
        rows = by_depth[bounds[level] : bounds[level + 1]]
        pair = code[parent[rows]] * len(labels) + name_code[rows]
        inverse, uniq = pd.factorize(pair)
        base = len(strings)
        strings.extend(
            strings[p] + PATH_SEP + labels[c]
            for p, c in zip(uniq // len(labels), uniq % len(labels), strict=True)
        )
        code[rows] = base + inverse
    used = np.flatnonzero(np.bincount(code, minlength=len(strings)))
    spelled = np.asarray(strings, dtype=object)[used]
    compact = np.full(len(strings), -1, dtype=np.int64)
    compact[used] = np.arange(used.size)
    # Two (parent path, name) pairs spell one path only through a '/' inside a name (or
    # a literal '' name beside a missing one): merge those spellings into one category.
    if any(PATH_SEP in s for s in labels) or len(set(labels)) < len(labels):
        merged, spelled = pd.factorize(spelled)
        compact[used] = merged
    return pd.Categorical.from_codes(compact[code], categories=pd.Index(spelled))


def range_positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row position of each ``wanted`` range id in ``ids``; -1 where absent or negative.

    :func:`build_ranges` numbers ranges 0..n-1 in row order, where an id is its position:
    that common case needs no sort or hash table over millions of ids.
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

