"""Interval arithmetic for the report: unions of busy intervals and their overlap with windows.

GPU utilization, per-phase step breakdowns and data-loading time all ask one question: how
much of a time window is covered by a set of (possibly overlapping) intervals? We merge the
intervals once into sorted disjoint segments, then answer any number of windows with a
cumulative sum and two binary searches each: vectorised, O((n + w) log n).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.frames import groups

Segments = tuple[np.ndarray, np.ndarray]


def merge(starts: np.ndarray, ends: np.ndarray) -> Segments:
    """The union of half-open intervals ``[start, end)`` as sorted, disjoint segments."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():  # most ops have a length: no copy of a million starts and ends then
        starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    s, e = starts, ends
    if (starts[1:] < starts[:-1]).any():  # ops come in start order: no sort, no gather
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # A new segment begins where an interval starts after everything before it has ended;
    # masks, not index arrays: ops on one stream are each their own segment (2 x 8 MB at 1M).
    new = np.ones(len(s), dtype=bool)
    np.greater(s[1:], run_end[:-1], out=new[1:])
    last = np.ones(len(s), dtype=bool)
    last[:-1] = new[1:]
    return s[new], run_end[last]


def covered_before(segments: Segments, t: np.ndarray, cum: np.ndarray | None = None) -> np.ndarray:
    """Length of the segments' union that lies before each time in ``t`` (``cum``: their
    :func:`cumulative` lengths, when already computed)."""
    seg_s, seg_e = segments
    t = np.asarray(t, dtype=np.int64)
    out = np.zeros(len(t), dtype=np.int64)
    if len(seg_s) == 0:
        return out
    cum = cumulative(segments) if cum is None else cum
    k = np.searchsorted(seg_s, t, side="right")
    has = k > 0
    j = k[has] - 1
    out[has] = cum[j] + np.minimum(t[has], seg_e[j]) - seg_s[j]
    return out


def cumulative(segments: Segments) -> np.ndarray:
    """``cum[i]``: total length of segments ``0 .. i-1`` (all end before segment i starts)."""
    seg_s, seg_e = segments
    cum = np.zeros(len(seg_s) + 1, dtype=np.int64)
    np.subtract(seg_e, seg_s, out=cum[1:])
    np.cumsum(cum[1:], out=cum[1:])
    return cum


def covered_between(segments: Segments, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Length of the segments' union inside each window ``[t0[i], t1[i])``."""
    cum = cumulative(segments) if len(segments[0]) else None  # once for both ends
    inside: np.ndarray = covered_before(segments, t1, cum) - covered_before(segments, t0, cum)
    return inside


def total(segments: Segments) -> int:
    seg_s, seg_e = segments
    return int((seg_e - seg_s).sum())


# A GPU timeline: (process id, CUDA device id). Two processes that each see "device 0" (one
# per rank, or CUDA_VISIBLE_DEVICES remapping) are two timelines, as host gaps are.
Timeline = tuple[int, int]


def busy_per_device(ops: pd.DataFrame) -> dict[Timeline, Segments]:
    """Merged busy segments of each ``(pid, device_id)`` timeline, from ``start_ns``/``end_ns``.

    One merge per timeline (a loop over timelines, not events).
    """
    codes, keys = timelines(ops)
    starts, ends = bounds(ops)
    return {key: merge(*_of(codes, g, len(keys), starts, ends)) for g, key in enumerate(keys)}


def busy_in_windows(ops: pd.DataFrame, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Busy device time inside each window, summed over ``(pid, device)`` timelines."""
    codes, keys = timelines(ops)
    return busy_by_timeline(codes, len(keys), *bounds(ops), t0, t1)


def timelines(ops: pd.DataFrame) -> tuple[np.ndarray, list[Timeline]]:
    """Each op's timeline number (-1: no device), and the timelines in (pid, device) order.

    Numbers, not per-group frames: iterating a groupby copied every column of every op;
    numbered by :func:`groups`, not by a groupby of the pairs (40 MB at 1M kernels)."""
    if ops.empty:
        return np.empty(0, dtype=np.int64), []
    has = ops["pid"].notna().to_numpy(dtype=bool) & ops["device_id"].notna().to_numpy(dtype=bool)
    found, first = groups(ops, ["pid", "device_id"], has)
    pairs = [(int(p), int(d)) for p, d in zip(ops["pid"].take(first), ops["device_id"].take(first),
                                              strict=True)]  # fmt: skip
    order = sorted(range(len(pairs)), key=pairs.__getitem__)
    rank = np.empty(len(pairs), dtype=np.int64)
    rank[order] = np.arange(len(pairs))
    codes = np.full(len(ops), -1, dtype=np.int64)
    codes[has] = rank[found]
    return codes, [pairs[i] for i in order]


def busy_by_timeline(
    codes: np.ndarray, n: int, starts: np.ndarray, ends: np.ndarray, t0: np.ndarray,
    t1: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """:func:`busy_in_windows` of ops given as arrays: timeline numbers of
    :func:`timelines` (``n`` of them), starts and ends."""
    acc = np.zeros(len(t0), dtype=np.int64)
    for g in range(n):
        acc += covered_between(merge(*_of(codes, g, n, starts, ends)), t0, t1)
    return acc


def bounds(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The ops' starts and ends as int64 arrays."""
    return ops["start_ns"].to_numpy(dtype=np.int64), ops["end_ns"].to_numpy(dtype=np.int64)


def _of(
    codes: np.ndarray, g: int, n: int, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The starts and ends of timeline ``g`` (the arrays themselves for the only one)."""
    if n == 1 and (codes == 0).all():
        return starts, ends
    mine = codes == g
    return starts[mine], ends[mine]


def in_windows(times: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Whether each time lies in one of the sorted, disjoint windows ``[t0[i], t1[i])``."""
    times = np.asarray(times, dtype=np.int64)
    t1 = np.asarray(t1, dtype=np.int64)
    k = np.searchsorted(np.asarray(t0, dtype=np.int64), times, side="right") - 1
    inside = k >= 0
    inside[inside] = times[inside] < t1[k[inside]]
    return inside
