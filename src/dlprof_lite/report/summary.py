"""The run summary: system, totals, utilization, launch overhead, iterations, step breakdown.

``summarize`` builds each typed group of the frozen
:class:`~dlprof_lite.report.summary_types.Summary` (``System.of``, ``Totals.of``, ...: a
figure whose name is none of the group's fields is an error) and the lists (GPUs, warnings,
DataLoaders, FP32 GEMM kernels); :mod:`dlprof_lite.report.build` adds the communication and
the advice. Run facts (data loaders, annotation cost) come from ``Profile.facts``
(:mod:`dlprof_lite.report.run_facts`).

GPU utilization is defined per GPU timeline, ``(pid, device)``, as the union of its busy
intervals (kernels, memcpy, memset; overlapping streams counted once) divided by the session
wall time; the summary's ``gpu_utilization`` is their mean over the timelines that ran work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.denominators import share_span
from dlprof_lite.report.facts import (
    fp32_gemm_facts,
    kernel_facts,
    memcpy_facts,
    sync_api_facts,
    tc_miss_facts,
)
from dlprof_lite.report.frames import gpu_ops
from dlprof_lite.report.idle.table import idle_summary
from dlprof_lite.report.intervals import Segments, Timeline, busy_per_device, total
from dlprof_lite.report.layers.flops import cost_warnings, gpu_of, model_cost
from dlprof_lite.report.layers.memory import memory_summary
from dlprof_lite.report.model import analysed
from dlprof_lite.report.run_facts import (
    RunFacts,
    annotation_summary,
    dataloader_summary,
    process_summary,
    read_run_facts,
)
from dlprof_lite.report.steps.projection import ProjectionInput, outside_steps, project
from dlprof_lite.report.steps.stats import compile_ranges, in_iterations
from dlprof_lite.report.steps.table import iteration_summary, step_breakdown
from dlprof_lite.report.summary_types import (
    AnnotationCost,
    Communication,
    Compile,
    Cost,
    DataLoaderFacts,
    DataLoading,
    Gpu,
    HostSync,
    Idle,
    Iterations,
    KernelTime,
    LaunchOverhead,
    Memory,
    Projection,
    StepBreakdown,
    Summary,
    System,
    TensorCores,
    Totals,
    Window,
    number,
)
from dlprof_lite.rules.advice import threshold
from dlprof_lite.rules.iterations import GUESSED
from dlprof_lite.rules.names import DOMAIN, ITERATION
from dlprof_lite.rules.steps import key_regex


def summarize(
    profile: Profile,
    iterations: pd.DataFrame,
    layers: pd.DataFrame,
    devices: int,
    projection: ProjectionInput | None = None,
    window: Mapping[str, object] | None = None,
) -> Summary:
    """The summary without advice (:func:`dlprof_lite.report.build.build_report` adds it
    with ``dataclasses.replace`` before anyone sees the summary); ``projection``: the
    user's steps per epoch and epochs, if given; ``window``: the ``window_*`` fields of the
    tables' window (report/steps/window.py; without it, the whole run)."""
    meta = profile.meta
    ops = gpu_ops(profile.kernels, profile.memops, ["start_ns", "end_ns", "pid", "device_id"])
    busy = busy_per_device(ops)
    span, span_warnings = share_span(profile)
    gpus = _gpus(profile.gpus, busy, span.length_ns)
    busy_ns = sum(total(s) for s in busy.values())
    counts = _totals(profile)
    facts = read_run_facts(profile.facts)
    process, process_warnings = process_summary(facts)
    system = System.of({
        **_system(profile), **process,
        "gpu_names": "; ".join(g.name for g in gpus if g.name),
        "devices": len(busy),
        "wall_ns": meta.duration_ns,
        "event_span_ns": span.event_span_ns,
    })  # fmt: skip
    totals = Totals.of({
        **{k: v for k, v in counts.items() if not k.startswith("tc_")},
        "gpu_busy_ns": busy_ns,
        "gpu_utilization": busy_ns / (span.length_ns * len(busy))
        if span.length_ns and busy else None,
        # Named wherever a utilization is given: the summary's, or a listed GPU's.
        "utilization_scope": span.scope if span.length_ns and gpus else None,
        "active_utilization": _active_utilization(busy),
        **kernel_facts(profile.kernels),
    })  # fmt: skip
    steps = iteration_summary(iterations)
    covered = Window.of({
        **(window or {"window_scope": "whole-run", "window_kernel_ns": counts["kernel_ns"]}),
        "iterations_analysed": steps.pop("iterations_analysed"),
        "key_range": meta.key_range,
        "key_range_source": meta.key_range_source,
    })  # fmt: skip
    fp32 = fp32_gemm_facts(profile.kernels, counts["kernel_ns"])
    fp32_kernels = _kernel_times(fp32.pop("fp32_gemm_kernels", None))
    tensor_cores = TensorCores.of({
        "tc_gpu_ns": counts["tc_gpu_ns"], "tc_unknown_ns": counts["tc_unknown_ns"],
        **_tc_shares(profile, counts, layers),
        # The layers table covers the window: its share is of the window's kernel time.
        **tc_miss_facts(layers, int(number(covered.window_kernel_ns) or 0)),
        **fp32,
    })  # fmt: skip
    launch = LaunchOverhead.of({**_launch_overhead(profile, iterations, busy, devices),
                                "launch_coverage": launch_coverage(profile)})  # fmt: skip
    iteration_group = Iterations.of({**steps, **outside_steps(profile, iterations)})
    host_sync = HostSync.of({
        **memcpy_facts(profile.memops),
        **sync_api_facts(profile.api, iterations, (span.start_ns, span.end_ns), span.scope),
    })  # fmt: skip
    annotation = AnnotationCost.of(
        annotation_summary(facts, number(iteration_group.iterations_mean_ns)))
    projected, projection_warnings = project(profile, iterations, projection or ProjectionInput())
    warnings = [
        *meta.warnings,
        *span_warnings,
        *_coverage_warnings(launch.launch_coverage),
        *_report_warnings(profile, iterations),
        *cost_warnings(layers, profile.facts),
        *_merged_ranks(profile, facts),
        *process_warnings,
        *projection_warnings,
    ]
    return Summary(
        system=system,
        window=covered,
        totals=totals,
        step=StepBreakdown.of(step_breakdown(iterations, devices)),
        tensor_cores=tensor_cores,
        launch_overhead=launch,
        host_sync=host_sync,
        iterations=iteration_group,
        data_loading=DataLoading.of(dataloader_summary(facts)),
        annotation_cost=annotation,
        compile=Compile.of(_compile_totals(profile.ranges)),
        projection=Projection.of(projected),
        communication=Communication.of({}),
        cost=Cost.of(model_cost(layers, number(iteration_group.iterations_median_ns),
                                gpu_of(profile.kernels, profile.gpus))),
        memory=Memory.of(memory_summary(layers, profile.facts)),
        idle=Idle.of(idle_summary(iterations)),
        gpus=tuple(gpus),
        warnings=tuple(warnings),
        dataloaders=tuple(DataLoaderFacts.of_settings(d) for d in facts.dataloaders),
        fp32_gemm_kernels=tuple(fp32_kernels),
    )


def _system(profile: Profile) -> dict[str, object]:
    """What the export says of itself and of the system it profiled."""
    meta = profile.meta
    return {
        "source": meta.source,
        "nsys_version": meta.nsys_version,
        "host": meta.host,
        "os": meta.os,
        "driver_version": meta.driver_version,
        "cuda_driver_version": meta.cuda_driver_version,
    }


def _kernel_times(value: object) -> list[KernelTime]:
    items = value if isinstance(value, list) else []
    return [KernelTime(str(k["name"]), int(k["gpu_ns"])) for k in items]


def _totals(profile: Profile) -> dict[str, int]:
    k, m = profile.kernels, profile.memops
    memcpy = m["dur_ns"][(m["kind"] == "memcpy").to_numpy(dtype=bool)]
    memset = m["dur_ns"][(m["kind"] == "memset").to_numpy(dtype=bool)]
    tc = k["dur_ns"][k["uses_tensor_cores"].to_numpy(dtype=bool)]
    unknown = k["dur_ns"][(k["tc_class"] == "unknown").to_numpy(dtype=bool)]
    return {
        "kernel_ns": int(k["dur_ns"].sum()),
        "kernel_count": len(k),
        "memcpy_ns": int(memcpy.sum()),
        "memcpy_count": len(memcpy),
        "memset_ns": int(memset.sum()),
        "memset_count": len(memset),
        "tc_gpu_ns": int(tc.sum()),
        "tc_unknown_ns": int(unknown.sum()),
    }


def _tc_shares(
    profile: Profile, totals: dict[str, int], layers: pd.DataFrame
) -> dict[str, object]:
    """The Tensor Core share over the kernels whose names tell (tc or no_tc), the share whose
    names cannot tell beside it, and the part of those in layers marked ``tc (inferred)``
    (their recorded dtype and the GPU allow Tensor Cores: report/layers/kernels.py)."""
    kernel_ns, unknown = totals["kernel_ns"], totals["tc_unknown_ns"]
    known = kernel_ns - unknown
    k = profile.kernels
    inferred_layers = layers.loc[layers["tc_inferred"].notna().to_numpy(dtype=bool), "layer"]
    mask = (k["tc_class"] == "unknown").to_numpy(dtype=bool) & k["layer"].isin(
        set(inferred_layers.astype(str))
    ).to_numpy(dtype=bool)
    return {
        "tc_share": totals["tc_gpu_ns"] / known if known else None,
        "tc_unknown_share": unknown / kernel_ns if kernel_ns else None,
        "tc_inferred_ns": int(k["dur_ns"][mask].sum()) if unknown else 0,
    }


def launch_coverage(profile: Profile) -> float | None:
    """Share of GPU operations whose launch call the export holds (None without any)."""
    ops = [f["api_start_ns"] for f in (profile.kernels, profile.memops)]
    count = sum(len(o) for o in ops)
    return sum(int(o.notna().sum()) for o in ops) / count if count else None


def _coverage_warnings(value: object) -> list[str]:
    """A warning when launch calls are missing for many GPU operations (a windowed export,
    API tracing off for a process): launch overhead and layers cover only the others."""
    coverage = number(value)
    if coverage is None or coverage >= threshold("launch_coverage_warn"):
        return []
    return [
        f"only {coverage:.1%} of the GPU operations have their launch call in the export "
        "(launch_coverage): launch overhead, queue times and layer attribution cover those "
        "only; the others count in kernel and busy time"
    ]


def _gpus(gpus: pd.DataFrame, busy: dict[Timeline, Segments], wall: int) -> list[Gpu]:
    """One entry per ``(pid, device)`` timeline that ran work, with the export's GPU info for
    its device; a listed device no process used is one entry with ``pid`` None. ``wall``:
    the span utilization is a share of (the summary's ``utilization_scope``)."""
    listed = {int(str(r.device_id)): r for r in gpus.itertuples(index=False)}
    used = {device for _, device in busy}
    keys: list[tuple[int | None, int]] = [*busy, *((None, d) for d in listed if d not in used)]
    out = []
    for pid, device in sorted(keys, key=lambda k: (k[1], -1 if k[0] is None else k[0])):
        info = listed.get(device)
        busy_ns = total(busy[(pid, device)]) if pid is not None else 0
        out.append(
            Gpu(
                pid=pid,
                device_id=device,
                name=None if info is None else _text(info.name),
                sm_count=None if info is None else _int(info.sm_count),
                compute_capability=None if info is None else _cc(info.cc_major, info.cc_minor),
                busy_ns=busy_ns,
                utilization=busy_ns / wall if wall else None,
            )
        )
    return out


def _text(value: object) -> str | None:
    value = _scalar(value)
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    value = _scalar(value)
    return None if value is None else int(str(value))


def _scalar(value: object) -> object:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _cc(major: object, minor: object) -> str | None:
    major, minor = _scalar(major), _scalar(minor)
    return None if major is None else f"{major}.{minor if minor is not None else 0}"


def min_compute_capability(gpus: Sequence[Gpu]) -> float | None:
    ccs = [float(g.compute_capability) for g in gpus if g.compute_capability]
    return min(ccs) if ccs else None


def _active_span(busy: dict[Timeline, Segments]) -> int:
    """Sum over devices of the time from their first op's start to their last op's end."""
    return sum(int(ends[-1] - starts[0]) for starts, ends in busy.values() if len(starts))


def _active_utilization(busy: dict[Timeline, Segments]) -> float | None:
    """Busy share of each device's active span (first op start to last op end)."""
    span = _active_span(busy)
    return sum(total(s) for s in busy.values()) / span if span else None


def _launch_overhead(
    profile: Profile, iterations: pd.DataFrame, busy: dict[Timeline, Segments], devices: int
) -> dict[str, object]:
    """Host-bound gap time over the analysed steps, else over each device's active span."""
    window = analysed(iterations)
    if len(window):
        gap = int(window["host_gap_ns"].sum())
        step = int(window["wall_ns"].sum()) * devices
        scope = "iterations"
    else:
        gap = int(profile.kernels["host_gap_ns"].sum() + profile.memops["host_gap_ns"].sum())
        step = _active_span(busy)
        scope = "active_span"
    return {
        "launch_overhead_ns": gap,
        "launch_overhead_pct": gap / step * 100.0 if step else None,
        "launch_overhead_scope": scope if step else None,
    }


def _compile_totals(ranges: pd.DataFrame) -> dict[str, int]:
    """Every compilation, wherever it fell (one before the first step is in no iteration)."""
    compiles = compile_ranges(ranges)
    wall = (compiles["end_ns"] - compiles["start_ns"]).clip(lower=0)
    return {"compile_count": len(compiles), "compile_wall_ns": int(wall.sum())}


def _outside_compile_warning(ranges: pd.DataFrame, iterations: pd.DataFrame) -> list[str]:
    compiles = compile_ranges(ranges)
    starts = compiles["start_ns"].to_numpy(dtype="int64")
    outside = ~in_iterations(starts, iterations)
    if not outside.any():
        return []
    ns = int((compiles["end_ns"] - compiles["start_ns"])[outside].clip(lower=0).sum())
    return [
        f"{int(outside.sum())} compilation(s), {ns / 1e6:.1f} ms, ran outside every "
        "iteration (before the first step): counted in compile_wall_ns, not in any step"
    ]


def _merged_ranks(profile: Profile, facts: RunFacts) -> list[str]:
    """A warning when iterations of several processes (ranks) are counted as one run."""
    ranges = profile.ranges
    ours = (ranges["name"] == ITERATION).to_numpy(dtype=bool) & (
        ranges["domain"] == DOMAIN
    ).to_numpy(dtype=bool)
    pids = sorted(int(pid) for pid in pd.unique(ranges["pid"].to_numpy()[ours]))
    if len(pids) < 2:
        return []
    ranks = dict(facts.ranks)
    who = ", ".join(f"rank {ranks[p]} (pid {p})" if p in ranks else f"pid {p}" for p in pids)
    return [f"{len(pids)} processes ran annotated iterations ({who}) and are analysed as one "
            "run here: iteration counts, step times and per-step figures mix the ranks; the "
            "command line writes one report per rank beside this one (rank<R>/, or pid<P>/ "
            "for a process that recorded no rank) and ranks_summary.csv, and the ranks table "
            "compares them"]  # fmt: skip


def _report_warnings(profile: Profile, iterations: pd.DataFrame) -> list[str]:
    out = []
    if profile.kernels.empty and profile.memops.empty:
        out.append("the profile holds no CUDA kernels or memory operations")
    if profile.ranges.empty:
        out.append("the profile holds no NVTX ranges: no per-layer or per-range times")
    if iterations.empty:
        # Guesses refused by the step test: one line names the candidates instead.
        out.append(profile.meta.key_range_note
                   or "no iterations found: step statistics cover the whole session")  # fmt: skip
    out += _outside_compile_warning(profile.ranges, iterations)
    return [*out, *_key_warnings(profile), *_compile_warnings(iterations)]



_RULES = {
    "numbered-ranges": "the script's own numbered ranges",
    "root-model-calls": "the calls of the root model (no optimizer steps: inference?)",
    "most-repeated": "the top-level range that repeats most",
}


# A training loop that updates its parameters by hand (``p.data.add_``): torch has no hook
# for that, and torch functions are not patched, so a step is one forward plus its backward.
NO_OPTIMIZER_STEPS = (
    "no optimizer step was seen: each step is one training forward of the model plus its "
    "backward, ending where the next starts (updates made by hand, e.g. p.data.add_, have no "
    "hook); name a step range of your own with --key-range REGEX if a step holds more"
)


def _key_warnings(profile: Profile) -> list[str]:
    """A guessed key range (iterations.GUESSED) says so, and how to choose another."""
    meta = profile.meta
    if meta.key_range_source == "forward-backward":
        return [NO_OPTIMIZER_STEPS]
    if meta.key_range_source not in GUESSED or meta.key_range is None:
        return []
    if meta.key_range_source == "numbered-ranges":
        regex = key_regex(profile.ranges["name"].astype("category").cat.categories,
                          meta.key_range)  # fmt: skip
    else:
        regex = "^" + re.escape(meta.key_range) + "$"
    return [
        f"iterations are the instances of {meta.key_range!r}, a guess "
        f"({_RULES[meta.key_range_source]}): pass --key-range REGEX to choose the step range, "
        f"e.g. --key-range '{regex}'"
    ]


def _compile_warnings(iterations: pd.DataFrame) -> list[str]:
    """Compiling iterations counted as warm-up (ingest/iterations.py) are named."""
    if iterations.empty or "compile_wall_ns" not in iterations:
        return []
    warm = iterations["warmup"].to_numpy(dtype=bool)
    compiles = iterations["compile_wall_ns"].to_numpy(dtype="int64") > 0
    out = []
    if (warm & compiles).any():
        which = iterations["iteration"][warm & compiles].tolist()
        shown = ", ".join(str(i) for i in which[:10]) + (", ..." if len(which) > 10 else "")
        out.append(
            f"iteration{'s' if len(which) > 1 else ''} {shown} compile (torch.compile): "
            "warm-up, left out of the step statistics (--iter-start/--iter-stop choose "
            "another window)"
        )
    steady = ~warm & compiles & iterations["in_window"].to_numpy(dtype=bool)
    if steady.any():
        out.append(
            f"{int(steady.sum())} analysed iteration(s) compile (recompilation: changing "
            "shapes or guards?): their compile time is in the step statistics (step_compile_*)"
        )
    return out
