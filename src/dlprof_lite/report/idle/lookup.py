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

from dlprof_lite.numeric import last_at_least
from dlprof_lite.rules.names import PUSH_POP


def innermost_at(ranges: pd.DataFrame, pid: int, tid: int, t: np.ndarray) -> np.ndarray:
    """Per instant of thread ``(pid, tid)``, the position (row order of ``ranges``) of the
    innermost range holding it, by the op rule above (push/pop on the thread first, else
    start/end in the process), as a half-open ``[start, end)``: the range a launch starting
    at ``t`` would get, except that an instant at a range's end is past it. -1 where no
    range holds it.

    The report's idle partition labels each stretch of a thread's time with this
    (report/idle/): what holds the stretch's first nanosecond holds all of it there. One
    thread, so no composite keys: its ranges alone are searched."""
    t = np.asarray(t, dtype=np.int64)
    if ranges.empty or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    start = ranges["start_ns"].to_numpy(dtype=np.int64)
    end = ranges["end_ns"].to_numpy(dtype=np.int64)
    ids = ranges["range_id"].to_numpy(dtype=np.int64)
    same = ranges["pid"].to_numpy(dtype=np.int64) == pid
    push_pop = (ranges["style"] == PUSH_POP).to_numpy(dtype=bool)
    on_thread = same & push_pop & (ranges["tid"].to_numpy(dtype=np.int64) == tid)
    inner = _latest_holding(np.flatnonzero(on_thread), start, end, ids, t)
    missing = np.flatnonzero(inner < 0)
    if missing.size:
        found = _latest_holding(np.flatnonzero(same & ~push_pop), start, end, ids, t[missing])
        inner[missing] = found
    return inner


def _latest_holding(
    rows: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Of ``rows``, the last in range order with ``start <= t < end``, per instant; -1."""
    if rows.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    s = start[rows]
    if (np.diff(s) < 0).any() or (np.diff(ids[rows]) < 0).any():
        order = np.lexsort((ids[rows], s))
        rows, s = rows[order], s[order]
    hi = np.searchsorted(s, t, side="right")
    j = last_at_least(end[rows], np.zeros(t.size, dtype=np.int64), hi, t + 1)
    return np.where(j >= 0, rows[np.maximum(j, 0)], -1)
