"""The device side of a step's graph: the process's GPU ops and the edges that reach them.

Place in the pipeline: report, under :mod:`dlprof_lite.report.critical.graph`. Ops are
grouped by stream (a track), each stream's in start order; an op follows the one before it
on its stream (implicit), starts after its launch call (implicit, one per op), may wait for
another stream's op (an inferred event edge), and a sync call waits for one (an end edge).
Built column by column, each at once in its final order: a million ops' columns are 8 MB
each, and no stacked copy of them all is ever made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.critical.edges import Edges
from dlprof_lite.report.critical.host import Host
from dlprof_lite.report.metrics import PHASE_COLUMNS, phase_positions
from dlprof_lite.rules.apis import (
    HOST_WAIT_API_PATTERN,
    STREAM_SYNC_API_PATTERN,
    STREAM_WAIT_API_PATTERN,
)
from dlprof_lite.rules.critical import (
    EDGE,
    EVENT_GAP_NS,
    EVENT_SLACK_NS,
    LAUNCH_LATENCY_PERCENTILE,
)

_I64 = np.int64
OTHER_PHASE = PHASE_COLUMNS.index("other")


@dataclass
class Ops:
    s: np.ndarray
    e: np.ndarray
    track: np.ndarray  # int32
    device: np.ndarray  # int32
    tid: np.ndarray  # int32, -1 unknown
    api_s: np.ndarray  # -1 unknown
    layer: np.ndarray  # int32 into ``layers``
    phase: np.ndarray  # int8 into PHASE_COLUMNS
    name: np.ndarray  # int32 into ``names``, -1 for memops
    track_names: list[str]
    layers: pd.Index
    names: pd.Index
    streams: np.ndarray  # per track, its stream id
    # Per op, whether a stream wait for an event was recorded just before it on its stream
    # (None: the export records none, the event edges are inferred from timing alone).
    waited: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.s.size)

    def on_stream(self, stream: int) -> list[slice]:
        """The ops of each track of stream id ``stream`` (tracks are contiguous)."""
        out = []
        for k in np.flatnonzero(self.streams == stream).tolist():
            lo = int(np.searchsorted(self.track, k, side="left"))
            hi = int(np.searchsorted(self.track, k, side="right"))
            out.append(slice(lo, hi))
        return out

    def launched(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The launch call's start, else the op's own (of the ops ``rows``, else of all)."""
        api_s, s = (self.api_s, self.s) if rows is None else (self.api_s[rows], self.s[rows])
        out: np.ndarray = np.where(api_s >= 0, api_s, s)
        return out

    @staticmethod
    def of(kernels: pd.DataFrame, memops: pd.DataFrame, pid: int, w0: int, w1: int,
           host_layers: pd.Index) -> Ops:  # fmt: skip
        frames = [f for f in (kernels, memops) if len(f)]
        names = (pd.Index(kernels["name"].cat.categories.astype(str)) if len(kernels)
                 else pd.Index([], dtype=object))  # fmt: skip
        layers = host_layers.append([pd.Index(f["layer"].astype("category").cat.categories
                                               .astype(str)) for f in frames]).unique()
        cols = _Columns(frames, pid, w0, w1)
        if cols.size == 0:
            e = np.empty(0, dtype=_I64)
            i = e.astype(np.int32)
            return Ops(e, e, i, i, i, e, i, e.astype(np.int8), i, [], layers, names, e)
        uniq, track = cols.tracks()
        s, e = cols.int64("start_ns"), cols.int64("end_ns")
        order = None
        if uniq.size > 1:
            order = np.lexsort((e, s, track))
        elif (s[1:] < s[:-1]).any():  # one stream, kernels then memops: two sorted runs
            order = np.argsort(s, kind="stable")
        if order is not None:
            s, e, track = s[order], e[order], track[order]
        cols.order = order
        return Ops(
            s=s, e=e, track=track,
            device=cols.int64("device_id", dtype=np.int32),
            tid=cols.int64("tid", na=-1, dtype=np.int32),
            api_s=cols.int64("api_start_ns", na=-1),
            layer=cols.recoded("layer", layers),
            phase=cols.phases(),
            name=cols.kernel_names(),
            track_names=[f"GPU {k >> 40} stream {k & ((1 << 24) - 1)}" for k in uniq.tolist()],
            layers=layers, names=names, streams=uniq & ((1 << 24) - 1),
        )  # fmt: skip


class _Columns:
    """The selected ops' columns over both frames, each read once, in ``order``."""

    def __init__(self, frames: list[pd.DataFrame], pid: int, w0: int, w1: int) -> None:
        self.frames = frames
        self.rows: list[np.ndarray | None] = []
        for f in frames:
            api_s = f["api_start_ns"].to_numpy(dtype=_I64, na_value=-1)
            start = f["start_ns"].to_numpy(dtype=_I64)
            launched = np.where(api_s >= 0, api_s, start)
            m = (f["pid"].to_numpy() == pid) & (launched >= w0) & (launched < w1)
            self.rows.append(None if m.all() else np.flatnonzero(m))
        self.size = sum(len(f) if r is None else r.size for f, r in zip(frames, self.rows,
                                                                          strict=True))
        self.order: np.ndarray | None = None

    def tracks(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (device, context, stream) keys, sorted, and each op's position among
        them (int32); one stream (the usual single-GPU run) costs no key at all."""
        ids = ("device_id", "context_id", "stream_id")
        one = [self._constant(c) for c in ids]
        if all(v is not None for v in one):
            d, c, s = (int(v) for v in one)  # type: ignore[arg-type]
            key = np.array([(d << 40) | (c << 24) | s], dtype=_I64)
            return key, np.zeros(self.size, dtype=np.int32)
        key = self.int64("device_id") << 40
        key |= self.int64("context_id") << 24
        key |= self.int64("stream_id")
        uniq, inverse = np.unique(key, return_inverse=True)
        return uniq, inverse.astype(np.int32)

    def _constant(self, column: str) -> int | None:
        """The column's one value over the selected ops, None when it has several."""
        seen: set[int] = set()
        for k, f in enumerate(self.frames):
            values = self._picked(f[column].to_numpy(), k)
            if values.size:
                lo, hi = int(values.min()), int(values.max())
                if lo != hi:
                    return None
                seen.add(lo)
        return seen.pop() if len(seen) == 1 else None

    def _joined(self, parts: list[np.ndarray]) -> np.ndarray:
        whole = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return whole if self.order is None else whole[self.order]

    def _picked(self, values: np.ndarray, k: int) -> np.ndarray:
        rows = self.rows[k]
        return values if rows is None else values[rows]

    def int64(self, column: str, na: int | None = None, dtype: type = _I64) -> np.ndarray:
        """An integer column (``na``: what a missing value reads as), of ``dtype``."""
        parts = []
        for k, f in enumerate(self.frames):
            values = (f[column].to_numpy(dtype=dtype) if na is None
                      else f[column].to_numpy(dtype=dtype, na_value=na))  # fmt: skip
            parts.append(self._picked(values, k))
        return self._joined(parts)

    def recoded(self, column: str, to: pd.Index) -> np.ndarray:
        """A categorical column's codes into ``to`` (-1: missing), int32."""
        parts = []
        for k, f in enumerate(self.frames):
            cat = f[column].astype("category")
            table = np.append(to.get_indexer(cat.cat.categories.astype(str)), -1)
            parts.append(table.astype(np.int32)[self._picked(cat.cat.codes.to_numpy(), k)])
        return self._joined(parts)

    def phases(self) -> np.ndarray:
        parts = []
        for k, f in enumerate(self.frames):
            codes = phase_positions(f["phase"], OTHER_PHASE).astype(np.int8)
            parts.append(self._picked(codes, k))
        return self._joined(parts)

    def kernel_names(self) -> np.ndarray:
        """Kernels' name codes (their frame's categories), -1 for memops."""
        parts = []
        for k, f in enumerate(self.frames):
            if "short_name" in f.columns:  # kernels
                codes = f["name"].cat.codes.to_numpy().astype(np.int32)
                parts.append(self._picked(codes, k))
            else:
                n = len(f) if self.rows[k] is None else self.rows[k].size  # type: ignore[union-attr]
                parts.append(np.full(n, -1, dtype=np.int32))
        return self._joined(parts)


def stream_chained(ops: Ops) -> np.ndarray:
    """Each op after the one before it on its stream (when it started after that one ended:
    concurrent ops of one stream are none of each other's dependency)."""
    out = np.zeros(ops.size, dtype=bool)
    out[1:] = (ops.track[1:] == ops.track[:-1]) & (ops.e[:-1] <= ops.s[1:])
    return out


def launch_edges(host: Host, ops: Ops, src: np.ndarray, off: np.ndarray, lag: np.ndarray
                 ) -> None:  # fmt: skip
    """Per op, into ``src``, ``off`` and ``lag`` (one slot per op, filled with -1, 0, 0):
    the host piece holding its launch call's start (-1: none modelled), the offset of that
    start in the piece, and the launch latency: a low percentile of the process's delays
    (launch start -> op start) of ops launched onto an idle stream, capped by the op's own
    delay. Computed in place, a thread and a block of :data:`LAUNCH_BLOCK` ops at a time:
    each temporary is 2 MB whatever the number of ops."""
    if ops.size == 0:
        return
    known = ops.api_s >= 0
    free = np.ones(ops.size, dtype=bool)
    free[1:] = (ops.track[1:] != ops.track[:-1]) | (ops.e[:-1] <= ops.api_s[1:])
    free &= known
    delay = ops.s[free]
    delay -= ops.api_s[free]  # one gathered column at a time: 8 bytes an op each
    np.maximum(delay, 0, out=delay)
    latency = (int(np.percentile(delay, LAUNCH_LATENCY_PERCENTILE, overwrite_input=True))
               if delay.size else 0)  # fmt: skip
    latency = min(latency, np.iinfo(np.int32).max)  # int32 lags; the slack keeps the rest
    del free, delay
    for k, thread in enumerate(host.threads):
        rows = host.rows(k)
        for block in range(0, ops.size, LAUNCH_BLOCK):  # bounded temporaries
            part = slice(block, min(block + LAUNCH_BLOCK, ops.size))
            _launch_block(host.s[rows], host.e[rows], rows.start, ops, part,
                          known[part] & (ops.tid[part] == thread[1]), latency,
                          (src[part], off[part], lag[part]))  # fmt: skip


# Ops whose launch edges are computed at once: the temporaries are 8 bytes an op each.
LAUNCH_BLOCK = 1 << 18


def _launch_block(s: np.ndarray, e: np.ndarray, first: int, ops: Ops, part: slice,
                  mask: np.ndarray, latency: int,
                  out: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:  # fmt: skip
    """:func:`launch_edges` for the ops ``part`` launched by one thread (``mask``, within
    the part), whose pieces start and end at ``s`` and ``e`` (node ``first`` on); into
    ``out``, the part's views of src, off and lag."""
    if not mask.any():
        return
    src, off, lag = out
    whole = bool(mask.all())  # one launching thread: no gather, no scatter
    op_s = ops.s[part] if whole else ops.s[part][mask]
    at = np.minimum(ops.api_s[part] if whole else ops.api_s[part][mask], op_s)
    piece = np.searchsorted(s, at, side="right")
    piece -= 1
    ok = piece >= 0
    np.maximum(piece, 0, out=piece)
    ok &= at < e[piece]
    held_off = s[piece]
    np.subtract(at, held_off, out=held_off)  # the launch's offset in its piece
    piece += first
    np.subtract(op_s, at, out=at)  # at becomes the lag
    np.minimum(at, latency, out=at)
    if whole:
        np.copyto(src, piece, where=ok)
        np.copyto(off, held_off, where=ok)
        np.copyto(lag, at, where=ok)
    else:
        where = np.flatnonzero(mask)[ok]
        src[where], off[where], lag[where] = piece[ok], held_off[ok], at[ok]


def event_edges(ops: Ops, base: int, slack: np.ndarray) -> Edges:
    """An op that started well after its known dependencies (``slack``, per op) waited for
    the op of another stream of its device that ended last before it, if that was just
    before (rules/critical.py); where the export records streams' waits for events, only
    the first op after such a wait on its stream."""
    late_mask = slack > EVENT_SLACK_NS
    if ops.waited is not None:
        late_mask &= ops.waited  # the export says which ops waited for an event
    late = np.flatnonzero(late_mask)
    if late.size == 0:
        return Edges.of([])
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
    return Edges.of([(src + base, dst + base, np.full(dst.size, -1, _I64), lag,
                      np.full(dst.size, EDGE["event"]))])  # fmt: skip


def _last_before(dev: np.ndarray, ends: np.ndarray, key: np.ndarray, t: np.ndarray
                 ) -> np.ndarray:  # fmt: skip
    """Position (in ``(dev, ends)`` order) of the last op of device ``key`` ending at or
    before ``t``; may land on another device (checked by the caller)."""
    out = np.full(t.size, -1, dtype=_I64)
    for d in np.unique(key):
        m = key == d
        a = int(np.searchsorted(dev, d, side="left"))
        b = int(np.searchsorted(dev, d, side="right"))
        found = a + np.searchsorted(ends[a:b], t[m], side="right") - 1
        out[m] = np.where(found >= a, found, -1)
    return out


def sync_edges(host: Host, ops: Ops, base: int, api: pd.DataFrame, pid: int
               ) -> tuple[Edges, np.ndarray]:  # fmt: skip
    """A synchronising call ends after the GPU op that ended last before it returned (a
    cudaStreamSynchronize whose stream the export records: the last on that stream): the
    call's last piece waits for it (its own work, returned beside the edges: the return
    after it); a call the GPU had already caught up with returns its own duration after that
    op, if that ends later."""
    none = Edges.of([]), np.empty(0, dtype=_I64)
    if ops.size == 0 or api.empty:
        return none
    is_sync = cat_mask(api["name"].astype("category"),
                       lambda s: s.str.contains(HOST_WAIT_API_PATTERN))  # fmt: skip
    is_sync &= api["pid"].to_numpy() == pid
    if not is_sync.any():
        return none
    by_end: np.ndarray | None = None
    if (ops.e[1:] < ops.e[:-1]).any():
        by_end = np.argsort(ops.e, kind="stable")
    ends = ops.e if by_end is None else ops.e[by_end]
    out: list[tuple[np.ndarray, ...]] = []
    own: list[np.ndarray] = []
    calls = np.flatnonzero(is_sync)  # a few calls among a million: their columns only
    tids = api["tid"].to_numpy()[calls]
    starts = api["start_ns"].to_numpy(dtype=_I64)[calls]
    stops = api["end_ns"].to_numpy(dtype=_I64)[calls]
    one_stream = _one_stream(api, calls)
    for k, thread in enumerate(host.threads):
        m = tids == thread[1]
        if not m.any():
            continue
        cs, ce = starts[m], stops[m]
        rows = host.rows(k)
        n = rows.stop - rows.start
        piece = np.minimum(np.searchsorted(host.e[rows], ce, side="left"), max(n - 1, 0))
        dst = piece + rows.start
        ok = (host.e[dst] == ce) & (host.e[dst] > host.s[dst])
        pos = np.searchsorted(ends, ce, side="right") - 1
        ok &= pos >= 0
        src = np.maximum(pos, 0) if by_end is None else by_end[np.maximum(pos, 0)]
        stream = one_stream[m]
        if (stream >= 0).any():
            picked = _last_on_stream(ops, stream, ce)
            src = np.where(stream >= 0, np.maximum(picked, 0), src)
            ok &= (stream < 0) | (picked >= 0)
        ok &= ops.s[src] < ce
        dst, src, cs, ce = dst[ok], src[ok], cs[ok], ce[ok]
        waited = ops.e[src] >= cs
        lag = np.where(waited, ce - ops.e[src], ce - cs)
        whole = host.e[dst] - host.s[dst]
        own.append(np.where(waited, np.minimum(whole, lag), whole))
        out.append((src + base, dst, np.full(dst.size, -1, _I64), lag,
                    np.full(dst.size, EDGE["sync"])))  # fmt: skip
    return Edges.of(out), (np.concatenate(own) if own else none[1])


def _one_stream(api: pd.DataFrame, calls: np.ndarray) -> np.ndarray:
    """Per call of ``calls`` (rows of ``api``), the one stream a cudaStreamSynchronize
    waited for (-1: any, or unknown)."""
    if "sync_stream" not in api.columns:
        return np.full(calls.size, -1, dtype=np.int64)
    named = cat_mask(api["name"].astype("category"),
                     lambda s: s.str.contains(STREAM_SYNC_API_PATTERN))[calls]  # fmt: skip
    stream = api["sync_stream"].iloc[calls].to_numpy(dtype=np.int64, na_value=-1)
    out: np.ndarray = np.where(named, stream, -1)
    return out


def _last_on_stream(ops: Ops, stream: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """Per call (its stream, -1 none; its end), the op of that stream that ended last by
    then; -1 where none did."""
    out = np.full(stream.size, -1, dtype=np.int64)
    best = np.full(stream.size, np.iinfo(_I64).min, dtype=_I64)
    for s in np.unique(stream[stream >= 0]).tolist():
        calls = np.flatnonzero(stream == s)
        for rows in ops.on_stream(s):
            ends = np.maximum.accumulate(ops.e[rows])  # a stream's ends, as they come
            pos = np.searchsorted(ends, ce[calls], side="right") - 1
            has = pos >= 0
            cand = rows.start + np.maximum(pos, 0)
            better = has & (ops.e[cand] > best[calls])
            out[calls[better]] = cand[better]
            best[calls[better]] = ops.e[cand[better]]
    return out


def stream_waits(ops: Ops, api: pd.DataFrame, pid: int) -> np.ndarray | None:
    """Per op, whether it is the first op launched on its stream after a recorded
    cudaStreamWaitEvent on that stream (None without the export's synchronisation records)."""
    if "sync_stream" not in api.columns:
        return None
    out = np.zeros(ops.size, dtype=bool)
    stream = api["sync_stream"]
    mine = (stream.notna().to_numpy(bool) & (api["pid"].to_numpy() == pid)
            & cat_mask(api["name"].astype("category"),
                       lambda s: s.str.contains(STREAM_WAIT_API_PATTERN)))  # fmt: skip
    if not mine.any():
        return out
    at = api["start_ns"].to_numpy(dtype=_I64)[mine]
    on = stream.to_numpy(dtype=np.int64, na_value=-1)[mine]
    launched = ops.launched()
    for s in np.unique(on).tolist():
        waits = np.sort(at[on == s])
        for rows in ops.on_stream(s):
            first = np.searchsorted(launched[rows], waits, side="left")
            first = first[first < rows.stop - rows.start]
            out[rows.start + first] = True
    return out
