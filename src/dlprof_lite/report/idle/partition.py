"""The idle partition: each idle nanosecond of each device, and each nanosecond of the main
thread's steps, booked to one cause (rules/idle.py) with its layer and phase.

Place in the pipeline: report; :mod:`dlprof_lite.report.idle.table` turns the sums into the
iterations' columns, the ``idle`` table and the summary's figures.

Device: per ``(pid, device)`` timeline, the stretches where none of its kernels and copies
runs, inside each step's window, are exactly what ``phase_idle_ns`` counts (report/steps/
table.py: ``wall x devices - busy``, the same merge of the same ops). Each stretch ends where
the device's next op starts; the thread that launched that op explains the stretch until
its launch call returned, and the rest is ``queued``. A stretch after a timeline's last op
is explained by the thread that launched that last op; an op without a launch call in the
export leaves its stretch ``unknown``. A profile with no GPU op counts its devices (the
export's GPU list, at least one) as idle throughout: the main thread explains them.

Host: the main thread's steps, whole, with launch calls as their layer's work. While the
main thread waits for a backward that autograd runs on its own thread (a GPU run), outside
every range of its own, its time is booked by that thread's state (its ``bwd:`` layer, a
DDP bucket's all-reduce), as the thread doing the work.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask, sum_by
from dlprof_lite.report.frames import gpu_ops
from dlprof_lite.report.idle.state import Labels, Thread, Threads
from dlprof_lite.report.intervals import merge
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST
from dlprof_lite.rules.names import DOMAIN, ITERATION, PHASES

SUMS = ["kind", "iteration", "cause", "layer", "phase", "ns"]
KINDS = (DEVICE, HOST)
_QUEUED, _UNKNOWN = DEVICE_CAUSES.index("queued"), DEVICE_CAUSES.index("unknown")
_BEFORE = np.iinfo(np.int64).min  # the start of time: a stretch before a device's first op


def idle_sums(
    kernels: pd.DataFrame, memops: pd.DataFrame, api: pd.DataFrame, ranges: pd.DataFrame,
    iterations: pd.DataFrame, devices: int, threads: Threads | None = None,
) -> pd.DataFrame:  # fmt: skip
    """Nanoseconds per (kind, iteration number, cause, layer, phase), kind ``device`` (summed
    over timelines; a step's causes add up to its ``phase_idle_ns``) or ``host`` (the main
    thread; they add up to its ``wall_ns``). ``threads``: the host's activity, shared with
    the critical path (build_report)."""
    if iterations.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SUMS})
    t0 = iterations["start_ns"].to_numpy(dtype=np.int64)
    t1 = iterations["end_ns"].to_numpy(dtype=np.int64)
    numbers = iterations["iteration"].to_numpy(dtype=np.int64)
    threads = threads if threads is not None else Threads(api, ranges)
    main = main_thread(kernels, memops, ranges)
    device, host = _Sums(DEVICE, threads), _Sums(HOST, threads)
    _device(device, kernels, memops, threads, main, t0, t1, devices)
    _host(host, threads, main, t0, t1)
    threads.let_go()
    return pd.concat([device.frame(numbers), host.frame(numbers)], ignore_index=True)


# -- the device ------------------------------------------------------------------------


def _device(
    sums: _Sums, kernels: pd.DataFrame, memops: pd.DataFrame, threads: Threads,
    main: Thread | None, t0: np.ndarray, t1: np.ndarray, devices: int,
) -> None:  # fmt: skip
    ops = _Ops([f for f in (kernels, memops) if len(f)])
    by_thread: dict[Thread, list[tuple[np.ndarray, ...]]] = {}
    for pid, rows in ops.timelines():
        for thread, stretch in _stretches(ops, pid, rows, t0, t1).items():
            by_thread.setdefault(thread, []).append(stretch)
    for thread, stretches in by_thread.items():
        s, e, win, cause = (np.concatenate(c) for c in zip(*stretches, strict=True))
        host = cause < 0
        sums.add(_fixed(s[~host], e[~host], cause[~host]), win[~host])  # queued, unknown
        if host.any():
            _cut_into(sums, threads, thread, s[host], e[host], win[host], launch=True)
    if not by_thread:  # no GPU op: every device idle throughout, as the main thread explains
        whole = np.arange(t0.size)
        for _ in range(devices):
            if main is None:
                sums.add(_fixed(t0, t1, np.full(t0.size, _UNKNOWN)), whole)
            else:
                _cut_into(sums, threads, main, t0, t1, whole, launch=True)


CHUNK = 1 << 18  # stretches labelled at once: what they cut into stays tens of MB


def _cut_into(
    sums: _Sums, threads: Threads, thread: Thread, s: np.ndarray, e: np.ndarray,
    win: np.ndarray, *, launch: bool,
) -> None:  # fmt: skip
    """Label the thread's stretches a chunk of consecutive ones at a time, into ``sums``."""
    threads.prepare(thread, s, e, launch=launch)
    order = np.argsort(s, kind="stable")
    for a in range(0, order.size, CHUNK):
        mine = order[a : a + CHUNK]
        labels = threads.cut(thread, s[mine], e[mine], launch=launch)
        sums.add(labels, win[mine][labels.source])


class _Ops:
    """Kernels and memops read as arrays without a stacked copy of their columns: a frame
    of the million ops' six columns was 40 MB more at the report's peak."""

    def __init__(self, frames: list[pd.DataFrame]) -> None:
        self.frames = frames
        self.sizes = np.cumsum([0, *(len(f) for f in frames)])

    def column(self, name: str, rows: np.ndarray | None) -> np.ndarray:
        """An int64 column over every frame (``rows``: these positions only)."""
        parts = [f[name].to_numpy(dtype=np.int64) for f in self.frames]
        whole = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return whole if rows is None else whole[rows]

    def by_start(
        self, rows: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | int]]:
        """Per frame, its ops (of ``rows``) in start order: starts, ends and positions (over
        every frame; an int: the frame's first, its ops in place). A frame already in start
        order (the reader's kernels) is read in place: no sorted copy, no order array."""
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray | int]] = []
        for i, frame in enumerate(self.frames):
            lo, hi = int(self.sizes[i]), int(self.sizes[i + 1])
            start = frame["start_ns"].to_numpy(dtype=np.int64)
            end = frame["end_ns"].to_numpy(dtype=np.int64)
            pos: np.ndarray | int = lo
            if rows is not None:
                pos = rows[(rows >= lo) & (rows < hi)]
                start, end = start[pos - lo], end[pos - lo]
            if start.size == 0:
                continue
            if (start[1:] < start[:-1]).any():
                order = np.argsort(start, kind="stable")
                start, end = start[order], end[order]
                pos = order + lo if isinstance(pos, int) else pos[order]
            out.append((start, end, pos))
        return out

    def gather(self, name: str, at: np.ndarray) -> np.ndarray:
        """A nullable column at positions ``at`` (over every frame), -1 where missing."""
        out = np.full(at.size, -1, dtype=np.int64)
        for i, frame in enumerate(self.frames):
            mine = (at >= self.sizes[i]) & (at < self.sizes[i + 1])
            taken = frame[name].take(at[mine] - self.sizes[i])
            out[mine] = taken.to_numpy(dtype=np.int64, na_value=-1)
        return out

    def timelines(self) -> list[tuple[int, np.ndarray | None]]:
        """Each ``(pid, device)`` timeline's pid and positions (None: every op)."""
        if not self.frames:
            return []
        key = (self.column("pid", None) << 32) | self.column("device_id", None)
        if key.min() == key.max():
            return [(int(key[0] >> 32), None)]
        return [(int(k >> 32), np.flatnonzero(key == k)) for k in np.unique(key)]


def _stretches(
    ops: _Ops, pid: int, rows: np.ndarray | None, t0: np.ndarray, t1: np.ndarray
) -> dict[Thread, tuple[np.ndarray, ...]]:
    """One timeline's idle stretches inside the windows, by the thread that explains them:
    (start, end, window position, fixed cause: -1 for the thread's to label, else queued
    or unknown). Thread ``(pid, -1)``: no launch call known."""
    parts = ops.by_start(rows)
    unions = [merge(start, end) for start, end, _ in parts]
    busy_s, busy_e = unions[0] if len(unions) == 1 else merge(
        np.concatenate([u[0] for u in unions]), np.concatenate([u[1] for u in unions]))
    del unions
    # The op that ends each gap: the first to start at its end (the first frame's when
    # several do); the last op to end for the gap after them all.
    nxt = np.full(busy_s.size + 1, -1, dtype=np.int64)
    for start, _, pos in reversed(parts):
        k = np.minimum(np.searchsorted(start, busy_s, side="left"), start.size - 1)
        hit = start[k] == busy_s
        nxt[:-1][hit] = _at(pos, k[hit])
    ends = [(int(end.max()), int(_at(pos, np.argmax(end)))) for _, end, pos in parts]
    nxt[-1] = max(ends)[1]
    del parts
    gap_s = np.r_[_BEFORE, busy_e]
    gap_e = np.r_[busy_s, np.iinfo(np.int64).max]
    del busy_s, busy_e
    s, e, win, gap = _clip(gap_s, gap_e, t0, t1)
    op = nxt[gap]
    thread, launched = ops.gather("tid", op), ops.gather("api_end_ns", op)
    last = gap == gap_s.size - 1  # after the last op: no next work to be queued
    done = np.where(last | (launched < 0), np.iinfo(np.int64).max, launched)
    cut = np.clip(done, s, e)
    # [s, cut): the host's; [cut, e): queued (the work was launched)
    pieces: dict[Thread, list[np.ndarray]] = {}
    unknown = thread < 0
    for t in np.unique(thread[~unknown]):
        m = (thread == t) & (cut > s)
        pieces[(pid, int(t))] = [s[m], cut[m], win[m], np.full(int(m.sum()), -1)]
    q = ~unknown & (e > cut)
    fixed_s = np.r_[cut[q], s[unknown]]
    fixed_e = np.r_[e[q], e[unknown]]
    fixed = np.r_[np.full(int(q.sum()), _QUEUED), np.full(int(unknown.sum()), _UNKNOWN)]
    pieces[(pid, -1)] = [fixed_s, fixed_e, np.r_[win[q], win[unknown]], fixed]
    return {k: tuple(v) for k, v in pieces.items()}


def _at(pos: np.ndarray | int, k: np.ndarray | np.integer) -> np.ndarray:
    """Positions over every frame of a frame's sorted ops ``k`` (:meth:`_Ops.by_start`)."""
    out: np.ndarray = k + pos if isinstance(pos, int) else pos[k]
    return out


def _clip(
    seg_s: np.ndarray, seg_e: np.ndarray, t0: np.ndarray, t1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sorted disjoint segments cut to each window (windows may overlap): the pieces'
    starts, ends, window positions and segment positions."""
    lo = np.searchsorted(seg_e, t0, side="right")  # first segment ending after t0
    hi = np.searchsorted(seg_s, t1, side="left")  # segments starting before t1
    count = np.maximum(hi - lo, 0)
    win = np.repeat(np.arange(t0.size), count)
    first = np.cumsum(count) - count
    seg = lo[win] + np.arange(win.size) - first[win]
    s = np.maximum(seg_s[seg], t0[win])
    e = np.minimum(seg_e[seg], t1[win])
    keep = e > s
    return s[keep], e[keep], win[keep], seg[keep]


def _fixed(s: np.ndarray, e: np.ndarray, cause: np.ndarray) -> Labels:
    none = np.full(s.size, -1, dtype=np.int64)
    return Labels(s, e, np.arange(s.size), cause.astype(np.int8), none, none)


# -- the main thread ---------------------------------------------------------------------


def _host(
    sums: _Sums, threads: Threads, main: Thread | None, t0: np.ndarray, t1: np.ndarray
) -> None:
    whole = np.arange(t0.size)
    if main is None:
        sums.add(_fixed(t0, t1, np.full(t0.size, DEVICE_CAUSES.index("other"))), whole)
        return
    worker = backward_thread(threads.ranges, main)
    threads.prepare(main, t0, t1, launch=False)
    if worker is not None:
        threads.prepare(worker, t0, t1, launch=False)
    for a in range(0, t0.size, CHUNK_STEPS):
        steps = whole[a : a + CHUNK_STEPS]
        labels = threads.cut(main, t0[steps], t1[steps], launch=False)
        win = steps[labels.source]
        other = labels.cause == DEVICE_CAUSES.index("other")
        waiting = other & (labels.phase == PHASE_COLUMNS.index("backward")) & (labels.layer < 0)
        if worker is None or not waiting.any():
            sums.add(labels, win)
            continue
        sums.add(_subset(labels, ~waiting), win[~waiting])
        # The worker's state where it has one (a layer, a collective, a sync); other where not.
        found = threads.cut(worker, labels.start[waiting], labels.end[waiting], launch=False)
        sums.add(found, win[waiting][found.source])


CHUNK_STEPS = 64  # the main thread's steps labelled at once


def _subset(labels: Labels, mask: np.ndarray) -> Labels:
    return Labels(labels.start[mask], labels.end[mask], np.flatnonzero(mask),
                  labels.cause[mask], labels.layer[mask], labels.phase[mask])  # fmt: skip


def main_thread(
    kernels: pd.DataFrame, memops: pd.DataFrame, ranges: pd.DataFrame
) -> Thread | None:
    """The thread that runs the training loop: the one that opened our iteration ranges
    (else our phase ranges) in the process with most of them; else the thread with most
    ranges; else the one that launched most GPU work; None when nothing tells."""
    ours = ranges[(ranges["domain"] == DOMAIN).to_numpy(dtype=bool)]
    for mask in (ours["name"] == ITERATION, ours["name"].isin(PHASES)):
        found = _most(ours.loc[mask.to_numpy(dtype=bool), ["pid", "tid"]])
        if found is not None:
            return found
    found = _most(ranges[["pid", "tid"]])
    if found is not None:
        return found
    ops = gpu_ops(kernels, memops, ["pid", "tid"]).dropna()
    return _most(ops)


def backward_thread(ranges: pd.DataFrame, main: Thread) -> Thread | None:
    """Another thread of the main thread's process that ran backward module ranges (the
    autograd engine's device thread): the one with most of them."""
    mine = (cat_mask(ranges["module_direction"], lambda s: s == "backward")
            & (ranges["pid"] == main[0]).to_numpy(dtype=bool)
            & (ranges["tid"] != main[1]).to_numpy(dtype=bool))  # fmt: skip
    return _most(ranges.loc[mine, ["pid", "tid"]])


def _most(frame: pd.DataFrame) -> Thread | None:
    if frame.empty:
        return None
    counts = frame.astype("int64").value_counts(sort=False)
    top = counts[counts == counts.max()].index.min()  # ties: the lowest (pid, tid)
    return int(top[0]), int(top[1])


class _Sums:
    """Nanoseconds per (iteration, cause, layer, phase) of one kind, added chunk by chunk."""

    def __init__(self, kind: str, threads: Threads) -> None:
        self.kind, self.threads = kind, threads
        self.sizes = (len(DEVICE_CAUSES), threads.layers.size + 1, len(PHASE_COLUMNS) + 1)
        self.keys: list[np.ndarray] = []
        self.totals: list[np.ndarray] = []

    def add(self, labels: Labels, win: np.ndarray) -> None:
        """The pieces' nanoseconds, summed per key at once (a chunk's pieces are let go)."""
        if labels.start.size == 0:
            return
        # One int64 key per (window, cause, layer, phase), factorized by hashing (a groupby
        # of four columns took 0.4 s for the 2 M pieces of a profile with a range per kernel).
        n_cause, n_layer, n_phase = self.sizes
        key = ((win.astype(np.int64) * n_cause + labels.cause) * n_layer + labels.layer + 1)
        key = key * n_phase + labels.phase + 1
        self._keep(key, (labels.end - labels.start).astype(np.int64))

    def _keep(self, key: np.ndarray, ns: np.ndarray) -> None:
        codes, uniq = pd.factorize(key)
        self.keys.append(np.asarray(uniq, dtype=np.int64))
        self.totals.append(sum_by(codes, ns, len(uniq)))

    def frame(self, numbers: np.ndarray) -> pd.DataFrame:
        """The sums, named: ``SUMS`` with categorical texts (a quarter of a million sums'
        texts as Python strings were 0.4 s to name)."""
        if not self.keys:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in SUMS})
        keys, totals = np.concatenate(self.keys), np.concatenate(self.totals)
        self.keys, self.totals = [], []
        self._keep(keys, totals)
        uniq, total = self.keys[0], self.totals[0]
        n_cause, n_layer, n_phase = self.sizes
        phase_of, rest = uniq % n_phase - 1, uniq // n_phase
        layer_of, rest = rest % n_layer - 1, rest // n_layer
        cause_of, win_of = rest % n_cause, rest // n_cause
        return pd.DataFrame({
            "kind": pd.Categorical.from_codes(
                np.full(uniq.size, KINDS.index(self.kind), dtype=np.int8),
                categories=pd.Index(KINDS)),
            "iteration": numbers[win_of],
            "cause": pd.Categorical.from_codes(cause_of, categories=pd.Index(DEVICE_CAUSES)),
            "layer": pd.Categorical.from_codes(layer_of, categories=self.threads.layers),
            "phase": pd.Categorical.from_codes(phase_of, categories=pd.Index(PHASE_COLUMNS)),
            "ns": total,
        })  # fmt: skip
