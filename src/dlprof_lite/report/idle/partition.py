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

from dlprof_lite.numeric import sum_by
from dlprof_lite.report.frames import gpu_ops
from dlprof_lite.report.idle.state import PHASE_VALUES, Labels, Thread, Threads
from dlprof_lite.report.intervals import merge, timelines
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST
from dlprof_lite.rules.names import DOMAIN, ITERATION, PHASES

SUMS = ["kind", "iteration", "cause", "layer", "phase", "ns"]
_OPS = ["start_ns", "end_ns", "pid", "device_id", "tid", "api_end_ns"]
_QUEUED, _UNKNOWN = DEVICE_CAUSES.index("queued"), DEVICE_CAUSES.index("unknown")
_BEFORE = np.iinfo(np.int64).min  # the start of time: a stretch before a device's first op


def idle_sums(
    kernels: pd.DataFrame, memops: pd.DataFrame, api: pd.DataFrame, ranges: pd.DataFrame,
    iterations: pd.DataFrame, devices: int,
) -> pd.DataFrame:  # fmt: skip
    """Nanoseconds per (kind, iteration number, cause, layer, phase), kind ``device`` (summed
    over timelines; a step's causes add up to its ``phase_idle_ns``) or ``host`` (the main
    thread; they add up to its ``wall_ns``)."""
    if iterations.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SUMS})
    t0 = iterations["start_ns"].to_numpy(dtype=np.int64)
    t1 = iterations["end_ns"].to_numpy(dtype=np.int64)
    numbers = iterations["iteration"].to_numpy(dtype=np.int64)
    threads = Threads(api, ranges)
    main = main_thread(kernels, memops, ranges)
    parts = [_device(kernels, memops, threads, main, t0, t1, devices),
             _host(threads, main, t0, t1)]  # fmt: skip
    frames = [_named(kind, labels, threads, numbers) for kind, labels in parts]
    return pd.concat(frames, ignore_index=True)


# -- the device ------------------------------------------------------------------------


def _device(
    kernels: pd.DataFrame, memops: pd.DataFrame, threads: Threads, main: Thread | None,
    t0: np.ndarray, t1: np.ndarray, devices: int,
) -> tuple[str, list[tuple[Labels, np.ndarray]]]:  # fmt: skip
    ops = gpu_ops(kernels, memops, _OPS)
    codes, keys = timelines(ops)
    out: list[tuple[Labels, np.ndarray]] = []
    by_thread: dict[Thread, list[tuple[np.ndarray, ...]]] = {}
    for g in range(len(keys)):
        mine = ops.loc[codes == g] if len(keys) > 1 else ops
        for thread, stretch in _stretches(mine, t0, t1).items():
            by_thread.setdefault(thread, []).append(stretch)
    for thread, stretches in by_thread.items():
        s, e, win, cause = (np.concatenate(c) for c in zip(*stretches, strict=True))
        if thread[1] < 0:  # fixed causes only: queued, unknown
            out.append((_fixed(s, e, cause), win))
            continue
        host = cause < 0
        labels = threads.cut(thread, s[host], e[host], launch=True)
        out.append((labels, win[host][labels.source]))
        out.append((_fixed(s[~host], e[~host], cause[~host]), win[~host]))
    if not keys:  # no GPU op: every device idle throughout, as the main thread explains
        for _ in range(devices):
            whole = np.arange(t0.size)
            if main is None:
                out.append((_fixed(t0, t1, np.full(t0.size, _UNKNOWN)), whole))
            else:
                labels = threads.cut(main, t0, t1, launch=True)
                out.append((labels, whole[labels.source]))
    return DEVICE, out


def _stretches(
    ops: pd.DataFrame, t0: np.ndarray, t1: np.ndarray
) -> dict[Thread, tuple[np.ndarray, ...]]:
    """One timeline's idle stretches inside the windows, by the thread that explains them:
    (start, end, window position, fixed cause: -1 for the thread's to label, else queued
    or unknown). Thread ``(pid, -1)``: no launch call known."""
    start = ops["start_ns"].to_numpy(dtype=np.int64)
    end = ops["end_ns"].to_numpy(dtype=np.int64)
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    tid = ops["tid"].to_numpy(dtype=np.int64, na_value=-1)[order]
    launched = ops["api_end_ns"].to_numpy(dtype=np.int64, na_value=-1)[order]
    pid = int(ops["pid"].iloc[0])
    busy_s, busy_e = merge(start, end)
    gap_s = np.r_[_BEFORE, busy_e]
    gap_e = np.r_[busy_s, np.iinfo(np.int64).max]
    # The op that ends each gap: the first to start at its end; the last op for the last.
    nxt = np.r_[np.searchsorted(start, busy_s, side="left"), -1]
    nxt[-1] = int(np.argmax(end)) if end.size else -1
    s, e, win, gap = _clip(gap_s, gap_e, t0, t1)
    op = nxt[gap]
    thread = tid[op] if op.size else np.zeros(0, dtype=np.int64)
    last = gap == gap_s.size - 1  # after the last op: no next work to be queued
    done = np.where(last | (launched[op] < 0), np.iinfo(np.int64).max, launched[op])
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
    threads: Threads, main: Thread | None, t0: np.ndarray, t1: np.ndarray
) -> tuple[str, list[tuple[Labels, np.ndarray]]]:
    whole = np.arange(t0.size)
    if main is None:
        other = np.full(t0.size, DEVICE_CAUSES.index("other"))
        return HOST, [(_fixed(t0, t1, other), whole)]
    labels = threads.cut(main, t0, t1, launch=False)
    win = whole[labels.source]
    worker = backward_thread(threads.ranges, main)
    waiting = ((labels.cause == DEVICE_CAUSES.index("other"))
               & (labels.phase == PHASE_VALUES.index("backward")) & (labels.layer < 0))  # fmt: skip
    if worker is None or not waiting.any():
        return HOST, [(labels, win)]
    keep = _subset(labels, ~waiting)
    found = threads.cut(worker, labels.start[waiting], labels.end[waiting], launch=False)
    # The worker's state where it has one (a layer, a collective, a sync); other where not.
    return HOST, [(keep, win[~waiting]), (found, win[waiting][found.source])]


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
    direction = ranges["module_direction"].astype(object)
    mine = ((direction == "backward").to_numpy(dtype=bool)
            & (ranges["pid"] == main[0]).to_numpy(dtype=bool)
            & (ranges["tid"] != main[1]).to_numpy(dtype=bool))  # fmt: skip
    return _most(ranges.loc[mine, ["pid", "tid"]])


def _most(frame: pd.DataFrame) -> Thread | None:
    if frame.empty:
        return None
    counts = frame.astype("int64").value_counts(sort=False)
    top = counts[counts == counts.max()].index.min()  # ties: the lowest (pid, tid)
    return int(top[0]), int(top[1])


def _named(
    kind: str, parts: list[tuple[Labels, np.ndarray]], threads: Threads, numbers: np.ndarray
) -> pd.DataFrame:
    """Sums of the labelled pieces per (iteration, cause, layer, phase), named."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SUMS})
    win = np.concatenate([w for _, w in parts])
    cause = np.concatenate([p.cause for p, _ in parts]).astype(np.int64)
    layer = np.concatenate([p.layer for p, _ in parts]).astype(np.int64)
    phase = np.concatenate([p.phase for p, _ in parts]).astype(np.int64)
    ns = np.concatenate([p.end - p.start for p, _ in parts]).astype(np.int64)
    # One int64 key per (window, cause, layer, phase), factorized by hashing (a groupby of
    # four columns took 0.4 s for the 2 M pieces of a profile with a range per kernel).
    sizes = (len(DEVICE_CAUSES), threads.layers.size + 1, len(PHASE_VALUES) + 1)
    key = ((win * sizes[0] + cause) * sizes[1] + layer + 1) * sizes[2] + phase + 1
    codes, uniq = pd.factorize(key)
    total = sum_by(codes, ns, uniq.size)
    uniq = np.asarray(uniq, dtype=np.int64)
    phase_of, rest = uniq % sizes[2] - 1, uniq // sizes[2]
    layer_of, rest = rest % sizes[1] - 1, rest // sizes[1]
    cause_of, win_of = rest % sizes[0], rest // sizes[0]
    layers = np.array([*threads.layers, None], dtype=object)
    phases = np.array([*PHASE_VALUES, None], dtype=object)
    return pd.DataFrame({
        "kind": kind,
        "iteration": numbers[win_of],
        "cause": np.asarray(DEVICE_CAUSES, dtype=object)[cause_of],
        "layer": layers[layer_of],
        "phase": phases[phase_of],
        "ns": total,
    })  # fmt: skip
