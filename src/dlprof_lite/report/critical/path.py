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

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dlprof_lite.report.critical.graph import Graph
from dlprof_lite.rules.critical import PARTS

_I64 = np.int64
HOST_PART, DEVICE_PART, LATENCY, WAIT = (PARTS.index(p) for p in PARTS)
_MIN = np.iinfo(_I64).min


@dataclass(frozen=True)
class Binding:
    """Per node, the dependency that held its start (``code``: -1 none, a root; 0 the node
    before it on its track; 1 its launch; 2 an explicit edge: ``extra_node`` (sorted) and
    ``extra_edge``), the end edge that held the end of a waiting node (``end_node``, sorted,
    and ``end_edge``; others ended on their own work), and ``run_start``: the first node of
    the run of nodes on its track each held by the one before."""

    code: np.ndarray
    extra_node: np.ndarray
    extra_edge: np.ndarray
    end_node: np.ndarray
    end_edge: np.ndarray
    run_start: np.ndarray

    def lookups(self) -> tuple[dict[int, int], dict[int, int]]:
        """The explicit start edges and the end edges by node, as dicts (the walk asks
        thousands of times; they are few)."""
        return (dict(zip(self.extra_node.tolist(), self.extra_edge.tolist(), strict=True)),
                dict(zip(self.end_node.tolist(), self.end_edge.tolist(), strict=True)))


def binding(g: Graph) -> Binding:
    """Which dependency held each node: the one whose anchor plus lag is its start less its
    slack (rules/critical.py's order on a tie: the track's own order, the launch, the rest)."""
    n = g.size
    held = g.start - np.maximum(g.slack, 0)
    code = np.full(n, 2, dtype=np.int8)
    ops = g.first_op
    launched = np.zeros(n, dtype=bool)
    launched[ops:] = g.launch_src >= 0
    code[ops:][launched[ops:] & (g.by_launch() == held[ops:])] = 1
    chain = g.chained.copy()
    chain[1:] &= g.end[:-1] == held[1:]
    code[chain] = 0
    extra_node = np.empty(0, dtype=_I64)
    extra_edge = np.empty(0, dtype=_I64)
    if g.extra.size:
        value = g.extra.held(g.start, g.end)
        top = _argmax_per_dst(g.extra.dst, value, g.extra.kind)
        extra_node, extra_edge = top
        hit = value[extra_edge] == held[extra_node]
        extra_node, extra_edge = extra_node[hit], extra_edge[hit]
    # code 2 without an explicit edge that held it (clock skew): the likeliest of the rest
    other = code == 2
    other[extra_node] = False
    code[other & launched] = 1
    code[other & g.chained] = 0
    code[other & ~launched & ~g.chained] = -1
    code[g.slack < 0] = -1
    del held, chain, other
    end_node = np.empty(0, dtype=_I64)
    end_edge = np.empty(0, dtype=_I64)
    if g.ends.size:
        value = g.end[g.ends.src] + g.ends.lag
        end_node, end_edge = _argmax_per_dst(g.ends.dst, value, g.ends.kind)
        hit = value[end_edge] >= g.end[end_node]
        end_node, end_edge = end_node[hit], end_edge[hit]
    # Node k continues a run when the node before it on its track holds its start, and
    # that node's own end is its work's (no end edge took it elsewhere).
    follows = code == 0
    after = end_node + 1
    follows[after[after < n]] = False
    idx = np.arange(n, dtype=np.int32)
    idx[follows] = 0
    run_start = np.maximum.accumulate(idx) if n else idx
    return Binding(code, extra_node, extra_edge, end_node, end_edge, run_start)


def _argmax_per_dst(dst: np.ndarray, value: np.ndarray, kind: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per destination (sorted), the position of its edge with the largest value (the
    lowest kind on a tie)."""
    order = np.lexsort((kind, -value, dst))
    first = np.r_[True, dst[order][1:] != dst[order][:-1]]
    return dst[order][first], order[first]


@dataclass(frozen=True)
class Pieces:
    """Pieces of paths: node, from, to, part (PARTS), step position."""

    node: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    part: np.ndarray
    step: np.ndarray


CHUNK = 1 << 16  # nodes of runs expanded into pieces at once


@dataclass(frozen=True)
class Path:
    """The analysed steps' paths, as the walk found them: runs of nodes on one track
    (``blocks``: first, last, exit time, the step's begin, step) and single pieces
    (``singles``: node, from, to, part, step), expanded on demand a chunk at a time (a
    million kernels' path is a third of a million pieces)."""

    blocks: np.ndarray
    singles: np.ndarray
    completion: np.ndarray  # per step
    begin: np.ndarray  # per step: where its time starts

    @property
    def length(self) -> np.ndarray:
        out: np.ndarray = self.completion - self.begin
        return out

    def chunks(self, g: Graph) -> Iterator[Pieces]:
        """Every piece, in bounded chunks."""
        counts = self.blocks[:, 1] - self.blocks[:, 0] + 1
        cut = np.searchsorted(np.cumsum(counts), np.arange(CHUNK, counts.sum() + CHUNK, CHUNK))
        lo = 0
        for hi in np.unique(np.r_[cut + 1, counts.size]).tolist():
            if hi > lo:
                yield _expand(g, self.blocks[lo:hi])
                lo = hi
        if self.singles.size:
            yield Pieces(*(self.singles[:, k] for k in range(5)))

    def pieces(self, g: Graph, step: int | None = None) -> Pieces:
        """The pieces of every step, or of one (its position)."""
        blocks, singles = self.blocks, self.singles
        if step is not None:
            blocks, singles = blocks[blocks[:, 4] == step], singles[singles[:, 4] == step]
        parts = [_expand(g, blocks), Pieces(*(singles[:, k] for k in range(5)))]
        return Pieces(*(np.concatenate([getattr(p, f) for p in parts]).astype(_I64)
                        for f in ("node", "t0", "t1", "part", "step")))  # fmt: skip


def _expand(g: Graph, blocks: np.ndarray) -> Pieces:
    """Runs of nodes into pieces: each node's own work, and inside a run the gap before
    each node but the first (a wait)."""
    first, last, exit_, begin, step = (blocks[:, k] for k in range(5))
    count = last - first + 1
    rep = np.repeat(np.arange(first.size), count)
    node = first[rep] + np.arange(rep.size) - np.repeat(np.cumsum(count) - count, count)
    lo = np.maximum(g.start[node], begin[rep])
    hi = np.where(node == last[rep], exit_[rep], g.end[node])
    work = np.where(g.on_device(node), DEVICE_PART, HOST_PART)
    inner = node != first[rep]
    gap_lo = np.maximum(g.end[np.maximum(node - 1, 0)], begin[rep])[inner]
    out = Pieces(np.r_[node, node[inner]], np.r_[lo, gap_lo], np.r_[hi, g.start[node[inner]]],
                 np.r_[work, np.full(gap_lo.size, WAIT)], np.r_[step[rep], step[rep][inner]])
    keep = out.t1 > out.t0
    return Pieces(*(getattr(out, f)[keep] for f in ("node", "t0", "t1", "part", "step")))


def completions(g: Graph, end: np.ndarray, start: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per analysed step, the node that ends last and its end, never before the step's
    start (``start``: the steps' starts, replayed); -1 for a step without nodes."""
    steps = g.step_start.size
    shifted = g.step + np.int32(1)  # a bin of its own for nodes outside every step
    top = np.full(steps + 1, _MIN, dtype=_I64)
    np.maximum.at(top, shifted, end)
    # the last node (in node order) of each step that ends there
    at = np.flatnonzero((end == top[shifted]) & (shifted > 0))
    del shifted
    last = np.full(steps, -1, dtype=_I64)
    np.maximum.at(last, g.step[at], at)
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
    return Path(walk.block_array(), walk.single_array(), done, begin)


class _Walk:
    def __init__(self, g: Graph, bind: Binding) -> None:
        self.g, self.bind = g, bind
        # Read a value at a time (the walk steps between tracks only: thousands of reads,
        # where lists of a million nodes' values took 0.2 s to make).
        self.start, self.end = g.start.item, g.end.item
        self.code, self.run = bind.code.item, bind.run_start.item
        self.first_op = g.first_op
        self.launch_src, self.launch_off = g.launch_src.item, g.launch_off.item
        self.launch_lag = g.launch_lag.item
        self.x_src, self.x_off = g.extra.src.item, g.extra.offset.item
        self.x_lag = g.extra.lag.item
        self.end_src = g.ends.src.item
        self.extra_at, self.end_at = bind.lookups()
        # Five int64 values a row, flat (a million Python tuples of them were ~240 MB):
        self.blocks = array("q")  # first, last, exit, begin, step
        self.single = array("q")  # node, t0, t1, part, step

    def step(self, i: int, node: int, t: int, begin: int) -> None:
        start, end, single = self.start, self.end, self.single
        while t > begin:
            ee = self.end_at.get(node, -1) if t == end(node) else -1
            if ee >= 0:
                src = self.end_src(ee)
                back = max(end(src), begin)
                single.extend((node, back, t, LATENCY, i))
                node, t = src, end(src)
                continue
            first = self.run(node)
            if first < node and start(first) < begin:  # the run begins before the step
                first = node - self._inside(first, node, begin)
            self.blocks.extend((first, node, t, begin, i))
            s = start(first)
            if s <= begin:
                return
            src, anchor, lag = self._held_by(first)
            if src < 0:
                single.extend((first, begin, s, WAIT, i))
                return
            held = anchor + lag
            if s > held:
                single.extend((first, max(held, begin), s, WAIT, i))
            if held > anchor and held > begin:
                single.extend((first, max(anchor, begin), min(held, s), LATENCY, i))
            node, t = src, min(anchor, s)

    def _held_by(self, node: int) -> tuple[int, int, int]:
        """The source, anchor and lag of the dependency that held the node's start (source
        -1: none)."""
        code = self.code(node)
        if code == 0:
            return node - 1, self.end(node - 1), 0
        if code == 1:
            op = node - self.first_op
            src = self.launch_src(op)
            return src, self.start(src) + self.launch_off(op), self.launch_lag(op)
        if code == 2:
            k = self.extra_at[node]
            src, off = self.x_src(k), self.x_off(k)
            return src, (self.end(src) if off < 0 else self.start(src) + off), self.x_lag(k)
        return -1, 0, 0

    def _inside(self, first: int, last: int, begin: int) -> int:
        """How many nodes of the run ``first..last`` before ``last`` end after ``begin``."""
        ends = self.g.end[first : last + 1]
        k = int(np.searchsorted(ends[:-1], begin, side="right"))
        return last - first - k

    def block_array(self) -> np.ndarray:
        return np.frombuffer(self.blocks, dtype=_I64).reshape(-1, 5).copy()

    def single_array(self) -> np.ndarray:
        out = np.frombuffer(self.single, dtype=_I64).reshape(-1, 5)
        kept: np.ndarray = out[out[:, 2] > out[:, 1]]  # a copy: the buffer can go
        return kept
