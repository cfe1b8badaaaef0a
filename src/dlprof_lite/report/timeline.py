"""The timeline: every event of a few iterations, one row each, for a trace viewer or a chart.

Place in the pipeline: report. :func:`timeline_for` cuts the enriched Profile's frames (NVTX
ranges, CUDA API calls, kernels, memcpys and memsets; marks are instants, not events) to
iterations ``[A, B)``, by default the one steady iteration :func:`steady_iteration` picks,
and stacks them into one frame of the ``timeline`` report table (report/metrics.py). The
report keeps at most :data:`TIMELINE_MAX_EVENTS` rows of it (:func:`capped`);
``trace.json`` is drawn from that frame (render/trace.py). A profile without iterations shows
its busiest stretch instead (:func:`busiest_stretch`, :func:`timeline_between`), its events
in no iteration (``iteration`` empty), so that ``trace.json`` is never empty while there are
events.

Which events belong to the window ``(start of A, end of B - 1]``:

- GPU ops: those ingest put in one of its iterations (by their launch call, as the kernels
  table counts them), so the trace's kernel time of an iteration is the report's;
- API calls: those whose start falls in one of its iterations (the same ``(start, end]``
  rule, report/steps/window.py);
- ranges: every range that overlaps the window, kept whole (a trace viewer needs the real
  bounds; a range that opened before the window is listed with the window's first
  iteration). Times are the session clock's nanoseconds, never rounded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.model import empty_timeline, typed_timeline
from dlprof_lite.report.steps.window import op_steps, step_of
from dlprof_lite.rules.comm import is_comm_kernel
from dlprof_lite.rules.names import DOMAIN, PHASES, parse_module_range
from dlprof_lite.rules.threads import stream_label, thread_labels

# The report's timeline table holds at most this many events (the longest, when over).
TIMELINE_MAX_EVENTS = 20_000
KINDS = ("range", "api", "kernel", "memcpy", "memset")
_OP_COLUMNS = ["start_ns", "end_ns", "pid", "tid", "device_id", "stream_id",
               "correlation_id", "range_id", "layer", "phase", "iteration"]  # fmt: skip


def steady_iteration(iterations: pd.DataFrame) -> int | None:
    """The analysed iteration (in the window, not warm-up) whose wall time is nearest the
    median of the analysed ones, the earliest among equals; None without one."""
    if iterations.empty:
        return None
    analysed = ~iterations["warmup"].to_numpy(dtype=bool)
    keep = iterations["in_window"].to_numpy(dtype=bool) & analysed
    chosen = iterations[keep].sort_values("iteration")
    if chosen.empty:
        return None
    wall = chosen["wall_ns"].to_numpy(dtype=np.float64)
    at = int(np.argmin(np.abs(wall - np.median(wall))))  # argmin: the first of equals
    return int(chosen["iteration"].iloc[at])


def timeline_for(profile: Profile, iterations: tuple[int, int] | None = None) -> pd.DataFrame:
    """Every event of iterations ``[A, B)`` (default: :func:`steady_iteration`), uncapped,
    in start order: the ``timeline`` table's columns. An empty frame without iterations;
    :class:`InputError` for a range ``A:B`` that holds none of the profile's iterations."""
    steps = _steps(profile.iterations, iterations)
    if not len(steps):
        return empty_timeline()
    ops = _gpu_events(profile, steps)
    frame = _stacked(
        _range_events(profile, steps, _bounds(profile.iterations, steps), ops),
        _api_events(profile, steps, ops),
        ops,
    )
    return with_tracks(frame, profile.meta.threads)


def with_tracks(frame: pd.DataFrame, threads: tuple[tuple[int, int, str], ...]) -> pd.DataFrame:
    """``frame`` with its ``track`` column: each event's thread or stream by name
    (rules/threads.py); ``threads`` are the capture's (pid, tid, OS name)."""
    gpu = frame["kind"].astype(str).isin(("kernel", "memcpy", "memset")).to_numpy()
    pid = frame["pid"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    tid = frame["tid"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    pairs = set(zip(pid[~gpu].tolist(), tid[~gpu].tolist(), strict=True))
    labels = thread_labels(pairs, threads)
    track = np.empty(len(frame), dtype=object)
    track[~gpu] = [labels[k] for k in zip(pid[~gpu].tolist(), tid[~gpu].tolist(), strict=True)]
    if gpu.any():
        ops = frame.loc[gpu, ["device_id", "stream_id", "full_name"]].astype(object)
        names = pd.Series(ops["full_name"].astype(str).unique())
        comm = set(names[names.map(is_comm_kernel).to_numpy(dtype=bool)])
        talks = ops.assign(c=ops["full_name"].astype(str).isin(comm))
        busy = talks.groupby(["device_id", "stream_id"], dropna=False)["c"].transform("any")
        track[gpu] = [stream_label(int(s) if s == s and s is not None else -1, bool(c))
                      for s, c in zip(ops["stream_id"].tolist(), busy.tolist(), strict=True)]
    out = frame.copy()
    out["track"] = pd.Categorical(track)
    return out


def _stacked(ranges: pd.DataFrame, calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One typed frame of the three parts, in start order (the longer first among equal
    starts, then ranges, calls, GPU ops)."""
    parts = [ranges, calls, ops.drop(columns=["range_id"])]
    frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    order = np.lexsort((frame["kind"].map(KINDS.index).to_numpy(), -frame["end_ns"].to_numpy(),
                        frame["start_ns"].to_numpy()))  # fmt: skip
    return typed_timeline(frame.iloc[order])


# -- without iterations: the busiest stretch -------------------------------------------------

NO_ITERATION = -1  # while building: an event in no iteration (empty in the table)


def busiest_stretch(profile: Profile, cap: int = TIMELINE_MAX_EVENTS) -> tuple[int, int] | None:
    """``(t0, t1)``: the start of the first and of the last of the ``cap`` consecutive
    events (ranges, API calls, GPU ops, by start) that hold the most GPU time (their GPU ops'
    durations; without GPU work, the durations of the top-level ranges and API calls): the
    whole session's events when there are no more than ``cap``; None without events."""
    starts, weights = [], []
    gpu = any(len(f) for f in (profile.kernels, profile.memops))
    for frame, kind in ((profile.ranges, "range"), (profile.api, "api"),
                        (profile.kernels, "op"), (profile.memops, "op")):  # fmt: skip
        start = frame["start_ns"].to_numpy(dtype=np.int64)
        dur = frame["end_ns"].to_numpy(dtype=np.int64) - start
        if gpu:
            weight = dur if kind == "op" else np.zeros_like(dur)
        else:
            weight = np.where(frame["depth"].to_numpy() == 0, dur, 0) if kind == "range" else dur
        starts.append(start)
        weights.append(weight)
    start = np.concatenate(starts)
    if not len(start):
        return None
    order = np.argsort(start, kind="stable")
    start, weight = start[order], np.concatenate(weights)[order]
    if len(start) <= cap:
        return int(start[0]), int(start[-1])
    held = np.concatenate([[0], np.cumsum(weight)])
    first = int(np.argmax(held[cap:] - held[:-cap]))  # the earliest among equals
    return int(start[first]), int(start[first + cap - 1])


def timeline_between(profile: Profile, t0: int, t1: int) -> pd.DataFrame:
    """Every event that starts in ``[t0, t1]`` (a range overlapping it: whole), in no
    iteration (``iteration`` empty): the timeline of a profile without iterations, for
    :func:`busiest_stretch`'s bounds."""
    kept = []
    for ops in (profile.kernels, profile.memops):
        start = ops["start_ns"].to_numpy(dtype=np.int64)
        keep = (start >= t0) & (start <= t1)
        kept.append((keep, np.full(int(keep.sum()), NO_ITERATION, dtype=np.int64)))
    ops = _gpu_rows(profile, kept)
    call = profile.api["start_ns"].to_numpy(dtype=np.int64)
    calls = (call >= t0) & (call <= t1)
    r0 = profile.ranges["start_ns"].to_numpy(dtype=np.int64)
    r1 = profile.ranges["end_ns"].to_numpy(dtype=np.int64)
    ranges = (r0 <= t1) & (r1 >= t0)

    def none(mask: np.ndarray) -> np.ndarray:
        return np.full(int(mask.sum()), NO_ITERATION, dtype=np.int64)

    frame = _stacked(_range_rows(profile, ranges, none(ranges), ops),
                     _api_rows(profile, calls, none(calls), ops), ops)  # fmt: skip
    frame["iteration"] = pd.array([pd.NA] * len(frame), dtype="Int64")
    return with_tracks(frame, profile.meta.threads)


def _steps(iterations: pd.DataFrame, chosen: tuple[int, int] | None) -> np.ndarray:
    """The iteration numbers of the window, in order."""
    if chosen is None:
        one = steady_iteration(iterations)
        return np.asarray([] if one is None else [one], dtype=np.int64)
    start, stop = chosen
    if start < 0 or stop <= start:
        raise InputError(f"--trace-iterations {start}:{stop}: need 0 <= A < B")
    found = iterations["iteration"].to_numpy(dtype=np.int64)
    steps = np.sort(found[(found >= start) & (found < stop)])
    if not len(steps):
        last = f"0 to {int(found.max())}" if len(found) else "none"
        raise InputError(f"--trace-iterations {start}:{stop}: no such iterations "
                         f"(the profile has {last})")  # fmt: skip
    return steps


def _bounds(iterations: pd.DataFrame, steps: np.ndarray) -> tuple[int, int]:
    """``(t0, t1)``: the first step's start and the last one's end (steps are consecutive,
    and each iteration starts where the one before ended)."""
    table = iterations.set_index("iteration")
    return int(table.loc[steps, "start_ns"].min()), int(table.loc[steps, "end_ns"].max())


def _in_window(
    times: np.ndarray, iterations: pd.DataFrame, steps: np.ndarray, bounds: tuple[int, int]
) -> np.ndarray:
    """Whether each time falls in one of ``steps``: :func:`step_of`'s ``(start, end]`` rule
    (the first iteration also its own start) by two comparisons, not a search per time."""
    t0, t1 = bounds
    first = int(iterations.sort_values("start_ns")["iteration"].iloc[0]) == int(steps[0])
    inside: np.ndarray = ((times > t0) | (first & (times == t0))) & (times <= t1)
    return inside


def _gpu_events(profile: Profile, steps: np.ndarray) -> pd.DataFrame:
    """Kernels and memops that ingest put in one of ``steps`` (kernels by short name)."""
    kept = []
    for ops in (profile.kernels, profile.memops):
        step = op_steps(ops)
        keep = np.isin(step, steps)
        kept.append((keep, step[keep]))
    return _gpu_rows(profile, kept)


def _gpu_rows(profile: Profile, kept: list[tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """The rows of the kernels and the memops ``kept`` (a mask and the iteration of each)."""
    parts = []
    for ops, (keep, step) in zip((profile.kernels, profile.memops), kept, strict=True):
        part = ops.loc[keep, _OP_COLUMNS].astype({"layer": object, "phase": object})
        part["iteration"] = step
        if ops is profile.kernels:
            part["kind"] = "kernel"
            part["name"] = ops.loc[keep, "short_name"].astype(object)
            part["full_name"] = ops.loc[keep, "name"].astype(object)
        else:
            kind = ops.loc[keep, "kind"].astype(object)
            copy = ops.loc[keep, "copy_kind"].astype(object)
            part["kind"] = kind
            part["name"] = (kind + " " + copy).where(copy.notna(), kind)
            part["full_name"] = part["name"]
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _launched(ops: pd.DataFrame) -> pd.DataFrame:
    """One GPU op per (pid, correlation_id): what a launch call ran (a graph launch runs
    many kernels under one id; its first names the layer and phase)."""
    first = ops.drop_duplicates(["pid", "correlation_id"])
    return first.loc[:, ["pid", "correlation_id", "layer", "phase"]]


def _api_events(profile: Profile, steps: np.ndarray, ops: pd.DataFrame) -> pd.DataFrame:
    """API calls starting in one of ``steps``; a launch call takes its op's layer/phase."""
    start = profile.api["start_ns"].to_numpy(dtype=np.int64)
    keep = _in_window(start, profile.iterations, steps, _bounds(profile.iterations, steps))
    return _api_rows(profile, keep, step_of(start[keep], profile.iterations), ops)


def _api_rows(
    profile: Profile, keep: np.ndarray, step: np.ndarray, ops: pd.DataFrame
) -> pd.DataFrame:
    """The rows of the API calls ``keep`` selects (``step``: the iteration of each)."""
    api = profile.api
    calls = api.loc[keep, ["start_ns", "end_ns", "pid", "tid", "correlation_id"]]
    calls = calls.assign(kind="api", name=api.loc[keep, "name"].astype(object), iteration=step)
    calls["full_name"] = calls["name"]
    merged = calls.merge(_launched(ops), how="left", on=["pid", "correlation_id"],
                         validate="many_to_one")  # fmt: skip
    return merged


def _range_events(
    profile: Profile, steps: np.ndarray, bounds: tuple[int, int], ops: pd.DataFrame
) -> pd.DataFrame:
    """Ranges overlapping ``(t0, t1)``, whole; labelled with their own module or phase name,
    else the layer and phase of the first GPU op whose innermost range they are."""
    ranges = profile.ranges
    t0, t1 = bounds
    start = ranges["start_ns"].to_numpy(dtype=np.int64)
    end = ranges["end_ns"].to_numpy(dtype=np.int64)
    starts_in = _in_window(start, profile.iterations, steps, bounds)
    # Overlapping the window; an instant range only when it lies in it. A range starting at
    # t1 is the next iteration's (real key ranges open after the previous one closed).
    keep = ((start < t1) & (end > t0)) | ((start == end) & starts_in)
    step = step_of(start[keep], profile.iterations)
    return _range_rows(profile, keep, np.where(starts_in[keep], step, steps[0]), ops)


def _range_rows(
    profile: Profile, keep: np.ndarray, step: np.ndarray, ops: pd.DataFrame
) -> pd.DataFrame:
    """The rows of the ranges ``keep`` selects (``step``: the iteration of each), labelled."""
    ranges = profile.ranges
    cols = ["range_id", "start_ns", "end_ns", "pid", "tid", "depth", "name", "domain"]
    part = ranges.loc[keep, cols].astype({"name": object, "domain": object})
    part["kind"] = "range"
    part["full_name"] = part["name"]
    part["iteration"] = step
    # Labelled after the cut: a name is parsed once per iteration's ranges, not per profile.
    own_layer, own_phase, way = _own_labels(ranges.loc[keep, "name"], ranges.loc[keep, "domain"])
    by_op = ops.dropna(subset=["range_id"]).drop_duplicates("range_id").set_index("range_id")
    ids = part["range_id"]
    part["layer"] = own_layer.where(own_layer.notna(), ids.map(by_op["layer"]).to_numpy())
    phase = own_phase.where(own_phase.notna(), ids.map(by_op["phase"]).to_numpy())
    # A module range without GPU work of its own (a CPU run): its direction's phase.
    part["phase"] = phase.where(phase.notna(), way)
    labelled: pd.DataFrame = part.drop(columns=["range_id"])
    return labelled


def _own_labels(
    names: pd.Series, domains: pd.Series
) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Per range: the layer its own name declares (``fwd:fc1:Linear`` -> ``fc1``), the phase
    it is (our ``forward`` range in our domain) and the phase its module direction runs in
    (``fwd:`` forward; ``bwd:`` and ``rec:`` backward), else NA; parsed once per name."""
    names = names.cat.remove_unused_categories()
    parsed = [parse_module_range(str(n)) for n in names.cat.categories]
    codes = names.cat.codes.to_numpy()
    layer_of = np.array([p.qualname if p else None for p in parsed] + [None], dtype=object)
    way_of = np.array([_direction_phase(p.direction) if p else None for p in parsed] + [None],
                      dtype=object)  # fmt: skip
    layer = pd.Series(layer_of[codes], index=names.index, dtype=object)
    way = pd.Series(way_of[codes], index=names.index, dtype=object)
    ours = cat_mask(domains, lambda s: s == DOMAIN)
    phase = names.astype(object).where(names.isin(PHASES).to_numpy(dtype=bool) & ours)
    return layer, phase, way


def _direction_phase(direction: str) -> str:
    """The phase a module direction runs in: a recompute runs inside the backward pass."""
    return "forward" if direction == "forward" else "backward"


def capped(frame: pd.DataFrame, cap: int = TIMELINE_MAX_EVENTS) -> tuple[pd.DataFrame, int]:
    """At most ``cap`` events: the longest, in their order; and how many were left out."""
    if len(frame) <= cap:
        return frame, 0
    dur = (frame["end_ns"] - frame["start_ns"]).to_numpy(dtype=np.int64)
    # The longest ``cap``, ties by position (stable): the same rows every time.
    keep = np.sort(np.argsort(-dur, kind="stable")[:cap])
    return frame.iloc[keep].reset_index(drop=True), len(frame) - cap


def report_timeline(
    profile: Profile, cap: int = TIMELINE_MAX_EVENTS
) -> tuple[pd.DataFrame, int | None, list[str]]:
    """The report's ``timeline`` table, the iteration it shows (None: the busiest stretch of
    a profile without one, :func:`busiest_stretch`) and its warnings."""
    step = steady_iteration(profile.iterations)
    if step is not None:
        frame, dropped = capped(timeline_for(profile, (step, step + 1)), cap)
        what = f"iteration {step}"
    else:
        stretch = busiest_stretch(profile, cap)
        if stretch is None:
            return empty_timeline(), None, []
        frame, dropped = capped(timeline_between(profile, *stretch), cap)
        what = "the busiest stretch"
    warnings = []
    if dropped:
        warnings.append(f"timeline: {what} has {len(frame) + dropped} events; "
                        f"only the longest {len(frame)} are kept, {dropped} left out "
                        "(trace.json of --trace-iterations holds all)")  # fmt: skip
    return frame, step, warnings


def timeline_bounds(frame: pd.DataFrame) -> tuple[int | None, int | None]:
    """First start and last end of the timeline's events (None, None: no events)."""
    if frame.empty:
        return None, None
    return int(frame["start_ns"].min()), int(frame["end_ns"].max())
