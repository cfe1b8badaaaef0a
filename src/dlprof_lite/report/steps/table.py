"""Per-iteration table and iteration statistics: where each training step's time goes.

Windows are the iterations the ingest stage found (DLProf's key-node rule). Time-based
columns (busy, per-phase, idle, data) measure what happened *inside* each window on the
clock, so GPU work spilling past a step's end counts in the next window; count-based
columns (kernels, kernel time, host gaps) use the ops' ``iteration`` assignment; a host
gap counts only the part of it inside its iteration's window, so ``launch_overhead_pct``
(host gaps / (wall x devices)) never exceeds 100 %.

Both breakdowns add up to the step. On the GPU, each instant a device is busy counts once,
for one phase: where ops of several phases overlap (a data copy on a side stream under the
forward's kernels) it goes to the first of :data:`GPU_PRIORITY`, so the phase columns plus
``phase_idle_ns`` are ``wall_ns x devices``. On the host, the phases tile their iteration;
where ranges overlap anyway (compilation inside a phase that was not ended, ranges of
several threads) the time goes to the first of :data:`HOST_PRIORITY`, so compile time is
never data loading; ``other_wall_ns`` is the step's time that no phase range covers
(logging, checkpoints, a script without phase ranges), never reported as data loading.
The phase columns plus ``other_wall_ns`` are ``wall_ns``.

Communication columns (``compute_ns``, ``comm_ns``, ``exposed_comm_ns``, ``overlap_pct``) use
the kernels' ``iteration`` assignment, per ``(pid, device)`` timeline as the ranks table does
(report/ranks/table.py): unions of compute and of communication kernels, and the communication no
compute kernel of the same timeline overlaps, summed over the iteration's timelines.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import sum_by
from dlprof_lite.report.frames import gpu_ops, ordered, share
from dlprof_lite.report.idle.table import cause_columns
from dlprof_lite.report.intervals import (
    Timeline,
    bounds,
    busy_by_timeline,
    covered_between,
    merge,
    timelines,
)
from dlprof_lite.report.metrics import GPU_PRIORITY, HOST_PRIORITY, PHASE_COLUMNS
from dlprof_lite.report.model import analysed, empty_report
from dlprof_lite.report.ranks.table import comm_time
from dlprof_lite.report.steps.stats import iteration_stats
from dlprof_lite.rules.names import DOMAIN, ITERATION, PHASES

_OP_COLUMNS = ["start_ns", "end_ns", "phase"]  # stacked for the busy time and phases


def device_count(kernels: pd.DataFrame, memops: pd.DataFrame, gpus: pd.DataFrame) -> int:
    """GPU timelines, ``(pid, device)``, that ran work; else the devices the export lists;
    at least 1."""
    # Each frame's timelines, then their union: stacking a million rows first cost 73 MB.
    used = len(set(timelines(kernels)[1]) | set(timelines(memops)[1]))
    return max(used or len(gpus), 1)


def iterations_table(
    kernels: pd.DataFrame,
    memops: pd.DataFrame,
    ranges: pd.DataFrame,
    iterations: pd.DataFrame,
    devices: int,
    idle: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per iteration; ``idle``: the idle partition's sums (report/idle/), whose
    causes become the ``idle_*_ns``/``host_*_ns`` columns (0 without)."""
    if iterations.empty:
        return empty_report("iterations")
    out = iterations.sort_values("start_ns").reset_index(drop=True).copy()
    t0 = out["start_ns"].to_numpy(dtype="int64")
    t1 = out["end_ns"].to_numpy(dtype="int64")
    comm = _comm_sums(kernels)  # first: its temporaries are freed before the ops are stacked
    # Timelines numbered once for the busy time and each phase's, from their own stack of
    # (pid, device): not kept in ``ops`` while the phases are merged (16 MB at 1M kernels).
    lines = timelines(gpu_ops(kernels, memops, ["pid", "device_id"]))
    ops = gpu_ops(kernels, memops, _OP_COLUMNS)
    out["gpu_busy_ns"] = busy_by_timeline(lines[0], len(lines[1]), *bounds(ops), t0, t1)
    for p, ns in _gpu_phases(ops, lines, t0, t1, out["gpu_busy_ns"].to_numpy()).items():
        out[f"phase_{p}_ns"] = ns
    del ops, lines
    out["phase_idle_ns"] = np.maximum(out["wall_ns"] * devices - out["gpu_busy_ns"], 0)
    phases = _key_process_phases(ranges, t1)
    covered = np.zeros(len(out), dtype=np.int64)
    for p in HOST_PRIORITY:
        now = _phase_wall(phases, HOST_PRIORITY[: HOST_PRIORITY.index(p) + 1], t0, t1)
        out[f"{p}_wall_ns"] = now - covered
        covered = now
    out["other_wall_ns"] = out["wall_ns"] - covered
    out = out.join(_kernel_sums(kernels), on="iteration")
    # Each frame's gaps apart: no stack of their iterations and gaps (17 MB at 1M kernels).
    gaps = _window_gaps(kernels, out) + _window_gaps(memops, out)
    out["host_gap_ns"] = gaps.sum(axis=1)
    gap_cols = [f"phase_{p}_host_gap_ns" for p in PHASE_COLUMNS]
    out[gap_cols] = gaps
    counts = ["kernels", "kernel_ns", "tc_ns", "host_gap_ns", *gap_cols]
    out[counts] = out[counts].fillna(0).astype("int64")
    out["tc_share"] = share(out["tc_ns"], out["kernel_ns"])
    out["launch_overhead_pct"] = share(out["host_gap_ns"], out["wall_ns"] * devices) * 100.0
    out = out.join(comm, on="iteration")
    out[list(_COMM)] = out[list(_COMM)].fillna(0).astype("int64")
    talk = out["comm_ns"].to_numpy(dtype=np.int64)
    out["overlap_pct"] = share(talk - out["exposed_comm_ns"].to_numpy(dtype=np.int64), talk) * 100.0
    causes = cause_columns(idle if idle is not None else pd.DataFrame(), out["iteration"])
    out[list(causes.columns)] = causes.to_numpy()
    return ordered(out, "iterations")


_COMM = ("compute_ns", "comm_ns", "exposed_comm_ns")


def _comm_sums(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per iteration: compute, communication and exposed communication time, each summed
    over the ``(pid, device)`` timelines of the iteration's kernels (report/ranks/table.py)."""
    per = comm_time(kernels, ["pid", "device_id", "iteration"])  # no step: in no group
    return per.groupby(level="iteration")[list(_COMM)].sum()


def _gpu_phases(
    ops: pd.DataFrame,
    lines: tuple[np.ndarray, list[Timeline]],
    t0: np.ndarray,
    t1: np.ndarray,
    busy: np.ndarray,
) -> dict[str, np.ndarray]:
    """Busy device time per window and phase, each instant once (:data:`GPU_PRIORITY`):
    a phase gets what the union of its ops adds to the union of the phases before it.
    ``busy``: the union of all ops, which the last phase completes (not merged again).

    On arrays (phase numbers, timelines, bounds): a frame of the ops per phase copied every
    column each time (67 MB at 1M kernels), and comparing object strings took 0.3 s."""
    phase = ops["phase"].astype("category")  # kernels' and memops' share their categories
    codes = phase.cat.codes.to_numpy()
    number = {str(name): i for i, name in enumerate(phase.cat.categories)}
    known = np.isin(codes, [number[p] for p in PHASES if p in number])
    timeline, keys = lines
    starts, ends = bounds(ops)
    taken = np.zeros(len(ops), dtype=bool)
    before = np.zeros(len(t0), dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    single = len(keys) == 1 and bool((timeline == 0).all())  # no timeline numbers to pick
    for p in GPU_PRIORITY:
        # ``other`` also takes ops without a known phase.
        taken |= (codes == number.get(p, -2)) if p in PHASES else ~known
        if taken.all():  # every op: the busy time already known, no copy of every bound
            now = busy
        else:
            mine = np.zeros(0, dtype=np.int64) if single else timeline[taken]
            now = busy_by_timeline(mine, len(keys), starts[taken], ends[taken], t0, t1)
            del mine
        out[p] = now - before
        before = now
    return out


def _kernel_sums(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels, kernel time and Tensor Core kernel time per iteration that has kernels.

    Exact int64 sums by iteration number (0-based), no groupby: ``to_numpy()`` of the
    nullable iteration column made a million Python ints (+118 MB at 1M kernels)."""
    it = kernels["iteration"].to_numpy(dtype=np.int64, na_value=-1)
    dur = kernels["dur_ns"].to_numpy(dtype=np.int64)
    tc = kernels["uses_tensor_cores"].to_numpy(dtype=bool)
    has = it >= 0
    if not has.all():  # ops outside every iteration: the rest only (copies)
        it, dur, tc = it[has], dur[has], tc[has]
    n = int(it.max()) + 1 if it.size else 0
    count = np.bincount(it, minlength=n).astype(np.int64)
    kernel_ns, tc_ns = sum_by(it, dur, n), sum_by(it[tc], dur[tc], n)
    present = np.flatnonzero(count > 0)
    index = pd.Index(present, name="iteration")
    sums = {"kernels": count, "kernel_ns": kernel_ns, "tc_ns": tc_ns}
    return pd.DataFrame({k: v[present] for k, v in sums.items()}, index=index)


def _window_gaps(ops: pd.DataFrame, iterations: pd.DataFrame) -> np.ndarray:
    """Host gap time per iteration (a row of ``iterations``) and phase (a column of
    :data:`PHASE_COLUMNS`; ops without a known phase count as other), each op's gap clipped
    to its iteration's window.

    The gap is the GPU idle interval ``[start - host_gap, start]``; it can begin long before
    the step that launched the op (an idle GPU between steps, a first step after a long
    set-up), and unclipped it made a step's gaps exceed its wall time (1435 % on a real
    export). On one timeline the gaps are disjoint, so clipped ones sum to at most the wall.
    Summed on phase codes: a frame of every gap with its phase as text, grouped, held a
    million strings at 1M kernels.
    """
    gap = ops["host_gap_ns"].to_numpy(dtype=np.int64)
    has = ops["iteration"].notna().to_numpy(dtype=bool) & (gap > 0)
    number = ops["iteration"].to_numpy(dtype=np.int64, na_value=-1)[has]
    pos = pd.Index(iterations["iteration"].to_numpy(dtype=np.int64)).get_indexer(number)
    known = pos >= 0
    pos = pos[known]
    start = ops["start_ns"].to_numpy(dtype=np.int64)[has][known]
    t0 = iterations["start_ns"].to_numpy(dtype=np.int64)[pos]
    t1 = iterations["end_ns"].to_numpy(dtype=np.int64)[pos]
    lo = np.maximum(start - gap[has][known], t0)
    phase = ops["phase"].astype("category")
    other = PHASE_COLUMNS.index("other")
    column = np.array([PHASE_COLUMNS.index(str(c)) if c in PHASES else other
                       for c in phase.cat.categories] + [other], dtype=np.intp)  # fmt: skip
    codes = phase.cat.codes.to_numpy()[has][known]  # -1 (missing) picks the last: other
    cells = len(iterations) * len(PHASE_COLUMNS)
    gaps = np.maximum(np.minimum(start, t1) - lo, 0)
    out = sum_by(pos * len(PHASE_COLUMNS) + column[codes], gaps, cells)
    return out.reshape(len(iterations), len(PHASE_COLUMNS))


def _key_process_phases(ranges: pd.DataFrame, ends: np.ndarray) -> pd.DataFrame:
    """Our phase and iteration ranges of the one process the iterations follow.

    Each rank of a distributed run writes its own phases; their union would book rank 1's
    forward into rank 0's data loading. The process whose ``iteration`` ranges end at the
    iteration boundaries is the one; else (another key) the one with most phase time.
    """
    ours = ranges[(ranges["domain"] == DOMAIN).to_numpy(dtype=bool)]
    if ours["pid"].nunique() <= 1:
        return ours
    named = ours["name"].astype(object)
    at_end = (named == ITERATION).to_numpy() & np.isin(ours["end_ns"].to_numpy(), ends)
    score = pd.Series(at_end.astype(np.int64)).groupby(ours["pid"].to_numpy()).sum()
    if score.max() == 0:
        in_phase = named.isin(PHASES).to_numpy()
        spans = (ours["end_ns"] - ours["start_ns"]).to_numpy() * in_phase
        score = pd.Series(spans).groupby(ours["pid"].to_numpy()).sum()
    # The best score; among equals the lowest pid (a stable choice between equal ranks).
    pid = score[score == score.max()].index.min()
    chosen: pd.DataFrame = ours.loc[(ours["pid"] == pid).to_numpy()]
    return chosen


def _phase_wall(
    ranges: pd.DataFrame, phases: tuple[str, ...], t0: np.ndarray, t1: np.ndarray
) -> np.ndarray:
    """Host time inside these phases' annotation ranges per window (union over threads)."""
    mine = ranges["name"].isin(phases).to_numpy(dtype=bool) & (ranges["domain"] == DOMAIN).to_numpy(
        dtype=bool
    )
    segments = merge(ranges.loc[mine, "start_ns"].to_numpy(), ranges.loc[mine, "end_ns"].to_numpy())
    return covered_between(segments, t0, t1)


def iteration_summary(table: pd.DataFrame) -> dict[str, object]:
    """Iteration counts and wall-time statistics as summary keys.

    Statistics and the steady window are :func:`dlprof_lite.ingest.iterations.iteration_stats`
    (in-window, non-warm-up iterations); this only renames them into the summary's keys.
    """
    out: dict[str, object] = {
        "iterations_count": len(table),
        "iterations_warmup": int(table["warmup"].astype(bool).sum()) if len(table) else 0,
        "iterations_analysed": 0,
    }
    names = ("mean_ns", "median_ns", "std_ns", "p10_ns", "p90_ns", "cv")
    if table.empty:
        out.update({f"iterations_{k}": None for k in names}, steady_start=None, steady_stop=None)
        return out
    stats = iteration_stats(table)
    out["iterations_analysed"] = stats["count"]
    out.update({f"iterations_{k}": stats[k] for k in names})
    out["steady_start"], out["steady_stop"] = stats["steady_start"], stats["steady_stop"]
    return out


def step_breakdown(table: pd.DataFrame, devices: int) -> dict[str, object]:
    """Mean per analysed step of each phase's device time, idle time, host time and
    host-bound gaps (the launch overhead of each phase, also as % of the step)."""
    window = analysed(table)
    cols = {
        **{f"step_{p}_ns": f"phase_{p}_ns" for p in PHASE_COLUMNS},
        "step_idle_ns": "phase_idle_ns",
        **{f"step_{p}_wall_ns": f"{p}_wall_ns" for p in PHASE_COLUMNS},
        **{f"step_{p}_host_gap_ns": f"phase_{p}_host_gap_ns" for p in PHASE_COLUMNS},
    }
    pcts = {f"step_{p}_host_gap_pct": f"phase_{p}_host_gap_ns" for p in PHASE_COLUMNS}
    pcts["step_data_wall_pct"] = "data_wall_ns"
    if window.empty:
        out: dict[str, object] = dict.fromkeys([*cols, *pcts])
        out["step_utilization"] = None
        return out
    means = window[list(cols.values())].mean()
    out = {key: float(means[col]) for key, col in cols.items()}
    wall = float(window["wall_ns"].sum())
    for key, col in pcts.items():
        whole = wall if key == "step_data_wall_pct" else wall * devices
        out[key] = _pct(float(window[col].sum()), whole)
    out["step_utilization"] = _ratio(float(window["gpu_busy_ns"].sum()), wall * devices)
    return out


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _pct(part: float, whole: float) -> float | None:
    r = _ratio(part, whole)
    return None if r is None else r * 100.0
