"""The timeline: every event of a few iterations, one row each, for a trace viewer or a chart.

Place in the pipeline: report. :func:`timeline_for` cuts the enriched Profile's frames (NVTX
ranges, CUDA API calls, kernels, memcpys and memsets; marks are instants, not events) to
iterations ``[A, B)``, by default the one steady iteration :func:`steady_iteration` picks,
and stacks them into one frame of the ``timeline`` report table (report/metrics.py). The
report keeps at most :data:`TIMELINE_MAX_EVENTS` rows of it (:func:`capped`);
``trace.json`` is drawn from that frame (report/trace.py).

Which events belong to the window ``(start of A, end of B - 1]``:

- GPU ops: those ingest put in one of its iterations (by their launch call, as the kernels
  table counts them), so the trace's kernel time of an iteration is the report's;
- API calls: those whose start falls in one of its iterations (the same ``(start, end]``
  rule, report/window.py);
- ranges: every range that overlaps the window, kept whole (a trace viewer needs the real
  bounds; a range that opened before the window is listed with the window's first
  iteration). Times are the session clock's nanoseconds, never rounded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.window import op_steps, step_of
from dlprof_lite.rules.names import DOMAIN, PHASES, parse_module_range

# The report's timeline table holds at most this many events (the longest, when over).
TIMELINE_MAX_EVENTS = 20_000
KINDS = ("range", "api", "kernel", "memcpy", "memset")
_TEXT = ("kind", "name", "full_name", "domain", "layer", "phase")
_INTS = ("pid", "tid", "device_id", "stream_id", "depth", "correlation_id")
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
    parts = [
        _range_events(profile, steps, _bounds(profile.iterations, steps), ops),
        _api_events(profile, steps, ops),
        ops.drop(columns=["range_id"]),
    ]
    frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    order = np.lexsort((frame["kind"].map(KINDS.index).to_numpy(), -frame["end_ns"].to_numpy(),
                        frame["start_ns"].to_numpy()))  # fmt: skip
    return _typed(frame.iloc[order])


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


def empty_timeline() -> pd.DataFrame:
    """The timeline table with no rows, typed as a filled one."""
    return _typed(pd.DataFrame({c: pd.Series(dtype="object") for c in column_names("timeline")}))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Declared column order and dtypes: times int64, ids nullable Int64, text categorical."""
    out = frame.reindex(columns=column_names("timeline")).reset_index(drop=True)
    types: dict[str, str] = {c: "Int64" for c in _INTS}
    types.update({c: "category" for c in _TEXT}, start_ns="int64", end_ns="int64",
                 iteration="int64")  # fmt: skip
    typed: pd.DataFrame = out.astype(types)
    return typed


def _gpu_events(profile: Profile, steps: np.ndarray) -> pd.DataFrame:
    """Kernels and memops that ingest put in one of ``steps`` (kernels by short name)."""
    parts = []
    for ops in (profile.kernels, profile.memops):
        step = op_steps(ops)
        keep = np.isin(step, steps)
        part = ops.loc[keep, _OP_COLUMNS].astype({"layer": object, "phase": object})
        part["iteration"] = step[keep]
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
    api = profile.api
    start = api["start_ns"].to_numpy(dtype=np.int64)
    keep = _in_window(start, profile.iterations, steps, _bounds(profile.iterations, steps))
    calls = api.loc[keep, ["start_ns", "end_ns", "pid", "tid", "correlation_id"]]
    calls = calls.assign(kind="api", name=api.loc[keep, "name"].astype(object),
                         iteration=step_of(start[keep], profile.iterations))  # fmt: skip
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
    cols = ["range_id", "start_ns", "end_ns", "pid", "tid", "depth", "name", "domain"]
    part = ranges.loc[keep, cols].astype({"name": object, "domain": object})
    part["kind"] = "range"
    part["full_name"] = part["name"]
    step = step_of(start[keep], profile.iterations)
    part["iteration"] = np.where(starts_in[keep], step, steps[0])
    # Labelled after the cut: a name is parsed once per iteration's ranges, not per profile.
    own_layer, own_phase = _own_labels(ranges.loc[keep, "name"], ranges.loc[keep, "domain"])
    by_op = ops.dropna(subset=["range_id"]).drop_duplicates("range_id").set_index("range_id")
    ids = part["range_id"]
    part["layer"] = own_layer.where(own_layer.notna(), ids.map(by_op["layer"]).to_numpy())
    part["phase"] = own_phase.where(own_phase.notna(), ids.map(by_op["phase"]).to_numpy())
    labelled: pd.DataFrame = part.drop(columns=["range_id"])
    return labelled


def _own_labels(names: pd.Series, domains: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Per range: the layer its own name declares (``fwd:fc1:Linear`` -> ``fc1``) and the
    phase it is (our ``forward`` range in our domain), else NA; parsed once per name."""
    names = names.cat.remove_unused_categories()
    cats = names.cat.categories
    layer_of = np.array([_module_layer(str(n)) for n in cats] + [None], dtype=object)
    layer = pd.Series(layer_of[names.cat.codes.to_numpy()], index=names.index, dtype=object)
    ours = (domains.astype(object) == DOMAIN).to_numpy(dtype=bool)
    phase = names.astype(object).where(names.isin(PHASES).to_numpy(dtype=bool) & ours)
    return layer, phase


def _module_layer(name: str) -> str | None:
    parsed = parse_module_range(name)
    return parsed.qualname if parsed else None


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
    """The report's ``timeline`` table, the iteration it shows and its warnings."""
    step = steady_iteration(profile.iterations)
    if step is None:
        return empty_timeline(), None, []
    frame, dropped = capped(timeline_for(profile, (step, step + 1)), cap)
    warnings = []
    if dropped:
        warnings.append(f"timeline: iteration {step} has {len(frame) + dropped} events; "
                        f"only the longest {len(frame)} are kept, {dropped} left out "
                        "(trace.json of --trace-iterations holds all)")  # fmt: skip
    return frame, step, warnings
