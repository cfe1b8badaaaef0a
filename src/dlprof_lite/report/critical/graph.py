"""The dependency graph of the analysed steps, built from the export.

Place in the pipeline: report. :mod:`~dlprof_lite.report.critical.path` walks it back from
each step's last work (the critical path); :mod:`~dlprof_lite.report.critical.replay` runs
it forward with some durations scaled (what-if).

Nodes: the main thread's pieces of time and those of its process's other threads
(:mod:`.host`), then the process's GPU ops launched in the analysed span (:mod:`.device`).
Edges (rules/critical.py): a track's own order (a thread's pieces, a stream's ops: node
``k`` after node ``k - 1``, kept as one flag per node), launch -> op (one per op, kept as
three columns), and the few explicit ones (:class:`~.edges.Edges`): an op's wait for
another stream's op, the hand-over between threads as start edges; a sync call's wait for
the GPU and the main thread's wait for another thread as end edges.

Every edge carries a lag no larger than what the export shows, and each node keeps its
*slack*, the time it started after every dependency allowed it: replaying the graph
unchanged gives back the export's times exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from dlprof_lite.report.critical.device import (
    Ops,
    event_edges,
    launch_edges,
    stream_chained,
    stream_waits,
    sync_edges,
)
from dlprof_lite.report.critical.edges import Edges
from dlprof_lite.report.critical.host import Host
from dlprof_lite.report.idle.partition import main_thread
from dlprof_lite.report.idle.state import Threads
from dlprof_lite.report.model import analysed

_I64 = np.int64
_MIN = np.iinfo(_I64).min


@dataclass(frozen=True)
class Graph:
    """Nodes (host pieces, then GPU ops) with their observed times, labels and dependencies.

    :meth:`work` is what a what-if scales: the node's own duration (a waiting sync or join:
    the part after what it waited for). ``step`` is the node's analysed step (position in
    ``step_start``), -1 between steps. ``chained``: the node follows node ``k - 1`` on its
    track; ``launch_src``/``launch_off``/``launch_lag`` (one row per op, from node
    ``first_op``): an op's launch edge (source -1:
    none). ``extra`` start edges and ``ends`` (end edges of waiting nodes) are explicit."""

    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray
    phase: np.ndarray
    track: np.ndarray
    layer: np.ndarray
    name: np.ndarray
    step: np.ndarray
    chained: np.ndarray
    launch_src: np.ndarray
    launch_off: np.ndarray
    launch_lag: np.ndarray
    extra: Edges
    ends: Edges
    slack: np.ndarray  # -1: a root, its start fixed
    wait_node: np.ndarray  # nodes waiting at an end edge ...
    wait_own: np.ndarray  # ... and their own work: the part after what they waited for
    tracks: tuple[str, ...]
    layers: pd.Index
    names: pd.Index
    step_number: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    first_op: int = 0  # nodes from here on are GPU ops; the launch columns are theirs only

    @property
    def size(self) -> int:
        return int(self.start.size)

    def on_device(self, nodes: np.ndarray | None = None) -> np.ndarray:
        """Whether each node (of ``nodes``, else every one) is a GPU op: from ``first_op`` on."""
        at = np.arange(self.size) if nodes is None else nodes
        out: np.ndarray = at >= self.first_op
        return out

    def by_launch(self) -> np.ndarray:
        """What each op's launch allows it (launch call start + latency; garbage where it
        has none: ``launch_src`` -1)."""
        out: np.ndarray = self.start[np.maximum(self.launch_src, 0)]
        out += self.launch_off
        out += self.launch_lag
        return out

    def work(self) -> np.ndarray:
        """Each node's own duration: end - start, less for a node waiting at an end edge."""
        out: np.ndarray = self.end - self.start
        if self.wait_node.size:
            np.minimum.at(out, self.wait_node, self.wait_own)
        return out


def empty_graph() -> Graph:
    e = np.empty(0, dtype=_I64)
    i, b = e.astype(np.int32), e.astype(np.int8)
    none = Edges.of([])
    empty = pd.Index([], dtype=object)
    return Graph(e, e, b, b, i, i, i, i, e.astype(bool), i, e, e, none, none, e, e, e, (),
                 empty, empty, e, e, e)  # fmt: skip


def build_graph(
    kernels: pd.DataFrame, memops: pd.DataFrame, api: pd.DataFrame, ranges: pd.DataFrame,
    iterations: pd.DataFrame, *, span: tuple[int, int] | None = None,
    threads: Threads | None = None,
) -> Graph:  # fmt: skip
    """The graph of the analysed steps of the main thread's process; without steps, of the
    whole ``span`` as one (number -1). Empty without a main thread."""
    steps = analysed(iterations).sort_values("start_ns")
    main = main_thread(kernels, memops, ranges)
    if main is None or (steps.empty and (span is None or span[1] <= span[0])):
        return empty_graph()
    if steps.empty:
        assert span is not None
        t0, t1 = np.array([span[0]], dtype=_I64), np.array([span[1]], dtype=_I64)
        numbers = np.array([-1], dtype=_I64)
    else:
        t0 = steps["start_ns"].to_numpy(dtype=_I64)
        t1 = steps["end_ns"].to_numpy(dtype=_I64)
        numbers = steps["iteration"].to_numpy(dtype=_I64)
    threads = threads if threads is not None else Threads(api, ranges)
    host = Host.of(threads, main, api, ranges, np.unique(np.r_[t0, t1]))
    ops = Ops.of(kernels, memops, main[0], int(t0.min()), int(t1.max()), threads.layers)
    ops.waited = stream_waits(ops, api, main[0])  # before the launch columns are let go
    n_host = host.size
    graph = Graph(
        start=_stack(host.s, ops, "s"), end=_stack(host.e, ops, "e"),
        # first: their temporaries meet fewer of the other columns, and after them the
        # ops' launch calls are let go
        **(launch := _launches(host, ops)),
        step=_step_holding(host, ops, launch["launch_src"], t0, t1),
        cause=np.r_[host.cause, np.full(ops.size, -1, np.int8)],
        phase=_stack(host.phase, ops, "phase"),
        track=_stack(host.track, ops, "track", shift=len(host.threads)),
        layer=_stack(_recode(host.layer, threads.layers, ops.layers), ops, "layer"),
        name=_stack(np.full(n_host, -1, np.int32), ops, "name"),
        chained=np.r_[host.chained(), stream_chained(ops)],
        extra=host.wake_edges(), ends=Edges.of([]), slack=np.empty(0, dtype=_I64),
        wait_node=np.empty(0, dtype=_I64), wait_own=np.empty(0, dtype=_I64),
        tracks=(*(f"thread {t[1]}" for t in host.threads), *ops.track_names),
        layers=ops.layers, names=ops.names, step_number=numbers, step_start=t0, step_end=t1,
        first_op=n_host,
    )  # fmt: skip
    start, end = graph.start, graph.end
    slack = _held(graph)  # what the edges allow, turned into the slack in place
    root = slack == _MIN
    np.subtract(start, slack, out=slack)
    np.maximum(slack, 0, out=slack)  # below 0: clock skew, no wait
    slack[root] = -1
    del root
    # An op held back well beyond its launch and its stream waited for another stream.
    events = event_edges(ops, n_host, slack[n_host:])
    if events.size:
        np.minimum.at(slack, events.dst, start[events.dst] - events.held(start, end))
    joins, join_own = host.join_edges()
    syncs, sync_own = sync_edges(host, ops, n_host, api, main[0])
    del ops
    return replace(graph, extra=Edges.join(graph.extra, events), ends=Edges.join(joins, syncs),
                   slack=slack, wait_node=np.r_[joins.dst, syncs.dst],
                   wait_own=np.r_[join_own, sync_own])  # fmt: skip


def _stack(host_part: np.ndarray, ops: Ops, name: str, shift: int = 0) -> np.ndarray:
    """A node column: the host pieces', then the ops' plus ``shift`` (whose own copy becomes
    a view of it, less the shift: a column at a time is ever held twice)."""
    mine = getattr(ops, name)
    out = np.concatenate([host_part, mine])
    del mine
    if shift:
        out[host_part.size:] += shift
        setattr(ops, name, out[host_part.size:] - shift)
    else:
        setattr(ops, name, out[host_part.size:])
    return out


def _launches(host: Host, ops: Ops) -> dict[str, np.ndarray]:
    """The ops' launch columns (the lag as int32: a launch latency is microseconds)."""
    src = np.full(ops.size, -1, dtype=np.int32)
    off, lag = np.zeros(ops.size, dtype=_I64), np.zeros(ops.size, dtype=np.int32)
    launch_edges(host, ops, src, off, lag)
    return {"launch_src": src, "launch_off": off, "launch_lag": lag}


def _held(g: Graph) -> np.ndarray:
    """The latest each node's start edges allow it (MIN: none, a root), built in place."""
    held = np.full(g.size, _MIN, dtype=_I64)
    np.copyto(held[1:], g.end[:-1], where=g.chained[1:])
    ops = g.first_op
    by_launch = g.by_launch()
    np.maximum(held[ops:], by_launch, out=held[ops:], where=g.launch_src >= 0)
    del by_launch
    if g.extra.size:
        np.maximum.at(held, g.extra.dst, g.extra.held(g.start, g.end))
    return held


def _step_holding(host: Host, ops: Ops, launch_src: np.ndarray, t0: np.ndarray,
                  t1: np.ndarray) -> np.ndarray:  # fmt: skip
    """The position of the step ``[t0, t1)`` holding each node's instant (a host piece's
    start, an op's launch: its launch piece's step, pieces being cut at the steps' bounds),
    -1 for none. The ops' launch columns are let go after it."""
    out = np.empty(host.size + ops.size, dtype=np.int32)
    k = np.searchsorted(t0, host.s, side="right") - 1
    inside = k >= 0
    inside &= host.s < t1[np.maximum(k, 0)]
    k[~inside] = -1
    out[: host.size] = k
    mine = out[host.size :]
    np.take(out[: host.size], np.maximum(launch_src, 0), out=mine) if host.size else None
    alone = np.flatnonzero(launch_src < 0)  # no launch piece: by the op's own launch or start
    if alone.size:
        at = ops.launched(alone)
        k = np.searchsorted(t0, at, side="right") - 1
        ok = (k >= 0) & (at < t1[np.maximum(k, 0)])
        mine[alone] = np.where(ok, k, -1)
    ops.api_s = ops.tid = np.empty(0, dtype=_I64)
    return out


def _recode(codes: np.ndarray, old: pd.Index, new: pd.Index) -> np.ndarray:
    """Host layer codes (into ``old``, -1 none) into ``new``, int32."""
    if old.size == 0:
        return codes.astype(np.int32)
    to = np.append(new.get_indexer(old), -1).astype(np.int32)
    out: np.ndarray = to[codes]  # -1 reads the appended -1
    return out
