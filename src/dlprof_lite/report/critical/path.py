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
from dlprof_lite.rules.critical import PARTS

_I64 = np.int64
HOST_PART, DEVICE_PART, LATENCY, WAIT = (PARTS.index(p) for p in PARTS)
_MIN = np.iinfo(_I64).min


@dataclass(frozen=True)
class Binding:
    """Per node, the dependency that held its start (``code``: -1 none, a root; 0 the node
    before it on its track; 1 its launch; 2 the explicit edge ``extra``) and the end edge
    that held its end (-1: its own work ended it); ``run_start``: the first node of the run
    of nodes on its track each held by the one before."""

    code: np.ndarray
    extra: np.ndarray
    end_edge: np.ndarray
    run_start: np.ndarray


def binding(g: Graph) -> Binding:
    n = g.size
    chain, launch = g.held_by_chain(), g.held_by_launch()
    extra = _argmax_per_dst(n, g.extra.dst, g.extra.held(g.start, g.end), g.extra.kind)
    by_extra = np.full(n, _MIN, dtype=_I64)
    has = extra >= 0
    by_extra[has] = g.extra.held(g.start, g.end)[extra[has]]
    best = np.maximum(np.maximum(chain, launch), by_extra)
    # rules/critical.py's order on a tie: the track's own order, the launch, the others
    code = np.where(chain == best, 0, np.where(launch == best, 1, 2)).astype(np.int8)
    code[best == _MIN] = -1
    end_edge = np.full(n, -1, dtype=_I64)
    if g.ends.size:
        value = g.end[g.ends.src] + g.ends.lag
        top = _argmax_per_dst(n, g.ends.dst, value, g.ends.kind)
        got = top >= 0
        hold = np.zeros(n, dtype=bool)
        hold[got] = value[top[got]] >= g.end[got]
        end_edge = np.where(hold, top, -1)
    # Node k continues a run when the node before it on its track holds its start, and
    # that node's own end is its work's (no end edge took it elsewhere).
    follows = code == 0
    follows[1:] &= end_edge[:-1] < 0
    idx = np.arange(n, dtype=_I64)
    run_start = np.maximum.accumulate(np.where(follows, 0, idx)) if n else idx
    return Binding(code, extra, end_edge, run_start)


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
        # Read a value at a time (the walk steps between tracks only: thousands of reads,
        # where lists of a million nodes' values took 0.2 s to make).
        self.start, self.end = _Ints(g.start), _Ints(g.end)
        self.code, self.extra = _Ints(bind.code), _Ints(bind.extra)
        self.end_edge, self.run = _Ints(bind.end_edge), _Ints(bind.run_start)
        self.launch_src, self.launch_off = _Ints(g.launch_src), _Ints(g.launch_off)
        self.launch_lag = _Ints(g.launch_lag)
        self.x_src, self.x_off = _Ints(g.extra.src), _Ints(g.extra.offset)
        self.x_lag = _Ints(g.extra.lag)
        self.end_src = _Ints(g.ends.src)
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
            src, anchor, lag = self._held_by(first)
            if src < 0:
                single.append((first, begin, s, WAIT, i))
                return
            held = anchor + lag
            if s > held:
                single.append((first, max(held, begin), s, WAIT, i))
            if held > anchor and held > begin:
                single.append((first, max(anchor, begin), min(held, s), LATENCY, i))
            node, t = src, min(anchor, s)

    def _held_by(self, node: int) -> tuple[int, int, int]:
        """The source, anchor and lag of the dependency that held the node's start (source
        -1: none)."""
        code = self.code[node]
        if code == 0:
            return node - 1, self.end[node - 1], 0
        if code == 1:
            src = self.launch_src[node]
            return src, self.start[src] + self.launch_off[node], self.launch_lag[node]
        if code == 2:
            k = self.extra[node]
            src, off = self.x_src[k], self.x_off[k]
            return src, (self.end[src] if off < 0 else self.start[src] + off), self.x_lag[k]
        return -1, 0, 0

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
