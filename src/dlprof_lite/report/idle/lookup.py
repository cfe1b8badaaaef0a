"""Which range holds an instant of a thread: the op rule of ingest, for any instant.

Place in the pipeline: report, under :mod:`dlprof_lite.report.idle.state`. Ingest books a
kernel to the innermost range its launch call started in (ingest/correlate.py, "Op ↔ NVTX
range": push/pop on the launching thread first, else start/end in the process, the latest
started holding it); this asks the same of any instant of one thread, as a half-open
``[start, end)``, so that a stretch of time starting where a range ends is past it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import block_maxima, last_at_least
from dlprof_lite.rules.names import PUSH_POP


def innermost_at(ranges: pd.DataFrame, pid: int, tid: int, t: np.ndarray) -> np.ndarray:
    """Per instant of thread ``(pid, tid)``, the position (row order of ``ranges``) of the
    innermost range holding it, by the op rule above (push/pop on the thread first, else
    start/end in the process), as a half-open ``[start, end)``: the range a launch starting
    at ``t`` would get, except that an instant at a range's end is past it. -1 where no
    range holds it."""
    return RangeLookup(ranges, pid, tid).at(t)


class RangeLookup:
    """:func:`innermost_at` for one thread, its ranges found and ordered once (the idle
    partition asks it chunk after chunk). One thread, so no composite keys."""

    def __init__(self, ranges: pd.DataFrame, pid: int, tid: int) -> None:
        start = ranges["start_ns"].to_numpy(dtype=np.int64)
        end = ranges["end_ns"].to_numpy(dtype=np.int64)
        ids = ranges["range_id"].to_numpy(dtype=np.int64)
        same = ranges["pid"].to_numpy(dtype=np.int64) == pid
        push_pop = (ranges["style"] == PUSH_POP).to_numpy(dtype=bool)
        on_thread = same & push_pop & (ranges["tid"].to_numpy(dtype=np.int64) == tid)
        self._pushed = _Ordered(np.flatnonzero(on_thread), start, end, ids)
        self._started = _Ordered(np.flatnonzero(same & ~push_pop), start, end, ids)

    def at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        inner = self._pushed.latest_holding(t)
        missing = np.flatnonzero(inner < 0)
        if missing.size:
            inner[missing] = self._started.latest_holding(t[missing])
        return inner


class _Ordered:
    """Some ranges in range order (start, then id), with their starts and ends."""

    def __init__(self, rows: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray):
        s = start[rows]
        if (np.diff(s) < 0).any() or (np.diff(ids[rows]) < 0).any():
            order = np.lexsort((ids[rows], s))
            rows, s = rows[order], s[order]
        self.rows, self.start, self.end = rows, s, end[rows]
        self._maxima: list[np.ndarray] | None = None

    def maxima(self) -> list[np.ndarray]:
        """The ends' block maxima, built at the first look that needs them and kept: the
        idle partition looks chunk after chunk (rebuilt each time, 0.15 s at a million
        ranges)."""
        if self._maxima is None:
            self._maxima = block_maxima(self.end)
        return self._maxima

    def latest_holding(self, t: np.ndarray) -> np.ndarray:
        """The last range with ``start <= t < end``, per instant; -1 where none."""
        if self.rows.size == 0:
            return np.full(t.size, -1, dtype=np.int64)
        hi = np.searchsorted(self.start, t, side="right")
        j = last_at_least(self.end, np.zeros(t.size, dtype=np.int64), hi, t + 1, self.maxima)
        return np.where(j >= 0, self.rows[np.maximum(j, 0)], -1)
