"""The dependency graph of the analysed steps, built from the export.

Place in the pipeline: report. :mod:`~dlprof_lite.report.critical.path` walks it back from
each step's last work (the critical path); :mod:`~dlprof_lite.report.critical.replay` runs
it forward with some durations scaled (what-if).

Nodes: the main thread's time from the first analysed step's start to the last one's end,
cut where its state changes (the idle partition's cut: its ranges, sync calls, phases, GC),
each piece labelled with its layer and phase; the same for the other threads of its
process, inside their islands of activity (their ranges and CUDA calls); and every GPU op
of the process launched in that span. Edges (rules/critical.py): thread order, stream order,
launch -> op (the correlation id), a sync call's return after the op it waited for, an op's
wait for another stream's op, and the hand-over between the main thread and another thread.

Every edge carries a lag no larger than what the export shows, and each node keeps its
*slack*, the time it started after every dependency allowed it: replaying the graph
unchanged gives back the export's times exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.idle.partition import main_thread
from dlprof_lite.report.idle.state import Labels, Thread, Threads
from dlprof_lite.report.intervals import merge
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.model import analysed
from dlprof_lite.rules.apis import HOST_WAIT_API_PATTERN
from dlprof_lite.rules.critical import (
    EDGE,
    EVENT_GAP_NS,
    EVENT_SLACK_NS,
    JOIN_GAP_NS,
    LAUNCH_LATENCY_PERCENTILE,
)
from dlprof_lite.rules.names import PUSH_POP

HOST_SIDE, DEVICE_SIDE = 0, 1
_I64 = np.int64


@dataclass(frozen=True)
class Edges:
    """Dependencies, each ``src -> dst``: the anchor is the source's end (``offset`` -1) or
    its start plus ``offset`` (scaled with the source); ``lag`` is added to it."""

    src: np.ndarray
    dst: np.ndarray
    offset: np.ndarray
    lag: np.ndarray
    kind: np.ndarray

    @staticmethod
    def of(parts: list[tuple[np.ndarray, ...]]) -> Edges:
        if not parts:
            e = np.empty(0, dtype=_I64)
            return Edges(e, e, e, e, np.empty(0, dtype=np.int8))
        cols = [np.concatenate([np.asarray(p[i], dtype=_I64) for p in parts]) for i in range(5)]
        return Edges(cols[0], cols[1], cols[2], cols[3], cols[4].astype(np.int8))

    def anchor(self, start: np.ndarray, end: np.ndarray, scale: np.ndarray | None = None
               ) -> np.ndarray:  # fmt: skip
        """Each edge's anchor time on the given node times."""
        at_end = self.offset < 0
        off = self.offset if scale is None else np.round(self.offset * scale[self.src])
        out: np.ndarray = np.where(at_end, end[self.src], start[self.src] + off.astype(_I64))
        return out


@dataclass(frozen=True)
class Graph:
    """Nodes (host pieces, then GPU ops) with their observed times, labels and dependencies.

    ``work`` is what a what-if scales: the node's own duration (a waiting sync or join: the
    part after what it waited for). ``step`` is the node's analysed step (position in
    ``step_start``), -1 between steps. Start edges hold a node's start; end edges a
    waiting node's end."""

    start: np.ndarray
    end: np.ndarray
    work: np.ndarray
    side: np.ndarray
    track: np.ndarray
    layer: np.ndarray
    phase: np.ndarray
    cause: np.ndarray
    name: np.ndarray
    step: np.ndarray
    starts: Edges
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


def empty_graph() -> Graph:
    e = np.empty(0, dtype=_I64)
    none = Edges.of([])
    return Graph(e, e, e, e.astype(np.int8), e, e, e, e.astype(np.int8), e, e, none, none, e,
                 (), pd.Index([], dtype=object), pd.Index([], dtype=object), e, e, e)  # fmt: skip


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
    w0, w1 = int(t0.min()), int(t1.max())
    threads = threads if threads is not None else Threads(api, ranges)
    host = _Host.of(threads, main, api, ranges, np.unique(np.r_[t0, t1]))
    ops = _Ops.of(kernels, memops, main[0], w0, w1, threads.layers)
    layers = ops.layers
    n_host = host.size
    track_names = [f"thread {t[1]}" for t in host.threads] + list(ops.track_names)

    start = np.concatenate([host.s, ops.s])
    end = np.concatenate([host.e, ops.e])
    work = end - start
    parts: list[tuple[np.ndarray, ...]] = [*host.thread_edges(), *host.wake_edges()]
    parts += ops.stream_edges(n_host)
    parts += _launch_edges(host, ops, n_host)
    first = Edges.of(parts)
    parts += _event_edges(ops, n_host, start, end, first)
    end_parts = [*host.join_edges(work), *_sync_edges(host, ops, n_host, api, main[0], work)]
    starts, ends = Edges.of(parts), Edges.of(end_parts)
    slack = _slack(starts, start, end)
    step = _step_holding(np.r_[host.s, ops.launched], t0, t1)
    return Graph(
        start=start, end=end, work=work,
        side=np.r_[np.full(n_host, HOST_SIDE, np.int8), np.full(ops.size, DEVICE_SIDE, np.int8)],
        track=np.concatenate([host.track, ops.track + len(host.threads)]),
        layer=np.concatenate([_recode(host.layer, threads.layers, layers), ops.layer]),
        phase=np.concatenate([host.phase, ops.phase]),
        cause=np.r_[host.cause, np.full(ops.size, -1, np.int8)],
        name=np.r_[np.full(n_host, -1, _I64), ops.name],
        step=step, starts=starts, ends=ends, slack=slack, tracks=tuple(track_names),
        layers=layers, names=ops.names, step_number=numbers, step_start=t0, step_end=t1,
    )  # fmt: skip


def _step_holding(t: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """The position of the step ``[t0, t1)`` holding each instant (a host piece's start, an
    op's launch), -1 for none."""
    k = np.searchsorted(t0, t, side="right") - 1
    kk = np.maximum(k, 0)
    out: np.ndarray = np.where((k >= 0) & (t < t1[kk]), kk, -1)
    return out


def _recode(codes: np.ndarray, old: pd.Index, new: pd.Index) -> np.ndarray:
    if old.size == 0:
        return codes
    to = np.append(new.get_indexer(old).astype(_I64), -1)
    out: np.ndarray = to[codes]  # -1 reads the appended -1
    return out


def _slack(starts: Edges, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each node's start minus the latest its start edges allow; -1 for a root."""
    allowed = np.full(start.size, np.iinfo(_I64).min, dtype=_I64)
    if starts.src.size:
        np.maximum.at(allowed, starts.dst, starts.anchor(start, end) + starts.lag)
    out = np.where(allowed == np.iinfo(_I64).min, -1, start - allowed)
    bad = out < -1
    out[bad] = 0  # an anchor later than the start (clock skew): no wait
    return out


# -- host ---------------------------------------------------------------------------------


@dataclass
class _Host:
    """Host pieces of the modelled threads, thread by thread, each thread's in time order."""

    threads: list[Thread]
    s: np.ndarray
    e: np.ndarray
    track: np.ndarray
    island: np.ndarray  # pieces of one island of a thread run back to back
    layer: np.ndarray
    phase: np.ndarray
    cause: np.ndarray
    bounds: np.ndarray  # each thread's first piece, and the end

    @property
    def size(self) -> int:
        return int(self.s.size)

    @staticmethod
    def of(threads: Threads, main: Thread, api: pd.DataFrame, ranges: pd.DataFrame,
           bounds: np.ndarray) -> _Host:  # fmt: skip
        """``bounds``: the steps' starts and ends, sorted: the main thread's time from the
        first to the last, cut there too."""
        w0, w1 = int(bounds[0]), int(bounds[-1])
        found: list[tuple[Thread, Labels]] = []
        for thread in [main, *_other_threads(main, api, ranges)]:
            if thread == main:
                s, e = bounds[:-1], bounds[1:]
            else:
                s, e = _islands(thread, api, ranges, w0, w1)
                if s.size == 0:
                    continue
            found.append((thread, threads.cut(thread, s, e, launch=False)))
        sizes = np.array([lab.start.size for _, lab in found], dtype=_I64)
        return _Host(
            threads=[t for t, _ in found],
            s=np.concatenate([lab.start for _, lab in found]).astype(_I64),
            e=np.concatenate([lab.end for _, lab in found]).astype(_I64),
            track=np.repeat(np.arange(len(found), dtype=_I64), sizes),
            island=np.concatenate([lab.source for _, lab in found]).astype(_I64),
            layer=np.concatenate([lab.layer for _, lab in found]).astype(_I64),
            phase=np.concatenate([lab.phase for _, lab in found]).astype(_I64),
            cause=np.concatenate([lab.cause for _, lab in found]).astype(np.int8),
            bounds=np.r_[0, np.cumsum(sizes)],
        )  # fmt: skip

    def rows(self, k: int) -> slice:
        return slice(int(self.bounds[k]), int(self.bounds[k + 1]))

    def thread_edges(self) -> list[tuple[np.ndarray, ...]]:
        """Each piece after the one before it on its thread (islands too: a thread is one
        line of work)."""
        nxt = np.flatnonzero(self.track[1:] == self.track[:-1]) + 1
        z = np.zeros(nxt.size, dtype=_I64)
        return [(nxt - 1, nxt, z - 1, z, np.full(nxt.size, EDGE["thread"]))]

    def _main_piece(self, t: np.ndarray, *, at_end: bool) -> np.ndarray:
        """The main thread's piece holding each instant (``at_end``: ``(s, e]``), -1 outside."""
        rows = self.rows(0)
        s, e = self.s[rows], self.e[rows]
        k = np.searchsorted(e if at_end else s, t, side="left" if at_end else "right")
        k = k if at_end else k - 1
        ok = (k >= 0) & (k < s.size)
        kk = np.clip(k, 0, max(s.size - 1, 0))
        ok &= (s[kk] <= t) & (t <= e[kk]) if s.size else ok
        return np.where(ok, kk, -1)

    def _island_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """The first and last piece of every island of the other threads."""
        other = np.arange(int(self.bounds[1]), self.size)
        if other.size == 0:
            return other, other
        key = self.track[other] * (1 << 32) + self.island[other]
        new = np.r_[True, key[1:] != key[:-1]]
        firsts = other[new]
        lasts = np.r_[firsts[1:] - 1, self.size - 1]
        return firsts, lasts

    def wake_edges(self) -> list[tuple[np.ndarray, ...]]:
        """Another thread's island starts where the main thread was when it did."""
        firsts, _ = self._island_ends()
        k = self._main_piece(self.s[firsts], at_end=False)
        ok = k >= 0
        src, dst = k[ok], firsts[ok]
        offset = self.s[dst] - self.s[src]
        z = np.zeros(dst.size, dtype=_I64)
        return [(src, dst, offset, z, np.full(dst.size, EDGE["wake"]))]

    def join_edges(self, work: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """The main thread's piece that waited for an island resumes after it (the island
        ending last in the piece, if it ended near the piece's end and covered half of it);
        the piece's own work is what the island did not cover."""
        firsts, lasts = self._island_ends()
        if lasts.size == 0:
            return []
        island_s, island_e = self.s[firsts], self.e[lasts]
        k = self._main_piece(island_e, at_end=True)
        ok = k >= 0
        kk = np.maximum(k, 0)
        ps, pe = self.s[kk], self.e[kk]
        cover = np.minimum(island_e, pe) - np.maximum(island_s, ps)
        ok &= (pe - island_e <= JOIN_GAP_NS) & (2 * cover >= pe - ps) & (pe > ps)
        if not ok.any():
            return []
        dst, src, cover = kk[ok], lasts[ok], cover[ok]
        order = np.lexsort((self.e[src], dst))  # per piece, the island ending last wins
        last = np.r_[dst[order][1:] != dst[order][:-1], True]
        pick = order[last]
        dst, src, cover = dst[pick], src[pick], cover[pick]
        lag = self.e[dst] - self.e[src]
        work[dst] = np.maximum(self.e[dst] - self.s[dst] - cover, lag)
        return [(src, dst, np.full(dst.size, -1, _I64), lag, np.full(dst.size, EDGE["join"]))]


def _other_threads(main: Thread, api: pd.DataFrame, ranges: pd.DataFrame) -> list[Thread]:
    """The main process's other threads with push/pop ranges or CUDA calls."""
    pid = main[0]
    tids: set[int] = set()
    if len(api):
        tids |= set(np.unique(api["tid"].to_numpy(dtype=_I64)[api["pid"].to_numpy() == pid]))
    if len(ranges):
        mine = (ranges["pid"].to_numpy() == pid) & (ranges["style"] == PUSH_POP).to_numpy(bool)
        tids |= set(np.unique(ranges["tid"].to_numpy(dtype=_I64)[mine]))
    tids.discard(main[1])
    return [(pid, int(t)) for t in sorted(tids)]


def _islands(thread: Thread, api: pd.DataFrame, ranges: pd.DataFrame, w0: int, w1: int
             ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A non-main thread's busy stretches inside ``[w0, w1)``: its push/pop ranges and CUDA
    calls, merged (outside them it waits for work, which is no work of its own)."""
    pid, tid = thread
    parts_s, parts_e = [], []
    if len(api):
        m = (api["pid"].to_numpy() == pid) & (api["tid"].to_numpy() == tid)
        parts_s.append(api["start_ns"].to_numpy(dtype=_I64)[m])
        parts_e.append(api["end_ns"].to_numpy(dtype=_I64)[m])
    if len(ranges):
        m = ((ranges["pid"].to_numpy() == pid) & (ranges["tid"].to_numpy() == tid)
             & (ranges["style"] == PUSH_POP).to_numpy(bool))  # fmt: skip
        parts_s.append(ranges["start_ns"].to_numpy(dtype=_I64)[m])
        parts_e.append(ranges["end_ns"].to_numpy(dtype=_I64)[m])
    s, e = merge(np.concatenate(parts_s), np.concatenate(parts_e))
    s, e = np.maximum(s, w0), np.minimum(e, w1)
    keep = e > s
    return s[keep], e[keep]


# -- device -------------------------------------------------------------------------------


@dataclass
class _Ops:
    """The process's GPU ops launched in the span, grouped by stream (track), each stream's
    in start order."""

    s: np.ndarray
    e: np.ndarray
    track: np.ndarray
    device: np.ndarray
    tid: np.ndarray
    api_s: np.ndarray
    layer: np.ndarray
    phase: np.ndarray
    name: np.ndarray
    launched: np.ndarray  # the launch call's start, else the op's
    track_names: list[str]
    layers: pd.Index
    names: pd.Index

    @property
    def size(self) -> int:
        return int(self.s.size)

    @staticmethod
    def of(kernels: pd.DataFrame, memops: pd.DataFrame, pid: int, w0: int, w1: int,
           host_layers: pd.Index) -> _Ops:  # fmt: skip
        frames = [f for f in (kernels, memops) if len(f)]
        names = pd.Index(kernels["name"].cat.categories.astype(str)) if len(kernels) else \
            pd.Index([], dtype=object)
        layer_names = [host_layers] + [pd.Index(f["layer"].astype("category").cat.categories
                                                .astype(str)) for f in frames]  # fmt: skip
        layers = layer_names[0].append(layer_names[1:]).unique() if frames else host_layers
        cols: dict[str, list[np.ndarray]] = {}
        for f in frames:
            api_s = f["api_start_ns"].to_numpy(dtype=_I64, na_value=-1)
            start = f["start_ns"].to_numpy(dtype=_I64)
            launched = np.where(api_s >= 0, api_s, start)
            m = (f["pid"].to_numpy() == pid) & (launched >= w0) & (launched < w1)
            rows = np.flatnonzero(m)
            layer = f["layer"].astype("category")
            to = np.append(layers.get_indexer(layer.cat.categories.astype(str)), -1)
            phase = f["phase"].astype("category")
            known = np.array([_PHASE.get(str(p), _PHASE["other"]) for p in phase.cat.categories]
                             + [_PHASE["other"]], dtype=_I64)  # fmt: skip
            is_kernel = f is kernels
            for key, value in (
                ("s", start[rows]), ("e", f["end_ns"].to_numpy(dtype=_I64)[rows]),
                ("device", f["device_id"].to_numpy(dtype=_I64)[rows]),
                ("context", f["context_id"].to_numpy(dtype=_I64)[rows]),
                ("stream", f["stream_id"].to_numpy(dtype=_I64)[rows]),
                ("tid", f["tid"].to_numpy(dtype=_I64, na_value=-1)[rows]),
                ("api_s", api_s[rows]),
                ("layer", to[layer.cat.codes.to_numpy()[rows]]),
                ("phase", known[phase.cat.codes.to_numpy()[rows]]),
                ("name", f["name"].cat.codes.to_numpy().astype(_I64)[rows] if is_kernel
                 else np.full(rows.size, -1, _I64)),
                ("launched", launched[rows]),
            ):  # fmt: skip
                cols.setdefault(key, []).append(value)
        if not cols:
            e = np.empty(0, dtype=_I64)
            return _Ops(e, e, e, e, e, e, e, e, e, e, [], layers, names)
        c = {k: np.concatenate(v) for k, v in cols.items()}
        key = (c["device"] << 40) | (c["context"] << 24) | c["stream"]
        uniq, track = np.unique(key, return_inverse=True)
        order = np.lexsort((c["e"], c["s"], track))
        track_names = [f"GPU {k >> 40} stream {k & ((1 << 24) - 1)}" for k in uniq.tolist()]
        return _Ops(
            s=c["s"][order], e=c["e"][order], track=track[order].astype(_I64),
            device=c["device"][order], tid=c["tid"][order], api_s=c["api_s"][order],
            layer=c["layer"][order], phase=c["phase"][order], name=c["name"][order],
            launched=c["launched"][order], track_names=track_names, layers=layers,
            names=names,
        )  # fmt: skip

    def stream_edges(self, base: int) -> list[tuple[np.ndarray, ...]]:
        """Each op after the one before it on its stream (when it started after that one
        ended: concurrent ops of one stream are none of each other's dependency)."""
        nxt = np.flatnonzero((self.track[1:] == self.track[:-1]) & (self.e[:-1] <= self.s[1:]))
        nxt += 1
        z = np.zeros(nxt.size, dtype=_I64)
        return [(nxt - 1 + base, nxt + base, z - 1, z, np.full(nxt.size, EDGE["stream"]))]


_PHASE = {p: i for i, p in enumerate(PHASE_COLUMNS)}


def _launch_edges(host: _Host, ops: _Ops, base: int) -> list[tuple[np.ndarray, ...]]:
    """Each op after its launch call's start (inside the launching thread's piece that
    holds it) plus the launch latency: a low percentile of the process's delays of ops
    launched onto an idle stream, capped by the op's own delay."""
    if ops.size == 0:
        return []
    free = np.r_[True, (ops.track[1:] != ops.track[:-1]) | (ops.e[:-1] <= ops.api_s[1:])]
    delay = np.maximum(ops.s - ops.api_s, 0)
    known = ops.api_s >= 0
    bound = free & known
    # A low percentile: an op that waited for an event on an idle stream is no launch's.
    latency = int(np.percentile(delay[bound], LAUNCH_LATENCY_PERCENTILE)) if bound.any() else 0
    out: list[tuple[np.ndarray, ...]] = []
    for k, thread in enumerate(host.threads):
        mine = np.flatnonzero(known & (ops.tid == thread[1]))
        if mine.size == 0:
            continue
        rows = host.rows(k)
        s, e = host.s[rows], host.e[rows]
        at = np.minimum(ops.api_s[mine], ops.s[mine])
        piece = np.searchsorted(s, at, side="right") - 1
        ok = (piece >= 0) & (at < e[np.maximum(piece, 0)])
        mine, piece, at = mine[ok], piece[ok], at[ok]
        src = piece + rows.start
        lag = np.minimum(ops.s[mine] - at, latency)
        out.append((src, mine + base, at - host.s[src], lag, np.full(mine.size, EDGE["launch"])))
    return out


def _event_edges(ops: _Ops, base: int, start: np.ndarray, end: np.ndarray, known: Edges
                 ) -> list[tuple[np.ndarray, ...]]:  # fmt: skip
    """An op that started well after its known dependencies waited for the op of another
    stream of its device that ended last before it, if that was just before (rules/critical.py)."""
    if ops.size == 0:
        return []
    slack = _slack(known, start, end)[base:]
    late = np.flatnonzero(slack > EVENT_SLACK_NS)
    if late.size == 0:
        return []
    order = np.lexsort((ops.e, ops.device))
    dev, ends = ops.device[order], ops.e[order]
    pos = _last_before(dev, ends, ops.device[late], ops.s[late])
    src = np.full(late.size, -1, dtype=_I64)
    for back in range(3):  # the latest op ending before, else one of the two before it
        p = np.maximum(pos - back, 0)
        cand = order[p]
        ok = (src < 0) & (pos - back >= 0) & (dev[p] == ops.device[late])
        ok &= (ops.track[cand] != ops.track[late]) & (ops.s[late] - ops.e[cand] <= EVENT_GAP_NS)
        src[ok] = cand[ok]
    keep = src >= 0
    src, dst = src[keep], late[keep]
    lag = ops.s[dst] - ops.e[src]
    return [(src + base, dst + base, np.full(dst.size, -1, _I64), lag,
             np.full(dst.size, EDGE["event"]))]  # fmt: skip


def _last_before(dev: np.ndarray, ends: np.ndarray, key: np.ndarray, t: np.ndarray
                 ) -> np.ndarray:  # fmt: skip
    """Position (in ``(dev, ends)`` order) of the last op of device ``key`` ending at or
    before ``t``; may land on another device (checked by the caller)."""
    lo = np.searchsorted(dev, key, side="left")
    hi = np.searchsorted(dev, key, side="right")
    out = np.full(t.size, -1, dtype=_I64)
    for d in np.unique(key):
        m = key == d
        a, b = int(lo[m][0]), int(hi[m][0])
        out[m] = a + np.searchsorted(ends[a:b], t[m], side="right") - 1
        out[m] = np.where(out[m] >= a, out[m], -1)
    return out


def _sync_edges(host: _Host, ops: _Ops, base: int, api: pd.DataFrame, pid: int,
                work: np.ndarray) -> list[tuple[np.ndarray, ...]]:  # fmt: skip
    """A synchronising call ends after the GPU op that ended last before it returned: the
    call's last piece waits for it (its own work: the return after it); a call the GPU had
    already caught up with returns its own duration after that op, if it ends later."""
    if ops.size == 0 or api.empty:
        return []
    names = api["name"].astype("category")
    is_sync = cat_mask(names, lambda s: s.str.contains(HOST_WAIT_API_PATTERN))
    is_sync &= api["pid"].to_numpy() == pid
    by_end = np.argsort(ops.e, kind="stable")
    ends = ops.e[by_end]
    out: list[tuple[np.ndarray, ...]] = []
    for k, thread in enumerate(host.threads):
        m = is_sync & (api["tid"].to_numpy() == thread[1])
        if not m.any():
            continue
        cs = api["start_ns"].to_numpy(dtype=_I64)[m]
        ce = api["end_ns"].to_numpy(dtype=_I64)[m]
        rows = host.rows(k)
        piece = np.searchsorted(host.e[rows], ce, side="left")
        ok = piece < rows.stop - rows.start
        piece = np.minimum(piece, max(rows.stop - rows.start - 1, 0))
        dst = piece + rows.start
        ok &= (host.e[dst] == ce) & (host.e[dst] > host.s[dst])
        pos = np.searchsorted(ends, ce, side="right") - 1
        ok &= pos >= 0
        src = by_end[np.maximum(pos, 0)]
        ok &= ops.s[src] < ce
        dst, src, cs, ce = dst[ok], src[ok], cs[ok], ce[ok]
        waited = ops.e[src] >= cs
        lag = np.where(waited, ce - ops.e[src], ce - cs)
        work[dst] = np.where(waited, np.minimum(work[dst], lag), work[dst])
        out.append((src + base, dst, np.full(dst.size, -1, _I64), lag,
                    np.full(dst.size, EDGE["sync"])))  # fmt: skip
    return out

