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
    sync_edges,
)
from dlprof_lite.report.critical.edges import Edges
from dlprof_lite.report.critical.host import Host
from dlprof_lite.report.idle.partition import main_thread
from dlprof_lite.report.idle.state import Threads
from dlprof_lite.report.model import analysed

HOST_SIDE, DEVICE_SIDE = 0, 1
_I64 = np.int64
_MIN = np.iinfo(_I64).min


@dataclass(frozen=True)
class Graph:
    """Nodes (host pieces, then GPU ops) with their observed times, labels and dependencies.

    ``work`` is what a what-if scales: the node's own duration (a waiting sync or join: the
    part after what it waited for). ``step`` is the node's analysed step (position in
    ``step_start``), -1 between steps. ``chained``: the node follows node ``k - 1`` on its
    track; ``launch_src``/``launch_off``/``launch_lag``: an op's launch edge (source -1:
    none). ``extra`` start edges and ``ends`` (end edges of waiting nodes) are explicit."""

    start: np.ndarray
    end: np.ndarray
    work: np.ndarray
    side: np.ndarray
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
    tracks: tuple[str, ...]
    layers: pd.Index
    names: pd.Index
    step_number: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray

    @property
    def size(self) -> int:
        return int(self.start.size)

    def held_by_chain(self) -> np.ndarray:
        """What each node's track order allows it (the end of the node before), or MIN."""
        before = np.empty_like(self.end)
        before[:1] = _MIN
        before[1:] = self.end[:-1]
        out: np.ndarray = np.where(self.chained, before, _MIN)
        return out

    def held_by_launch(self) -> np.ndarray:
        """What each op's launch allows it (launch call start + latency), or MIN."""
        out = np.full(self.size, _MIN, dtype=_I64)
        k = np.flatnonzero(self.launch_src >= 0)
        out[k] = self.start[self.launch_src[k]] + self.launch_off[k] + self.launch_lag[k]
        return out


def empty_graph() -> Graph:
    e = np.empty(0, dtype=_I64)
    i, b = e.astype(np.int32), e.astype(np.int8)
    none = Edges.of([])
    empty = pd.Index([], dtype=object)
    return Graph(e, e, e, b, b, b, i, i, i, i, e.astype(bool), i, e, e, none, none, e, (),
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
    n_host, n = host.size, host.size + ops.size

    start = np.concatenate([host.s, ops.s])
    end = np.concatenate([host.e, ops.e])
    work = end - start
    src, off, lag = launch_edges(host, ops)
    graph = Graph(
        start=start, end=end, work=work,
        side=np.r_[np.full(n_host, HOST_SIDE, np.int8), np.full(ops.size, DEVICE_SIDE, np.int8)],
        cause=np.r_[host.cause, np.full(ops.size, -1, np.int8)],
        phase=np.concatenate([host.phase, ops.phase]),
        track=np.concatenate([host.track, ops.track + np.int32(len(host.threads))]),
        layer=np.concatenate([_recode(host.layer, threads.layers, ops.layers), ops.layer]),
        name=np.r_[np.full(n_host, -1, np.int32), ops.name],
        step=_step_holding(np.r_[host.s, ops.launched], t0, t1),
        chained=np.r_[host.chained(), stream_chained(ops)],
        launch_src=np.r_[np.full(n_host, -1, np.int32), src],
        launch_off=np.r_[np.zeros(n_host, _I64), off],
        launch_lag=np.r_[np.zeros(n_host, _I64), lag],
        extra=host.wake_edges(), ends=Edges.of([]), slack=np.empty(0, dtype=_I64),
        tracks=(*(f"thread {t[1]}" for t in host.threads), *ops.track_names),
        layers=ops.layers, names=ops.names, step_number=numbers, step_start=t0, step_end=t1,
    )  # fmt: skip
    del src, off, lag
    held = _held(graph)
    # An op held back well beyond its launch and its stream waited for another stream.
    events = event_edges(ops, n_host, np.where(held[n_host:] > _MIN,
                                               start[n_host:] - held[n_host:], -1))
    np.maximum.at(held, events.dst, events.held(start, end))
    ends = Edges.join(host.join_edges(work), sync_edges(host, ops, n_host, api, main[0], work))
    slack = np.where(held == _MIN, -1, np.maximum(start - held, 0))
    del held
    assert slack.size == n
    return replace(graph, extra=Edges.join(graph.extra, events), ends=ends, slack=slack)


def _held(g: Graph) -> np.ndarray:
    """The latest each node's start edges allow it (MIN: none, a root)."""
    held: np.ndarray = np.maximum(g.held_by_chain(), g.held_by_launch())
    if g.extra.size:
        np.maximum.at(held, g.extra.dst, g.extra.held(g.start, g.end))
    return held


def _step_holding(t: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """The position of the step ``[t0, t1)`` holding each instant (a host piece's start, an
    op's launch), -1 for none."""
    k = np.searchsorted(t0, t, side="right") - 1
    kk = np.maximum(k, 0)
    out: np.ndarray = np.where((k >= 0) & (t < t1[kk]), kk, -1).astype(np.int32)
    return out


def _recode(codes: np.ndarray, old: pd.Index, new: pd.Index) -> np.ndarray:
    """Host layer codes (into ``old``, -1 none) into ``new``, int32."""
    if old.size == 0:
        return codes.astype(np.int32)
    to = np.append(new.get_indexer(old), -1).astype(np.int32)
    out: np.ndarray = to[codes]  # -1 reads the appended -1
    return out
