"""The host side of a step's graph: each modelled thread's time, cut into pieces.

Place in the pipeline: report, under :mod:`dlprof_lite.report.critical.graph`. The main
thread's time from the first analysed step's start to the last one's end is cut where its
state changes (the idle partition's cut: its ranges, sync calls, phases, GC) and at the steps'
bounds; the process's other threads only inside their islands of activity (their push/pop
ranges and CUDA calls: outside them a thread waits for work, which is no work of its own).
Each thread's pieces follow each other (the ``thread`` edge, implicit: node ``k`` after
``k - 1`` on one track); wake and join edges tie the other threads to the main one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlprof_lite.report.critical.edges import Edges
from dlprof_lite.report.idle.state import Labels, Thread, Threads
from dlprof_lite.report.intervals import merge
from dlprof_lite.rules.critical import EDGE, JOIN_GAP_NS
from dlprof_lite.rules.names import PUSH_POP

_I64 = np.int64


@dataclass
class Host:
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
           bounds: np.ndarray) -> Host:  # fmt: skip
        """``bounds``: the steps' starts and ends, sorted: the main thread's time from the
        first to the last, cut there too."""
        w0, w1 = int(bounds[0]), int(bounds[-1])
        found: list[tuple[Thread, Labels]] = []
        for thread in [main, *other_threads(main, api, ranges)]:
            if thread == main:
                s, e = bounds[:-1], bounds[1:]
            else:
                s, e = islands(thread, api, ranges, w0, w1)
                if s.size == 0:
                    continue
            # prepared for these stretches (another stage may have prepared the thread for
            # others: the idle partition, for the steps alone)
            threads.prepare(thread, s, e, launch=False)
            found.append((thread, threads.cut(thread, s, e, launch=False)))
        sizes = np.array([lab.start.size for _, lab in found], dtype=_I64)
        return Host(
            threads=[t for t, _ in found],
            s=np.concatenate([lab.start for _, lab in found]).astype(_I64),
            e=np.concatenate([lab.end for _, lab in found]).astype(_I64),
            track=np.repeat(np.arange(len(found), dtype=np.int32), sizes),
            island=np.concatenate([lab.source for _, lab in found]).astype(_I64),
            layer=np.concatenate([lab.layer for _, lab in found]).astype(np.int32),
            phase=np.concatenate([lab.phase for _, lab in found]).astype(np.int8),
            cause=np.concatenate([lab.cause for _, lab in found]).astype(np.int8),
            bounds=np.r_[0, np.cumsum(sizes)],
        )  # fmt: skip

    def rows(self, k: int) -> slice:
        return slice(int(self.bounds[k]), int(self.bounds[k + 1]))

    def chained(self) -> np.ndarray:
        """Each piece after the one before it on its thread (the islands of a thread too: a
        thread is one line of work)."""
        out = np.zeros(self.size, dtype=bool)
        out[1:] = self.track[1:] == self.track[:-1]
        return out

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
        key = (self.track[other].astype(_I64) << 32) + self.island[other]
        new = np.r_[True, key[1:] != key[:-1]]
        firsts = other[new]
        lasts = np.r_[firsts[1:] - 1, self.size - 1]
        return firsts, lasts

    def wake_edges(self) -> Edges:
        """Another thread's island starts where the main thread was when it did."""
        firsts, _ = self._island_ends()
        k = self._main_piece(self.s[firsts], at_end=False)
        ok = k >= 0
        src, dst = k[ok], firsts[ok]
        offset = self.s[dst] - self.s[src]
        return Edges.of([(src, dst, offset, np.zeros(dst.size, dtype=_I64),
                          np.full(dst.size, EDGE["wake"]))])  # fmt: skip

    def join_edges(self) -> tuple[Edges, np.ndarray]:
        """The main thread's piece that waited for an island resumes after it (the island
        ending last in the piece, if it ended near the piece's end and covered half of it);
        the piece's own work (returned beside the edges) is what the island did not cover."""
        firsts, lasts = self._island_ends()
        if lasts.size == 0:
            return Edges.of([]), np.empty(0, dtype=_I64)
        island_s, island_e = self.s[firsts], self.e[lasts]
        k = self._main_piece(island_e, at_end=True)
        ok = k >= 0
        kk = np.maximum(k, 0)
        ps, pe = self.s[kk], self.e[kk]
        cover = np.minimum(island_e, pe) - np.maximum(island_s, ps)
        ok &= (pe - island_e <= JOIN_GAP_NS) & (2 * cover >= pe - ps) & (pe > ps)
        if not ok.any():
            return Edges.of([]), np.empty(0, dtype=_I64)
        dst, src, cover = kk[ok], lasts[ok], cover[ok]
        order = np.lexsort((self.e[src], dst))  # per piece, the island ending last wins
        last = np.r_[dst[order][1:] != dst[order][:-1], True]
        pick = order[last]
        dst, src, cover = dst[pick], src[pick], cover[pick]
        lag = self.e[dst] - self.e[src]
        own = np.maximum(self.e[dst] - self.s[dst] - cover, lag)
        return Edges.of([(src, dst, np.full(dst.size, -1, _I64), lag,
                          np.full(dst.size, EDGE["join"]))]), own  # fmt: skip


def other_threads(main: Thread, api: pd.DataFrame, ranges: pd.DataFrame) -> list[Thread]:
    """The main process's other threads with push/pop ranges or CUDA calls."""
    pid = main[0]
    tids: set[int] = set()
    if len(api):  # hashed, on the column itself: a million calls' tids were 30 MB to sort
        tid = api["tid"].to_numpy()
        pids = api["pid"].to_numpy()
        mine = tid if (pids == pid).all() else tid[pids == pid]
        tids |= {int(t) for t in pd.unique(mine)}
    if len(ranges):
        mine = (ranges["pid"].to_numpy() == pid) & (ranges["style"] == PUSH_POP).to_numpy(bool)
        tids |= set(np.unique(ranges["tid"].to_numpy(dtype=_I64)[mine]))
    tids.discard(main[1])
    return [(pid, int(t)) for t in sorted(tids)]


def islands(thread: Thread, api: pd.DataFrame, ranges: pd.DataFrame, w0: int, w1: int
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


