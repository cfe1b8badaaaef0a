"""Advice: each rule compares one summary metric with thresholds from the registry.

Rules are small pure functions of the summary (and, for evidence, the layers table); each
returns at most one :class:`Advice`. Thresholds and citations live in
:data:`dlprof_lite.report.metrics.THRESHOLDS`, never here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

from dlprof_lite.durations import short
from dlprof_lite.report.collectives.advice import fsdp_exposed, slow_link
from dlprof_lite.report.frames import ancestors
from dlprof_lite.report.idle.advice import idle_advice
from dlprof_lite.report.layers.memory import input_bytes
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.ranks.advice import (
    exposed_text,
    pipeline_bubble,
    straggler_data,
    straggler_waits,
)
from dlprof_lite.report.summary import min_compute_capability
from dlprof_lite.report.summary_types import Advice, Summary, number
from dlprof_lite.report.units import bytes_text, of_scope
from dlprof_lite.rules.advice import THRESHOLDS, threshold

SEVERITY_ORDER = {"high": 0, "warn": 1, "info": 2}


def _f(value: object) -> float:
    """A measured number, 0 when it could not be measured."""
    return number(value) or 0.0


def _i(value: object) -> int:
    return int(_f(value))


def _graded(
    value: float | None, warn_key: str, high_key: str, *, below: bool = False
) -> tuple[str, str] | None:
    """``(severity, threshold key)`` for a value crossing warn or high; None when it does
    not, or when the value could not be measured."""
    if value is None:
        return None
    warn, high = threshold(warn_key), threshold(high_key)

    def crossed(t: float) -> bool:
        return value < t if below else value >= t

    if crossed(high):
        return "high", high_key
    if crossed(warn):
        return "warn", warn_key
    return None


def _make(
    problem: str, grade: tuple[str, str], evidence: str, rec: str, metric: str, value: float
) -> Advice:
    """An advice row; a ``*_high`` threshold also cites the rule its ``*_warn`` twin cites."""
    severity, key = grade
    t = THRESHOLDS[key]
    citation = t.citation
    twin = THRESHOLDS.get(key.replace("_high", "_warn"))
    if key.endswith("_high") and twin is not None:
        citation = f"{twin.citation}; the high threshold is a {t.citation}"
    return Advice(problem, severity, evidence, rec, metric, value, t.value, citation)


def _has_tensor_cores(summary: Summary) -> bool:
    """False when a GPU that ran work is older than Volta; True when none says so (unknown).

    Devices that ran no kernel or memop, and a compute capability of 0.0 (exports that list
    a placeholder device), do not count.
    """
    gpus = [g for g in summary.gpus if g.compute_capability not in (None, "0.0")]
    busy = [g for g in gpus if g.busy_ns]
    cc = min_compute_capability(busy or gpus)
    return cc is None or cc >= threshold("tc_min_compute_capability")


_AMP = (
    "Train with mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) (or float16 "
    "with torch.amp.GradScaler); for float32 matmuls on Ampere or newer allow TF32 with "
    "torch.set_float32_matmul_precision('high'); keep channel and GEMM sizes multiples of 8."
)


def tensor_cores(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    share = number(summary.tensor_cores.eligible_non_tc_share)
    if share is None or not _has_tensor_cores(summary):
        return None
    grade = _graded(share, "tc_nontc_share_warn", "tc_nontc_share_high")
    if grade is None:
        return None
    eligible = layers[layers["tc_eligible"].fillna(False).to_numpy(dtype=bool)]
    miss = eligible["tc_miss_gpu_ns"].rename("miss")
    top = eligible.assign(miss=miss).nlargest(3, "miss")
    names = ", ".join(
        f"{r['layer']} ({r['type']}) {short(r['miss'])}" for r in top.to_dict("records")
    )
    evidence = (
        f"{short(_f(summary.tensor_cores.eligible_non_tc_ns))} ({share:.0%} of kernel time) in "
        f"Tensor-Core-eligible layers ran on GEMM/convolution kernels without Tensor Cores; "
        f"largest: {names}"
    )
    return _make(
        "Tensor Cores unused by eligible layers",
        grade,
        evidence,
        _AMP,
        "eligible_non_tc_share",
        share,
    )


def fp32_gemm(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """FP32 GEMM/conv time from kernel names alone: for profiles whose layers cannot tell
    (no module ranges, or modules of no eligible type); silent when the layer rule spoke."""
    share = number(summary.tensor_cores.fp32_gemm_share)
    if share is None or not _has_tensor_cores(summary):
        return None
    grade = _graded(share, "fp32_gemm_share_warn", "fp32_gemm_share_high")
    if grade is None or tensor_cores(summary, layers) is not None:
        return None
    top = ", ".join(f"{k.name} {short(k.gpu_ns)}" for k in summary.fp32_gemm_kernels)
    evidence = (
        f"{short(_f(summary.tensor_cores.fp32_gemm_ns))} ({share:.0%} of kernel time) in FP32 GEMM/"
        f"convolution kernels on CUDA cores (from kernel names); largest: {top}"
    )
    return _make(
        "FP32 matrix math without Tensor Cores", grade, evidence, _AMP, "fp32_gemm_share", share
    )


def launch_bound(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    pct = number(summary.launch_overhead.launch_overhead_pct)
    grade = _graded(pct, "launch_overhead_warn_pct", "launch_overhead_high_pct")
    if pct is None or grade is None:
        return None
    evidence = (
        f"the GPU waited {short(_f(summary.launch_overhead.launch_overhead_ns))} for the CPU to "
        "launch work, "
        f"{pct:.1f}% of {of_scope(summary.launch_overhead.launch_overhead_scope)}"
    )
    phases = [(p, summary.step.host_gap_pct(p)) for p in PHASE_COLUMNS]
    if any(v for _, v in phases):
        evidence += "; by phase: " + ", ".join(f"{p} {v:.1f}%" for p, v in phases if v)
    if len(layers) and layers["host_gap_ns"].sum() > 0:
        top = layers.nlargest(3, "host_gap_ns")
        evidence += "; most in: " + ", ".join(
            f"{r['layer']} {short(r['host_gap_ns'])}"
            for r in top.to_dict("records")
            if r["host_gap_ns"] > 0
        )
    rec = (
        "Cut per-launch CPU cost: capture the step in CUDA graphs (torch.cuda.graphs or "
        "torch.compile(mode='reduce-overhead')), fuse small ops with torch.compile, use fused/"
        "foreach optimizers, or raise the batch size so each kernel does more work."
    )
    return _make(
        "Launch-bound: the GPU waits for the CPU", grade, evidence, rec, "launch_overhead_pct", pct
    )


def data_stall(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    pct = number(summary.step.step_data_wall_pct)
    grade = _graded(pct, "data_stall_warn_pct", "data_stall_high_pct")
    if pct is None or grade is None:
        return None
    evidence = (
        f"{short(_f(summary.step.step_data_wall_ns))} per step in data loading, "
        f"{pct:.1f}% of the mean step"
    )
    loading = summary.data_loading
    settings, workers = loading.dataloader_settings, number(loading.dataloader_num_workers)
    if settings:
        evidence += f"; DataLoader: {settings}"
    else:
        evidence += "; the DataLoader's num_workers is unknown (no dataloader facts recorded)"
    if workers is not None and workers > 0:
        # Already parallel: more of the same, or less work per batch, not "num_workers>0".
        rec = (
            f"The DataLoader already uses num_workers={int(workers)}: raise it while CPU "
            f"cores are idle{_loader_flags(summary)}, raise "
            "prefetch_factor (default 2); make each batch cheaper (decode and augment once, "
            "or on the GPU)."
        )
    else:
        now = "num_workers=0 now" if workers is not None else "num_workers unknown"
        rec = (
            f"Load data in parallel with compute ({now}): DataLoader(num_workers>0, "
            "pin_memory=True, persistent_workers=True, prefetch_factor>=2); move decoding "
            "and augmentation out of the training process or onto the GPU."
        )
    return _make("Data loading stalls the step", grade, evidence, rec, "step_data_wall_pct", pct)


def _loader_flags(summary: Summary) -> str:
    """``, set pin_memory=True (now False)``... for the switches some DataLoader has off;
    pinning only where the profile has GPU work (it speeds host-to-device copies)."""
    loaders = summary.dataloaders
    switches = (
        ("pin_memory", "persistent_workers") if _i(summary.system.devices)
        else ("persistent_workers",)
    )
    flags = [
        f", set {flag}=True (now False)"
        for flag in switches
        if any(d.get(flag) is False for d in loaders)
    ]
    return "".join(flags)


def annotation_cost(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    pct = number(summary.annotation_cost.annotation_cost_pct)
    if pct is None or pct < threshold("annotation_cost_warn_pct"):
        return None
    evidence = (
        "the module annotation added an estimated "
        f"{short(_f(summary.annotation_cost.annotation_cost_ns))} "
        f"of host time per step, {pct:.1f}% of the mean step (module calls x measured cost "
        "per call / steps): host and per-layer wall times include it"
    )
    rec = (
        "Profile with fewer module ranges: --depth N (annotate modules down to depth N) or "
        "--annotate phases; compare step times with and without annotation."
    )
    return _make(
        "Annotation overhead inflates host times",
        ("warn", "annotation_cost_warn_pct"),
        evidence,
        rec,
        "annotation_cost_pct",
        pct,
    )


def folded_modules(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """The modules the annotation folded after warm-up (too short to time): which, why, and
    how to keep them (rules/folding.py)."""
    if "folded_call_ns" not in layers.columns:
        return None
    calls = pd.to_numeric(layers["folded_call_ns"])
    folded = calls.notna().to_numpy(dtype=bool)
    if not folded.any():
        return None
    names = [str(n) for n in layers.loc[folded, "layer"]]
    shown = ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED} more"
                                         if len(names) > _NAMED else "")  # fmt: skip
    low, high = float(calls[folded].min()), float(calls[folded].max())
    evidence = (
        f"{len(names)} modules took {short(low)} to {short(high)} per forward call (median, "
        "warm-up "
        f"step), below {threshold('fold_factor'):g}x the measured cost of annotating one call: "
        f"after warm-up they wrote no ranges, their time is in their parent's self time "
        f"(layers folded_call_ns): {shown}"
    )
    rec = (
        "To time them anyway: --annotate modules-all (every module, at the annotation's cost) "
        "or --depth N (exactly the modules down to depth N, none folded)."
    )
    return _make("Modules too short to time were folded into their parent",
                 ("info", "fold_factor"), evidence, rec, "folded_call_ns", high)  # fmt: skip


_NAMED = 6  # folded modules named in the advice


def iteration_variance(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    cv = number(summary.iterations.iterations_cv)
    count = _i(summary.window.iterations_analysed)
    if (
        cv is None
        or count < threshold("iteration_min_count")
        or cv < threshold("iteration_cv_warn")
    ):
        return None
    evidence = (
        f"{count} iterations: mean {short(_f(summary.iterations.iterations_mean_ns))}, std "
        f"{short(_f(summary.iterations.iterations_std_ns))} (cv {cv:.0%}), "
        f"p90 {short(_f(summary.iterations.iterations_p90_ns))}"
    )
    start, stop = summary.iterations.steady_start, summary.iterations.steady_stop
    tolerance = f"{threshold('steady_tolerance'):.0%}"
    if start is not None:
        window = (
            f"Measure a steady window: --iter-start {start} --iter-stop {stop} (the longest "
            f"run within {tolerance} of the median)"
        )
    else:
        window = f"No run of iterations stays within {tolerance} of the median: profile more"
    rec = (
        f"{window}; look for periodic work in the slow iterations (evaluation, checkpointing, "
        "logging, garbage collection, recompilation)."
    )
    return _make(
        "Iteration times vary", ("warn", "iteration_cv_warn"), evidence, rec, "iterations_cv", cv
    )


def low_utilization(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    metric = (
        "step_utilization"
        if summary.step.step_utilization is not None
        else ("active_utilization")
    )
    util = number(summary.step.step_utilization if metric == "step_utilization"
                  else summary.totals.active_utilization)  # fmt: skip
    if util is None or not _i(summary.system.devices):  # no GPU work at all: nothing to judge
        return None
    grade = _graded(util, "gpu_util_warn", "gpu_util_high", below=True)
    if grade is None:
        return None
    scope = "iterations" if metric == "step_utilization" else "active_span"
    evidence = f"the GPU was busy {util:.0%} of {of_scope(scope)}"
    rec = (
        "Remove host-side stalls first (see the other advice: data loading, synchronization, "
        "launch overhead), then raise the batch size or overlap independent work on streams."
    )
    return _make("Low GPU utilization", grade, evidence, rec, metric, util)


def _count_rule(count_value: object, ns_value: object, tkey: str) -> tuple[int, int] | None:
    count = _i(count_value)
    if count < threshold(tkey):
        return None
    return count, _i(ns_value)


def sync_memcpy(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    sync = summary.host_sync
    found = _count_rule(sync.sync_memcpy_count, sync.sync_memcpy_ns, "sync_memcpy_min_count")
    if found is None:
        return None
    count, ns = found
    small = int(threshold("sync_memcpy_small_htod_bytes"))
    evidence = (
        f"{count} synchronous cudaMemcpy calls ({short(ns)} of GPU copy time), not counting "
        f"device-to-device copies and host-to-device copies of {small} B or less"
    )
    rec = (
        "Use asynchronous copies: tensor.to('cuda', non_blocking=True) from pinned memory; avoid "
        ".item(), .cpu() and .numpy() on CUDA tensors inside the step."
    )
    return _make(
        "Synchronous memory copies block the host",
        ("warn", "sync_memcpy_min_count"),
        evidence,
        rec,
        "sync_memcpy_count",
        count,
    )


def pageable_memory(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    sync = summary.host_sync
    found = _count_rule(sync.pageable_async_count, sync.pageable_async_ns,
                        "pageable_async_min_count")  # fmt: skip
    if found is None:
        return None
    count, ns = found
    evidence = f"{count} asynchronous copies from or to pageable host memory ({short(ns)})"
    rec = (
        "Pin host buffers so async copies stay asynchronous: DataLoader(pin_memory=True) or "
        "tensor.pin_memory(), then .to('cuda', non_blocking=True)."
    )
    return _make(
        "Async copies on pageable memory run synchronously",
        ("warn", "pageable_async_min_count"),
        evidence,
        rec,
        "pageable_async_count",
        count,
    )


def sync_calls(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    calls = _i(summary.host_sync.sync_api_calls)
    if calls == 0:
        return None
    pct = _f(summary.host_sync.sync_api_pct)
    warn = pct >= threshold("sync_api_warn_pct")
    evidence = (
        f"{calls} cudaDeviceSynchronize/cudaStreamSynchronize calls, "
        f"{short(_f(summary.host_sync.sync_api_ns))} in total, some thread in one "
        f"{pct:.1f}% of {of_scope(summary.host_sync.sync_api_scope)}"
    )
    rec = (
        "Avoid host synchronization inside the step: .item(), .cpu(), printing CUDA tensors, "
        "torch.cuda.synchronize(); record CUDA events or log every N steps instead."
    )
    grade = ("warn" if warn else "info", "sync_api_warn_pct")
    return _make("Host synchronization calls", grade, evidence, rec, "sync_api_pct", pct)


def tiny_kernels(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    median = number(summary.totals.kernel_median_ns)
    count = _i(summary.totals.kernel_count)
    if median is None or count < threshold("tiny_kernel_min_count"):
        return None
    if median >= threshold("tiny_kernel_median_ns"):
        return None
    brief = _i(summary.totals.short_launches)
    evidence = (
        f"median kernel runs {short(median)} over {count} kernels; {brief} ({brief / count:.0%}) "
        "ran shorter than their launch call"
    )
    rec = (
        "Give each launch more work: fuse elementwise chains (torch.compile), use fused or "
        "foreach optimizers, larger batches; CUDA graphs remove the per-launch CPU cost."
    )
    pct = _f(summary.launch_overhead.launch_overhead_pct)
    severity = "warn" if pct >= threshold("launch_overhead_warn_pct") else "info"
    return _make(
        "Many tiny kernels",
        (severity, "tiny_kernel_median_ns"),
        evidence,
        rec,
        "kernel_median_ns",
        median,
    )


def exposed_communication(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """Communication kernels no compute overlaps (report/ranks/table.py), per step."""
    pct = summary.communication.exposed_comm_pct
    grade = _graded(pct, "exposed_comm_warn_pct", "exposed_comm_high_pct")
    if pct is None or grade is None:
        return None
    problem, evidence, rec = exposed_text(summary.communication)
    return _make(problem, grade, evidence, rec, "exposed_comm_pct", pct)


def low_mfu_layers(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """Layers with enough work (a share of the step) running far below the GPU's peak for
    the FLOPs they do (report/layers/flops.py), with the likely reasons per layer."""
    step = number(summary.iterations.iterations_mean_ns)
    if layers.empty or "mfu" not in layers.columns or not step:
        return None
    mfu = pd.to_numeric(layers["mfu"], errors="coerce")
    time = (pd.to_numeric(layers["step_forward_gpu_ns"], errors="coerce").fillna(0)
            + pd.to_numeric(layers["step_backward_gpu_ns"], errors="coerce").fillna(0))  # fmt: skip
    share = time / step * 100.0
    low = layers.assign(_mfu=mfu, _share=share)[
        ((mfu * 100 < threshold("layer_mfu_low_pct"))
         & (share > threshold("layer_mfu_min_step_pct"))
         & (pd.to_numeric(layers["step_flops"], errors="coerce") > 0)).to_numpy(dtype=bool)
    ]  # fmt: skip
    if low.empty:
        return None
    low = low.sort_values("_share", ascending=False).head(3)
    parts = [f"{r['layer']} ({r['type']}) MFU {r['_mfu']:.1%}, {r['_share']:.0f}% of the step"
             f"{_mfu_reasons(r, summary)}" for r in low.to_dict("records")]  # fmt: skip
    worst = float(low["_mfu"].min()) * 100.0
    rec = ("Give each matmul more work: a larger batch or sequence per step, wider layers in "
           "multiples of 64; run matmuls in BF16/FP16 (autocast) or TF32; fuse small ops and "
           "cut launches (torch.compile, CUDA graphs). Layers shows step_flops and mfu.")
    evidence = (f"{len(low)} layer(s) doing counted work far below {summary.cost.mfu_gpu}'s "
                "dense peak: " + "; ".join(parts))
    return _make("Layers slow for the work they do", ("warn", "layer_mfu_low_pct"), evidence,
                 rec, "mfu", worst)  # fmt: skip


def _mfu_reasons(row: Mapping[Hashable, object], summary: Summary) -> str:
    """The likely reasons of one layer's low MFU, from its own columns."""
    reasons = []
    dims = [int(p) for p in str(row.get("in_shape") or "").split(",")[0].split("x")
            if p.strip().isdigit()]  # fmt: skip
    if dims and dims[-1] < threshold("layer_small_dim"):
        reasons.append(f"small dims (input {row.get('in_shape')})")
    dtypes = str(row.get("flops_dtype") or "")
    if "fp32" in dtypes and _has_tensor_cores(summary):
        reasons.append(f"FP32 math on a Tensor Core GPU ({dtypes})")
    kernels, gpu = _f(row.get("kernels")), _f(row.get("gpu_ns"))
    if kernels and gpu / kernels < threshold("layer_short_kernel_ns"):
        reasons.append(f"launch-bound ({short(gpu / kernels)} per kernel)")
    return f" ({'; '.join(reasons)})" if reasons else ""


def activation_memory(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """Saved activations a large share of the tensor bytes, and a few layers (non-overlapping
    subtrees) whose checkpointing would free most of them: each layer's saved activations,
    inclusive, less its input, which a checkpoint keeps."""
    m = summary.memory
    saved = number(m.memory_saved_bytes)
    if not saved or layers.empty or "saved_inclusive_bytes" not in layers.columns:
        return None
    total = saved + sum(number(v) or 0.0 for v in (m.memory_param_bytes, m.memory_gradient_bytes,
                                                    m.memory_optimizer_bytes))  # fmt: skip
    share = saved / total
    if share < threshold("activation_memory_share"):
        return None
    inclusive = pd.to_numeric(layers["saved_inclusive_bytes"], errors="coerce").fillna(0)
    kept = [input_bytes(shape, dtype) or 0.0
            for shape, dtype in zip(layers["in_shape"], layers["in_dtype"], strict=True)]
    freed = (inclusive - pd.Series(kept, index=layers.index)).clip(lower=0)
    picked = _largest_subtrees(layers.assign(_freed=freed))
    frees = sum(float(r["_freed"]) for r in picked)
    if not picked or frees / saved < threshold("activation_top_share"):
        return None
    parts = [f"{r['layer']} ({r['type']}) saves {bytes_text(r['saved_inclusive_bytes'])}, "
             f"checkpointing it frees about {bytes_text(r['_freed'])}" for r in picked]
    evidence = (f"saved activations are {bytes_text(saved)}, {share:.0%} of the tensor bytes; "
                f"checkpointing {len(picked)} layer(s) would free {frees / saved:.0%} of them: "
                + "; ".join(parts))  # fmt: skip
    rec = ("Checkpoint those layers (torch.utils.checkpoint.checkpoint(layer, x, "
           "use_reentrant=False), or the framework's gradient_checkpointing_enable()): their "
           "activations are recomputed in backward instead of kept, for about one more forward "
           "of them per step.")
    return _make("Activation memory held by a few layers", ("info", "activation_top_share"),
                 evidence, rec, "memory_saved_bytes", saved)  # fmt: skip


def _largest_subtrees(layers: pd.DataFrame, count: int = 3) -> list[dict[Hashable, Any]]:
    """The non-root layers whose checkpointing frees the most (``_freed``), none inside
    another picked one."""
    parent = dict(zip(layers["layer"].astype(str), layers["parent"], strict=True))
    ranked = layers[layers["parent"].notna().to_numpy(bool)]
    picked: list[dict[Hashable, Any]] = []
    chosen: set[str] = set()
    for row in ranked.sort_values("_freed", ascending=False).to_dict("records"):
        if row["_freed"] <= 0 or len(picked) == count:
            break
        name = str(row["layer"])
        if chosen & set(ancestors(parent, name)) or any(name in ancestors(parent, c)
                                                        for c in chosen):  # fmt: skip
            continue  # inside a picked layer, or holding one
        chosen.add(name)
        picked.append(row)
    return picked


Rule = Callable[[Summary, pd.DataFrame], Advice | None]
RULES: tuple[Rule, ...] = (
    tensor_cores,
    fp32_gemm,
    launch_bound,
    data_stall,
    annotation_cost,
    folded_modules,
    low_utilization,
    iteration_variance,
    sync_memcpy,
    pageable_memory,
    sync_calls,
    tiny_kernels,
    low_mfu_layers,
    activation_memory,
    exposed_communication,
    straggler_data,
    straggler_waits,
    pipeline_bubble,
)


def advise(
    summary: Summary, layers: pd.DataFrame, idle: pd.DataFrame | None = None,
    collective_ops: pd.DataFrame | None = None, collective_layers: pd.DataFrame | None = None,
) -> list[Advice]:  # fmt: skip
    """Every rule's finding, most severe first (rule order within a severity); ``idle``:
    the idle table, whose causes have findings of their own (report/idle/advice.py);
    ``collective_ops`` and ``collective_layers``: the collectives per op and size and per
    layer (report/collectives/advice.py)."""
    found = [a for rule in RULES if (a := rule(summary, layers)) is not None]
    if idle is not None:
        found += idle_advice(summary, idle)
    if collective_ops is not None:
        found += slow_link(summary, collective_ops)
    if collective_layers is not None:
        found += fsdp_exposed(summary, collective_layers)
    return sorted(found, key=lambda a: SEVERITY_ORDER[a.severity])


def advice_rows(advice: list[Advice]) -> list[dict[str, object]]:
    return [asdict(a) for a in advice]
