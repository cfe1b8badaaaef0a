"""What a host thread is doing at each instant, as one cause of :mod:`dlprof_lite.rules.idle`.

Place in the pipeline: report, under :mod:`dlprof_lite.report.idle.partition`. A thread's
state changes only at the boundaries of its own CUDA API calls and ranges, of its process's
start/end ranges (phases) and of garbage collections: :meth:`Threads.cut` splits stretches of
time there, so one look at each piece's first nanosecond labels the whole piece, exactly.

Labels, per piece: the cause (first that holds, in :data:`~dlprof_lite.rules.idle.DEVICE_CAUSES`
order), the layer (the innermost range's layer, ``ranges.layer``, by the op rule of
ingest/correlate.py: what a kernel launched there would get) and the phase (the innermost
range's phase, else the phase range of the process that holds the instant, else other).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask, range_positions
from dlprof_lite.report.idle.lookup import RangeLookup
from dlprof_lite.report.intervals import Segments, in_windows, merge
from dlprof_lite.report.metrics import PHASE_COLUMNS, phase_positions
from dlprof_lite.rules.apis import HOST_WAIT_API_PATTERN, LAUNCH_API_PATTERN
from dlprof_lite.rules.comm import COMM_DOMAINS, COMM_RANGE_RE
from dlprof_lite.rules.idle import DEVICE_CAUSES
from dlprof_lite.rules.names import DOMAIN, GC_RANGE_PREFIX, PHASES, PUSH_POP

_CAUSE = {c: np.int8(i) for i, c in enumerate(DEVICE_CAUSES)}
_PHASE = {p: i for i, p in enumerate(PHASE_COLUMNS)}
Thread = tuple[int, int]  # (pid, tid)


@dataclass(frozen=True)
class Labels:
    """Pieces of time and what held them: cause codes into DEVICE_CAUSES, layer codes into
    ``Threads.layers`` (-1: none), phase codes into PHASE_COLUMNS."""

    start: np.ndarray
    end: np.ndarray
    source: np.ndarray  # the position of the piece it was cut from
    cause: np.ndarray
    layer: np.ndarray
    phase: np.ndarray


@dataclass
class Threads:
    """The profile's host activity, looked up one thread at a time."""

    api: pd.DataFrame
    ranges: pd.DataFrame
    _api_kind: np.ndarray = field(init=False)  # 0 other, 1 sync, 2 launch
    _comm: np.ndarray = field(init=False)
    _gc: np.ndarray = field(init=False)
    _phase_rows: np.ndarray = field(init=False)
    _phase_names: np.ndarray = field(init=False)  # the name of each of those rows
    layers: pd.Index = field(init=False)
    _layer: np.ndarray = field(init=False)
    _phase: np.ndarray = field(init=False)
    _quiet: np.ndarray = field(init=False)  # entering or leaving it changes no label
    _states: dict[tuple[Thread, bool], _State] = field(init=False, default_factory=dict)
    _lookups: dict[Thread, RangeLookup] = field(init=False, default_factory=dict)
    _spans: dict[int, tuple[RangeLookup, np.ndarray]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        api, ranges = self.api, self.ranges
        kind = np.zeros(len(api), dtype=np.int8)
        if len(api):
            names = api["name"].astype("category")
            kind[cat_mask(names, lambda s: s.str.contains(LAUNCH_API_PATTERN))] = 2
            kind[cat_mask(names, lambda s: s.str.contains(HOST_WAIT_API_PATTERN))] = 1
        self._api_kind = kind
        name = ranges["name"].astype("category")
        domain = ranges["domain"].astype("category")
        ours = (domain == DOMAIN).to_numpy(dtype=bool)
        self._gc = ours & cat_mask(name, lambda s: s.str.startswith(GC_RANGE_PREFIX))
        self._phase_rows = np.flatnonzero(ours & name.isin(PHASES).to_numpy(dtype=bool))
        # A handful of rows: not the million range names as Python objects at each look.
        self._phase_names = name.iloc[self._phase_rows].astype(str).to_numpy()
        self._comm = _comm_rows(name, domain) if len(ranges) else np.zeros(0, dtype=bool)
        layer = ranges["layer"].astype("category")
        self.layers = pd.Index(layer.cat.categories.astype(str))
        self._layer = layer.cat.codes.to_numpy(dtype=np.int64)
        self._phase = phase_positions(ranges["phase"], -1)
        self._quiet = self._same_as_parent() & ~self._gc & ~self._comm

    def _same_as_parent(self) -> np.ndarray:
        """Push/pop ranges with their enclosing range's layer and phase (an op range inside
        its module): their edges need no cut, which keeps a profile with a range per kernel
        from cutting the main thread's steps at every one of them."""
        r = self.ranges
        if r.empty:
            return np.zeros(0, dtype=bool)
        parent = range_positions(r["range_id"].to_numpy(dtype=np.int64),
                                 r["parent_id"].to_numpy(dtype=np.int64))  # fmt: skip
        up = np.maximum(parent, 0)
        same = (self._layer == self._layer[up]) & (self._phase == self._phase[up])
        out: np.ndarray = (parent >= 0) & (r["style"] == PUSH_POP).to_numpy(dtype=bool) & same
        return out

    # -- what a thread does -------------------------------------------------------------

    def _api_of(self, thread: Thread, kind: int) -> Segments:
        api = self.api
        if api.empty:
            return _none()
        mine = ((api["pid"].to_numpy() == thread[0]) & (api["tid"].to_numpy() == thread[1])
                & (self._api_kind == kind))  # fmt: skip
        return merge(api["start_ns"].to_numpy()[mine], api["end_ns"].to_numpy()[mine])

    def _ranges_of(self, rows: np.ndarray) -> Segments:
        r = self.ranges
        return merge(r["start_ns"].to_numpy()[rows], r["end_ns"].to_numpy()[rows])

    def _thread_rows(self, thread: Thread) -> np.ndarray:
        """The thread's push/pop ranges and every start/end range of its process, but those
        whose edges change no label."""
        r = self.ranges
        same = r["pid"].to_numpy() == thread[0]
        on = (r["tid"].to_numpy() == thread[1]) | (r["style"] != PUSH_POP).to_numpy(dtype=bool)
        return np.flatnonzero(same & on & ~self._quiet)

    def prepare(self, thread: Thread, start: np.ndarray, end: np.ndarray, *, launch: bool) -> None:
        """Find what the thread does during the stretches ``[start, end)`` it explains (all
        of them, before :meth:`cut` takes them a chunk at a time): only what meets them is
        kept (a million launch calls are mostly inside busy device time). ``launch``: launch
        calls are a cause of their own (the device's partition); else they are the work of
        the layer that makes them (the host's)."""
        union = merge(start, end)
        rows = self._thread_rows(thread)
        process = self.ranges["pid"].to_numpy() == thread[0]

        def meeting(segments: Segments) -> Segments:
            return _meeting(union, segments)

        r = self.ranges
        bounds = np.concatenate([r["start_ns"].to_numpy()[rows], r["end_ns"].to_numpy()[rows]])
        state = _State(
            sync=meeting(self._api_of(thread, 1)),
            comm=meeting(self._ranges_of(rows[self._comm[rows]])),
            gc=meeting(self._ranges_of(np.flatnonzero(self._gc & process))),
            # The data and compile phases hold the whole process whatever range is
            # innermost: Dynamo compiles inside the model's own call (its module range).
            data=meeting(self._ranges_of(np.flatnonzero(self._named("data") & process))),
            compiling=meeting(self._ranges_of(np.flatnonzero(self._named("compile") & process))),
            calls=meeting(self._api_of(thread, 2)) if launch else _none(),
            bounds=_sorted(bounds[in_windows(bounds, *union)]),
            lookup=self._lookup(thread),
        )
        self._states[(thread, launch)] = state

    def let_go(self) -> None:
        """Forget the prepared states (a million launch calls' segments), keep the range
        lookups: another stage asks of other stretches, and prepares them itself."""
        self._states.clear()

    def cut(self, thread: Thread, start: np.ndarray, end: np.ndarray, *, launch: bool) -> Labels:
        """``[start, end)`` pieces of time the thread explains (some of those it was
        :meth:`prepare`-d for, else all of them), cut where its state changes, each labelled."""
        if (thread, launch) not in self._states:
            self.prepare(thread, start, end, launch=launch)
        st = self._states[(thread, launch)]
        lo = int(start.min()) if start.size else 0
        hi = int(end.max()) if end.size else 0
        near = [_between(seg, lo, hi) for seg in st.segments()]
        edges = _sorted(st.bounds[np.searchsorted(st.bounds, lo):np.searchsorted(st.bounds, hi)],
                        *(x for seg in near for x in seg))  # fmt: skip
        s, e, source = _split(start, end, edges)
        at = st.lookup.at(s)
        layer, phase = self._of_range(self._layer, at), self._of_range(self._phase, at)
        phase = np.where(phase >= 0, phase, self._span_phase(thread[0], s))
        cause = np.full(s.size, _CAUSE["other"], dtype=np.int8)
        # Lowest precedence first: each later rule overwrites what it holds.
        cause[phase == _PHASE["optimizer"]] = _CAUSE["optimizer"]
        cause[layer >= 0] = _CAUSE["layer"]
        cause[in_windows(s, *st.calls)] = _CAUSE["launch"]
        cause[in_windows(s, *st.gc)] = _CAUSE["gc"]
        cause[(phase == _PHASE["compile"]) | in_windows(s, *st.compiling)] = _CAUSE["compile"]
        cause[in_windows(s, *st.comm)] = _CAUSE["comm"]
        cause[in_windows(s, *st.sync)] = _CAUSE["sync"]
        cause[(phase == _PHASE["data"]) | in_windows(s, *st.data)] = _CAUSE["data"]
        return Labels(s, e, source, cause, layer, phase)

    def _lookup(self, thread: Thread) -> RangeLookup:
        if thread not in self._lookups:
            self._lookups[thread] = RangeLookup(self.ranges, thread[0], thread[1])
        return self._lookups[thread]

    def _named(self, phase: str) -> np.ndarray:
        """Our phase ranges of one name."""
        rows = self._phase_rows
        mask = np.zeros(len(self.ranges), dtype=bool)
        mask[rows[self._phase_names == phase]] = True
        return mask

    @staticmethod
    def _of_range(codes: np.ndarray, at: np.ndarray) -> np.ndarray:
        """``codes`` of each found range, -1 where none holds the instant."""
        if codes.size == 0:
            return np.full(at.size, -1, dtype=np.int64)
        out: np.ndarray = np.where(at >= 0, codes[np.maximum(at, 0)], -1)
        return out

    def _span_phase(self, pid: int, t: np.ndarray) -> np.ndarray:
        """The innermost phase range of the process holding each instant, else other."""
        out = np.full(t.size, _PHASE["other"], dtype=np.int64)
        if self._phase_rows.size == 0 or t.size == 0:
            return out
        if pid not in self._spans:
            phases = self.ranges.iloc[self._phase_rows]
            codes = np.array([_PHASE[str(n)] for n in phases["name"]], dtype=np.int64)
            self._spans[pid] = (RangeLookup(phases, pid, -1), codes)
        lookup, codes = self._spans[pid]
        at = lookup.at(t)
        found = at >= 0
        out[found] = codes[at[found]]
        return out


@dataclass(frozen=True)
class _State:
    """What one thread does during the stretches it explains: sorted, disjoint segments of
    each state, the sorted edges of its ranges, and its range lookup."""

    sync: Segments
    comm: Segments
    gc: Segments
    data: Segments
    compiling: Segments
    calls: Segments
    bounds: np.ndarray
    lookup: RangeLookup

    def segments(self) -> tuple[Segments, ...]:
        return self.sync, self.comm, self.gc, self.data, self.compiling, self.calls


def _between(segments: Segments, lo: int, hi: int) -> Segments:
    """The sorted, disjoint segments that overlap ``[lo, hi]`` (views)."""
    seg_s, seg_e = segments
    a = int(np.searchsorted(seg_e, lo, side="right"))
    b = int(np.searchsorted(seg_s, hi, side="right"))
    return seg_s[a:b], seg_e[a:b]


def _comm_rows(name: pd.Series, domain: pd.Series) -> np.ndarray:
    """Ranges that wrap a collective call (rules/comm.py), tested once per distinct name
    and once per distinct domain."""
    by_name = cat_mask(name, lambda s: s.str.contains(COMM_RANGE_RE))
    by_domain = cat_mask(domain, lambda s: s.isin(COMM_DOMAINS))
    out: np.ndarray = by_name | by_domain
    return out


def _sorted(*parts: np.ndarray) -> np.ndarray:
    """The distinct values of ``parts``, sorted. Each part is sorted or nearly (starts in
    range order, merged segments): a stable sort merges the runs (np.unique hashed every
    value: 1.5 s for the 2 M edges of a million-kernel profile's main thread)."""
    edges = np.sort(np.concatenate(parts).astype(np.int64, copy=False), kind="stable")
    keep = np.ones(edges.size, dtype=bool)
    np.not_equal(edges[1:], edges[:-1], out=keep[1:])
    out: np.ndarray = edges[keep]
    return out


def _meeting(union: Segments, segments: Segments) -> Segments:
    """The sorted, disjoint ``segments`` that overlap the sorted, disjoint ``union``."""
    seg_s, seg_e = segments
    if seg_s.size == 0 or union[0].size == 0:
        return _none()
    k = np.searchsorted(union[1], seg_s, side="right")  # the first union part ending later
    keep = k < union[0].size
    keep[keep] = union[0][k[keep]] < seg_e[keep]
    return seg_s[keep], seg_e[keep]


def _none() -> Segments:
    empty = np.empty(0, dtype=np.int64)
    return empty, empty


def _split(
    start: np.ndarray, end: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each ``[start, end)`` cut at the sorted ``edges`` strictly inside it: the pieces'
    starts, ends and the position of the stretch each came from."""
    lo = np.searchsorted(edges, start, side="right")
    hi = np.searchsorted(edges, end, side="left")
    inner = np.maximum(hi - lo, 0)
    source = np.repeat(np.arange(start.size), inner + 1)
    first = np.cumsum(inner + 1) - (inner + 1)  # each stretch's first piece
    s = np.repeat(start, inner + 1)
    # The k-th piece after the first starts at edges[lo + k - 1].
    k = np.arange(source.size) - first[source]
    later = k > 0
    s[later] = edges[lo[source[later]] + k[later] - 1]
    e = np.empty_like(s)
    e[:-1] = s[1:]
    last = np.r_[first[1:] - 1, source.size - 1] if start.size else np.empty(0, dtype=np.int64)
    e[last] = end
    return s, e, source
