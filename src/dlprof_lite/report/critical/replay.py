"""What-if: the graph replayed with chosen durations scaled, every edge kept.

Place in the pipeline: report, from :func:`~dlprof_lite.report.critical.graph.build_graph`;
the ``whatif`` command and ``Report.what_if`` print it.

Each node starts at the latest its start edges allow (anchors moved with the replay, lags
as observed but never more) plus its own slack, and ends its scaled work later, or, for a
node waiting at an end edge (a sync, a join), when what it waits for is done plus the
return it showed, if later. Replayed unchanged, the graph gives the export's times back
exactly. What replay assumes is in docs/critical-path.md: the edges are those of the export
(a sync still waits, the op order of each stream and thread is kept), lags and slack do not
change, and no new contention appears when work moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlprof_lite.report.critical.graph import Graph
from dlprof_lite.report.critical.path import completions, step_begins

_I64 = np.int64
_MIN = int(np.iinfo(_I64).min)


@dataclass(frozen=True)
class Replayed:
    start: np.ndarray
    end: np.ndarray


def replay(g: Graph, scale: np.ndarray) -> Replayed:
    """Start and end of every node with its work multiplied by ``scale`` (per node)."""
    n = g.size
    work = np.round(g.work() * scale).astype(_I64)
    x_ptr, x_src, x_off, x_lag = _by_dst(n, g.extra.dst, g.extra.src, g.extra.offset,
                                         g.extra.lag)  # fmt: skip
    e_ptr, e_src, e_lag = _by_dst(n, g.ends.dst, g.ends.src, g.ends.lag)
    has_end = np.diff(e_ptr) > 0
    # Events in the export's time order: a node's start, and the end of one that waits at an
    # end edge; at one instant ends first, then by end and node order.
    ev_time = np.r_[g.start, g.end[has_end]]
    ev_type = np.r_[np.ones(n, dtype=np.int8), np.zeros(int(has_end.sum()), dtype=np.int8)]
    ev_node = np.r_[np.arange(n, dtype=_I64), np.flatnonzero(has_end)]
    order = np.lexsort((ev_node, g.end[ev_node], ev_type, ev_time))
    events = np.where(ev_type[order] == 1, ev_node[order], -1 - ev_node[order]).tolist()
    del ev_time, ev_type, ev_node, order

    start, end = g.start.tolist(), g.end.tolist()  # unreached anchors read the export's
    slack, w, ratio = g.slack.tolist(), work.tolist(), scale.tolist()
    chained, waits = g.chained.tolist(), has_end.tolist()
    pad = [-1] * g.first_op  # host pieces have no launch: a node's row is its own
    l_src, l_off, l_lag = (pad + g.launch_src.tolist(), pad + g.launch_off.tolist(),
                           pad + g.launch_lag.tolist())  # fmt: skip
    xp, xs, xo, xl = x_ptr.tolist(), x_src.tolist(), x_off.tolist(), x_lag.tolist()
    ep, es, el = e_ptr.tolist(), e_src.tolist(), e_lag.tolist()
    for ev in events:
        if ev >= 0:
            i = ev
            best = end[i - 1] if chained[i] else _MIN
            p = l_src[i]
            if p >= 0:
                r = ratio[p]
                v = start[p] + (l_off[i] if r == 1.0 else round(l_off[i] * r)) + l_lag[i]
                if v > best:
                    best = v
            for k in range(xp[i], xp[i + 1]):
                p = xs[k]
                off = xo[k]
                v = (end[p] if off < 0 else start[p] + round(off * ratio[p])) + xl[k]
                if v > best:
                    best = v
            if best != _MIN:
                start[i] = best + slack[i]
            if not waits[i]:
                end[i] = start[i] + w[i]
        else:
            i = -1 - ev
            best = start[i] + w[i]
            for k in range(ep[i], ep[i + 1]):
                v = end[es[k]] + el[k]
                if v > best:
                    best = v
            end[i] = best
    return Replayed(np.array(start, dtype=_I64), np.array(end, dtype=_I64))


def _by_dst(n: int, dst: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
    order = np.argsort(dst, kind="stable")
    ptr = np.r_[0, np.cumsum(np.bincount(dst, minlength=n))].astype(_I64)
    return (ptr, *(c[order] for c in cols))


def step_times(g: Graph, times: Replayed, scale: np.ndarray) -> np.ndarray:
    """Each analysed step's time on the replayed nodes: from the previous step's completion,
    or its own replayed start if later, to its own completion."""
    starts = _replayed_starts(g, times, scale)
    _, done = completions(g, times.end, starts)
    out: np.ndarray = done - step_begins(g, done, starts)
    return out


def _replayed_starts(g: Graph, times: Replayed, scale: np.ndarray) -> np.ndarray:
    """Where each step starts in the replay: the main thread's piece holding its start,
    moved, plus the scaled part of that piece before it."""
    main = np.flatnonzero(g.track == 0) if g.size else np.empty(0, dtype=_I64)
    if main.size == 0:
        return g.step_start.copy()
    s = g.start[main]
    k = np.clip(np.searchsorted(s, g.step_start, side="right") - 1, 0, main.size - 1)
    node = main[k]
    inside = np.maximum(g.step_start - g.start[node], 0)
    out: np.ndarray = times.start[node] + np.round(inside * scale[node]).astype(_I64)
    return out
