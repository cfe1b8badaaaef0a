"""The critical path of each analysed step: the chain of dependencies that set its length.

Place in the pipeline: report, from :func:`~dlprof_lite.report.critical.graph.build_graph`.

A step's work is done when its last node ends (its *completion*: host or GPU, whichever
ends last). Its time runs from the previous step's completion, or its own start if later,
to its own completion: with a GPU behind the host, a step takes what the GPU needs, not
what the host does. Its path walks back from the node that ends last, at each node to the
dependency that held it (the latest anchor plus lag; rules/critical.py's order on a tie),
until it reaches the step's start. Each nanosecond of the step lands in one part (a node's
own host or device work, a dependency's latency, or a wait beyond every known dependency),
so a step's path adds up to its time exactly.

A run of nodes on one thread or stream, each held by the one before it, is taken whole
(vectorized): the walk itself only steps between tracks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlprof_lite.report.critical.graph import DEVICE_SIDE, Graph
from dlprof_lite.rules.critical import EDGE, PARTS

_I64 = np.int64
HOST_PART, DEVICE_PART, LATENCY, WAIT = (PARTS.index(p) for p in PARTS)
_MIN = np.iinfo(_I64).min


@dataclass(frozen=True)
class Binding:
    """Per node, the dependency that held it: start edge position (-1: a root) and end edge
    position (-1: its own work ended it); ``run_start``: the first node of the run of nodes
    on its track each held by the one before."""

    start_edge: np.ndarray
    end_edge: np.ndarray
    run_start: np.ndarray


def binding(g: Graph) -> Binding:
    n = g.size
    start_edge = _argmax_per_dst(n, g.starts.dst, g.starts.anchor(g.start, g.end) + g.starts.lag,
                                 g.starts.kind)  # fmt: skip
    end_edge = np.full(n, -1, dtype=_I64)
    if g.ends.src.size:
        value = g.end[g.ends.src] + g.ends.lag
        best = _argmax_per_dst(n, g.ends.dst, value, g.ends.kind)
        has = best >= 0
        hold = np.zeros(n, dtype=bool)
        hold[has] = g.end[g.ends.src[best[has]]] + g.ends.lag[best[has]] >= g.end[has]
        end_edge = np.where(hold, best, -1)
    # Node k continues a run when its start is held by node k - 1's end through a thread or
    # stream edge, and node k - 1's own end is its work's (no end edge took it elsewhere).
    follows = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(start_edge >= 0)
    e = start_edge[rows]
    kind = g.starts.kind[e]
    same = ((g.starts.src[e] == rows - 1) & (g.starts.offset[e] < 0)
            & ((kind == EDGE["thread"]) | (kind == EDGE["stream"])))  # fmt: skip
    follows[rows[same]] = True
    follows[1:] &= end_edge[:-1] < 0
    idx = np.arange(n, dtype=_I64)
    run_start = np.maximum.accumulate(np.where(follows, 0, idx)) if n else idx
    return Binding(start_edge, end_edge, run_start)


def _argmax_per_dst(n: int, dst: np.ndarray, value: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Per node, the position of its edge with the largest value (lowest kind on a tie)."""
    out = np.full(n, -1, dtype=_I64)
    if dst.size == 0:
        return out
    order = np.lexsort((kind, -value, dst))
    first = np.r_[True, dst[order][1:] != dst[order][:-1]]
    out[dst[order][first]] = order[first]
    return out


@dataclass(frozen=True)
class Path:
    """The analysed steps' paths as pieces: node, from, to, part (PARTS), step position."""

    node: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    part: np.ndarray
    step: np.ndarray
    completion: np.ndarray  # per step
    begin: np.ndarray  # per step: where its time starts

    @property
    def length(self) -> np.ndarray:
        out: np.ndarray = self.completion - self.begin
        return out


def completions(g: Graph, end: np.ndarray, start: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per analysed step, the node that ends last and its end, never before the step's
    start (``start``: the steps' starts, replayed); -1 for a step without nodes."""
    steps = g.step_start.size
    last = np.full(steps, -1, dtype=_I64)
    mine = np.flatnonzero(g.step >= 0)
    if mine.size:
        order = np.lexsort((end[mine], g.step[mine]))
        ordered = mine[order]
        tail = np.r_[g.step[ordered][1:] != g.step[ordered][:-1], True]
        last[g.step[ordered[tail]]] = ordered[tail]
    own = g.step_start if start is None else start
    done = np.where(last >= 0, end[np.maximum(last, 0)], own)
    return last, np.maximum(done, own)


def step_begins(g: Graph, done: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Where each step's time starts: the previous step's completion, or its own start
    (``start``: the steps' starts, replayed) if later."""
    own = g.step_start if start is None else start
    prev = np.r_[_MIN, done[:-1]]
    out: np.ndarray = np.maximum(own, prev)
    return out


def critical_paths(g: Graph, bind: Binding | None = None) -> Path:
    bind = bind if bind is not None else binding(g)
    sink, done = completions(g, g.end)
    begin = step_begins(g, done)
    walk = _Walk(g, bind)
    for i in range(sink.size):
        if sink[i] >= 0 and done[i] > begin[i]:
            walk.step(i, int(sink[i]), int(done[i]), int(begin[i]))
    node, t0, t1, part, step = walk.pieces()
    return Path(node, t0, t1, part, step, done, begin)


class _Ints:
    """An int64 array read as Python ints."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __getitem__(self, i: int) -> int:
        return int(self.values[i])


class _Walk:
    def __init__(self, g: Graph, bind: Binding) -> None:
        self.g, self.bind = g, bind
        self.anchor = g.starts.anchor(g.start, g.end)
        # Read a value at a time (the walk steps between tracks only: thousands of reads,
        # where lists of a million nodes' values took 0.2 s to make).
        self.start, self.end = _Ints(g.start), _Ints(g.end)
        self.start_edge, self.end_edge = _Ints(bind.start_edge), _Ints(bind.end_edge)
        self.run = _Ints(bind.run_start)
        self.src, self.anchors = _Ints(g.starts.src), _Ints(self.anchor)
        self.lag = _Ints(g.starts.lag)
        self.end_src, self.end_lag = _Ints(g.ends.src), _Ints(g.ends.lag)
        self.blocks: list[tuple[int, int, int, int, int]] = []  # first, last, exit, begin, step
        self.single: list[tuple[int, int, int, int, int]] = []  # node, t0, t1, part, step

    def step(self, i: int, node: int, t: int, begin: int) -> None:
        start, end, single = self.start, self.end, self.single
        while t > begin:
            ee = self.end_edge[node]
            if ee >= 0 and t == end[node]:
                src = self.end_src[ee]
                back = max(end[src], begin)
                single.append((node, back, t, LATENCY, i))
                node, t = src, end[src]
                continue
            first = self.run[node]
            if first < node and start[first] < begin:  # the run begins before the step
                first = node - self._inside(first, node, begin)
            self.blocks.append((first, node, t, begin, i))
            s = start[first]
            if s <= begin:
                return
            se = self.start_edge[first]
            if se < 0:
                single.append((first, begin, s, WAIT, i))
                return
            held = self.anchors[se] + self.lag[se]
            if s > held:
                single.append((first, max(held, begin), s, WAIT, i))
            if held > self.anchors[se] and held > begin:
                single.append((first, max(self.anchors[se], begin), min(held, s), LATENCY, i))
            node, t = self.src[se], min(self.anchors[se], s)

    def _inside(self, first: int, last: int, begin: int) -> int:
        """How many nodes of the run ``first..last`` before ``last`` end after ``begin``."""
        ends = self.g.end[first : last + 1]
        k = int(np.searchsorted(ends[:-1], begin, side="right"))
        return last - first - k

    def pieces(self) -> tuple[np.ndarray, ...]:
        g = self.g
        parts = []
        if self.blocks:
            b = np.array(self.blocks, dtype=_I64)
            first, last, exit_, begin, step = b.T
            count = last - first + 1
            rep = np.repeat(np.arange(b.shape[0]), count)
            node = first[rep] + np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)
            is_last = node == last[rep]
            lo = np.maximum(g.start[node], begin[rep])
            hi = np.where(is_last, exit_[rep], g.end[node])
            work = np.where(g.side[node] == DEVICE_SIDE, DEVICE_PART, HOST_PART)
            parts.append((node, lo, hi, work, step[rep]))
            # Inside a run, the gap before each node but the first: a wait.
            inner = node != first[rep]
            gap_lo = np.maximum(g.end[np.maximum(node - 1, 0)], begin[rep])
            parts.append((node[inner], gap_lo[inner], g.start[node][inner],
                          np.full(int(inner.sum()), WAIT), step[rep][inner]))  # fmt: skip
        if self.single:
            s = np.array(self.single, dtype=_I64)
            parts.append(tuple(s.T))
        if not parts:
            e = np.empty(0, dtype=_I64)
            return e, e, e, e, e
        cols = [np.concatenate([np.asarray(p[k], dtype=_I64) for p in parts]) for k in range(5)]
        keep = cols[2] > cols[1]
        return tuple(c[keep] for c in cols)
