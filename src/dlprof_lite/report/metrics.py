"""The one registry of report columns, summary metrics and advice thresholds.

Every number dlprof-lite reports is declared here once, with a one-line definition that the
CSV/JSON writers carry into every report (``definitions``) and the tests read back. Every
threshold the advice uses is declared here once too, with its citation: where a number comes
from another tool we name the tool and the rule; where it is our own choice we say
"dlprof-lite choice" rather than borrow an authority.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlprof_lite.report.summary_types import SUMMARY_COLUMNS
from dlprof_lite.rules.advice import THRESHOLDS
from dlprof_lite.rules.critical import PART_DOCS
from dlprof_lite.rules.idle import (
    CAUSE_DOCS,
    DEVICE,
    DEVICE_CAUSES,
    HOST,
    HOST_CAUSES,
    cause_column,
)
from dlprof_lite.rules.names import PHASES
from dlprof_lite.rules.peaks import DTYPES, PEAKS

SCHEMA = "dlprof-lite/1"
# Columns and summary fields added to SCHEMA since its first release: a report folder or a
# stored run written before lacks them, and reads back with them empty (None), never refused
# (`compare` against last month's runs must work). Any other missing column is refused.
ADDED_LATER: dict[str, frozenset[str]] = {
    "summary": frozenset({
        "event_span_ns", "utilization_scope", "tc_unknown_ns", "tc_unknown_share",
        "tc_inferred_ns", "launch_coverage", "iterations_p10_ns", "between_steps_ns",
        "after_training_ns", "sync_api_scope", "timeline_start_ns", "timeline_end_ns",
        "exposed_comm_scope", "model_flops_per_step", "model_flops_per_s", "mfu", "mfu_gpu",
        "memory_param_bytes", "memory_gradient_bytes", "memory_optimizer_bytes",
        "memory_saved_bytes", "memory_gpu_peak_bytes", "memory_gpu_unexplained_bytes",
        "memory_note", "straggler_waited_ns", "straggler_layer",
        "straggler_layer_ns", "pipeline_bubble_pct", *(f"idle_{c}_ns" for c in DEVICE_CAUSES),
        *(f"host_{c}_ns" for c in HOST_CAUSES),
    }),
    "layers": frozenset({"wrapper", "folded_call_ns", "tc_miss_gpu_ns"}),  # and cost, below
    "iterations": frozenset({"between_before_ns"}),
    "timeline": frozenset({"track"}),
    "ranks": frozenset({"step_coll_wait_ns", "step_waited_for_ns", "bubble_pct"}),
}  # fmt: skip
# Cause names are rules/idle.py's; the summary's fields are the causes' columns.


@dataclass(frozen=True)
class ReportColumn:
    name: str
    unit: str
    doc: str


def _cols(*specs: tuple[str, str, str]) -> tuple[ReportColumn, ...]:
    return tuple(ReportColumn(*spec) for spec in specs)


KERNEL_REPORT = _cols(
    ("name", "", "kernel name (demangled); one row per name"),
    ("short_name", "", "bare kernel name"),
    ("instances", "", "number of executions"),
    ("total_ns", "ns", "sum of GPU durations"),
    ("avg_ns", "ns", "mean GPU duration"),
    ("median_ns", "ns", "median GPU duration"),
    ("min_ns", "ns", "shortest GPU duration"),
    ("max_ns", "ns", "longest GPU duration"),
    ("std_ns", "ns", "sample standard deviation (ddof=1, 0 for one instance), as nsys gpukernsum"),
    ("pct_kernel_time", "%", "total_ns as a percentage of all kernels' total GPU time"),
    ("tc_class", "", "tc, no_tc or unknown, from the Tensor Core rule table"),
    ("uses_tensor_cores", "", "true when tc_class is tc"),
    ("tc_rule", "", "id of the Tensor Core rule that classified the name"),
    ("comm", "", "the collective a communication kernel runs (NCCL/RCCL kernel names, "
     "rules/comm.py), e.g. AllReduce; empty for other kernels"),
    ("api_name", "", "most frequent launch API call of this kernel"),
    ("avg_api_ns", "ns", "mean launch API call duration (api_end - api_start)"),
    ("avg_queue_ns", "ns", "mean time from launch call end to GPU start, where >= 0"),
    ("short_launches", "", "executions whose GPU duration is below their launch call's (HTA)"),
    ("host_gap_ns", "ns", "sum of GPU idle time before each execution that the CPU caused"),
)

RANGE_REPORT = _cols(
    (
        "path",
        "",
        "NVTX range names from the top-level range down, joined by '/'; past 13 names only the "
        "first 4 and last 8 remain, around '…'; past 1000 characters, the first and last 500",
    ),
    ("path_id", "", "id of this row's chain of range names and domains (parents have lower ids)"),
    ("parent_path_id", "", "path_id of the enclosing path's row (-1: top level); rebuilds a path"),
    ("depth", "", "nesting depth of the path: 0 at top level, depth + 1 names in all"),
    ("name", "", "range name (last path element)"),
    ("domain", "", "NVTX domain ('' for the default domain)"),
    ("style", "", "push_pop or start_end"),
    ("instances", "", "number of ranges with this path_id"),
    ("wall_ns", "ns", "sum of range durations (end - start)"),
    ("gpu_ns", "ns", "GPU time of kernels launched inside the range (inclusive, nvtxkernsum)"),
    ("self_gpu_ns", "ns", "GPU time of kernels whose innermost enclosing range is this one"),
    ("memop_ns", "ns", "GPU time of memcpy/memset launched inside the range (inclusive)"),
    ("projected_ns", "ns", "sum over instances of first GPU start to last GPU end (nvtxgpuproj)"),
    ("kernels", "", "kernel executions launched inside the range (inclusive)"),
    ("memops", "", "memcpy/memset operations launched inside the range (inclusive)"),
    ("tc_gpu_ns", "ns", "GPU time of Tensor Core kernels launched inside the range (inclusive)"),
    ("tc_share", "", "tc_gpu_ns / gpu_ns; empty without kernels"),
)

_STEP = "across the window's steps (0 in a step it did not run; percentiles linear)"
_INCL = "inclusive: its own kernels and those of every module inside it"
LAYER_COLUMNS = _cols(
    ("order", "", "network order: 1 = first forward to start within a step (the first window "
     "step that runs it); layers without a forward call last"),
    ("layer", "", "module qualified name, from its root (model, student, teacher, model#2, ...)"),
    ("parent", "", "the layer whose module range encloses its first forward call (empty: a root)"),
    ("type", "", "module class name, empty when only known from kernel attribution"),
    ("calls", "", "forward calls (fwd: ranges), recomputes apart; empty when only from kernels"),
    ("calls_per_step", "", "forward calls per step, mean over the window's steps"),
    ("forward_wall_ns", "ns", "sum of the module's forward range durations (inclusive)"),
    ("backward_wall_ns", "ns", "sum of the module's backward range durations (inclusive)"),
    ("step_forward_wall_ns", "ns", "forward_wall_ns per step: mean " + _STEP),
    ("step_forward_wall_median_ns", "ns", "forward_wall_ns per step: median " + _STEP),
    ("step_forward_wall_p90_ns", "ns", "forward_wall_ns per step: 90th percentile " + _STEP),
    ("step_backward_wall_ns", "ns", "backward_wall_ns per step: mean " + _STEP),
    ("step_backward_wall_median_ns", "ns", "backward_wall_ns per step: median " + _STEP),
    ("step_backward_wall_p90_ns", "ns", "backward_wall_ns per step: 90th percentile " + _STEP),
    ("self_forward_wall_ns", "ns", "forward range time not covered by a child module's forward "
     "range (self)"),
    ("self_backward_wall_ns", "ns", "backward range time not covered by a child module's "
     "backward range (self)"),
    ("step_self_wall_ns", "ns", "self forward + self backward wall time per step, mean " + _STEP),
    ("step_self_forward_wall_median_ns", "ns", "self_forward_wall_ns per step: median " + _STEP),
    ("step_self_backward_wall_median_ns", "ns", "self_backward_wall_ns per step: median " + _STEP),
    ("forward_gpu_ns", "ns", "GPU time of forward kernels, " + _INCL),
    ("backward_gpu_ns", "ns", "GPU time of backward kernels, " + _INCL),
    ("step_forward_gpu_ns", "ns", "forward_gpu_ns per step: mean " + _STEP),
    ("step_forward_gpu_median_ns", "ns", "forward_gpu_ns per step: median " + _STEP),
    ("step_forward_gpu_p90_ns", "ns", "forward_gpu_ns per step: 90th percentile " + _STEP),
    ("step_backward_gpu_ns", "ns", "backward_gpu_ns per step: mean " + _STEP),
    ("step_backward_gpu_median_ns", "ns", "backward_gpu_ns per step: median " + _STEP),
    ("step_backward_gpu_p90_ns", "ns", "backward_gpu_ns per step: 90th percentile " + _STEP),
    ("self_forward_gpu_ns", "ns", "GPU time of forward kernels attributed to this module itself "
     "(innermost module), not to a module inside it"),
    ("self_backward_gpu_ns", "ns", "GPU time of backward kernels attributed to this module itself"),
    ("step_self_gpu_ns", "ns", "gpu_ns (own kernels, any direction) per step, mean " + _STEP),
    ("step_self_forward_gpu_median_ns", "ns", "self_forward_gpu_ns per step: median " + _STEP),
    ("step_self_backward_gpu_median_ns", "ns", "self_backward_gpu_ns per step: median " + _STEP),
    ("recompute_calls", "", "forward recomputations in a backward (activation checkpointing)"),
    ("recompute_wall_ns", "ns", "sum of its recompute range durations (inside the backward)"),
    ("recompute_gpu_ns", "ns", "GPU time of kernels its recomputations launched (backward "
     "phase), " + _INCL),
    ("gpu_ns", "ns", "GPU time of its own kernels, any direction (self: those of modules inside "
     "it are theirs)"),
    ("kernels", "", "kernel executions attributed to this module itself"),
    ("tc_gpu_ns", "ns", "GPU time of its own Tensor Core kernels"),
    ("tc_share", "", "tc_gpu_ns / gpu_ns; empty without kernels"),
    ("tc_eligible", "", "module type can use Tensor Cores (conv, linear, matmul, attention, RNN)"),
    ("tc_miss_gpu_ns", "ns", "GPU time of its own GEMM and convolution kernels that use no Tensor "
     "Cores (not the layout, cast and copy kernels around them: rules/gemm.py is_matmul_kernel)"),
    ("host_gap_ns", "ns", "GPU idle time the CPU caused before this module's own kernels"),
)  # fmt: skip

# What each layer ran (report/layers/kernels.py: layer_implementations), merged into the
# layers table on ``layer``. Own kernels: those whose innermost module is the layer.
LAYER_IMPLEMENTATION_REPORT = _cols(
    ("device", "", "gpu: it or a module inside it ran kernels, or its inputs were on a CUDA "
     "device; cpu: neither (CPU-only run, CPU op); mixed: kernels, but inputs on the CPU"),
    ("distinct_kernels", "", "distinct kernel names among its own kernels"),
    ("top_kernels", "", "its 3 largest own kernels: name, share of their GPU time, name verdict "
     "(tc, no tc, tc? = the name cannot tell, part tc), then '+N more'"),
    ("in_shape", "", "shapes of its first call's tensor inputs (module fact), e.g. 8x3x32x32"),
    ("in_dtype", "", "dtype of its first call's first tensor input"),
    ("dtype", "", "compute dtype: conv/linear/matmul/attention/RNN layers the autocast dtype "
     "when on (not for float64), else their parameters', else their input's; other layers "
     "parameters', else input's"),
    ("tc_inferred", "", "'tc (inferred)': own kernels whose names cannot tell (Triton, XLA, "
     "bare CUTLASS) in a matmul-class layer, or named as GEMMs (Inductor triton_tem_), run in "
     "FP16/BF16/FP8 or TF32-allowed FP32 on a GPU with Tensor Cores for it; name verdicts "
     "stay in top_kernels"),
    ("wrapper", "", "wrappers its model ran in, outermost first, left out of the layer name "
     "(DistributedDataParallel, FullyShardedDataParallel, fully_shard, torch.compile, "
     "Lightning, Fabric, DeepSpeed; module fact); empty when none"),
)  # fmt: skip

# DDP's gradient all-reduce per layer (report/layers/buckets.py), merged into the layers table.
LAYER_GRAD_SYNC_REPORT = _cols(
    ("grad_bytes", "B", "bytes of its own parameters' gradients that DDP all-reduces each step "
     "(one rank); empty when no DDP bucket was seen carrying them"),
    ("grad_buckets", "", "indices of the DDP buckets carrying its gradients (DDP's buckets "
     "after its last rebuild)"),
    ("grad_sync_ns", "ns", "GPU time of DDP's gradient all-reduce (the collective and its "
     "averaging) for the buckets carrying its gradients, each bucket's time shared among its "
     "layers by gradient bytes; in none of its GPU columns"),
    ("step_grad_sync_ns", "ns", "grad_sync_ns per step, mean " + _STEP),
)  # fmt: skip

# Modules the annotation folded after warm-up (report/layers/folded.py, rules/folding.py).
LAYER_FOLD_REPORT = _cols(
    ("folded_call_ns", "ns", "a module the annotation folded after the warm-up step (too short "
     "to time): its median forward call then, below fold_factor x the measured per-call "
     "annotation cost; its later calls are in its parent's self time (a row without calls "
     "when the window holds none); empty: not folded"),
)

# Cost per layer (report/layers/flops.py): FLOPs from the annotation's count on fake tensors.
_FLOP = ("FLOPs as torch's FlopCounterMode counts them (matmul, convolution, attention; a "
         "multiply-add = 2), on fake tensors of the recorded input shapes, plus formulas for "
         "CPU attention and recurrent layers; elementwise ops count 0")
LAYER_FLOPS_REPORT = _cols(
    ("step_flops", "FLOP", "forward + backward FLOPs per step, inclusive (its children's too), "
     "mean " + _STEP + "; " + _FLOP + "; empty: not counted or unknown (flops_note)"),
    ("step_forward_flops", "FLOP", "forward FLOPs per step, inclusive, mean " + _STEP),
    ("step_backward_flops", "FLOP", "backward FLOPs per step, inclusive (input and weight "
     "gradients as the call's inputs and parameters required them), mean " + _STEP),
    ("step_self_flops", "FLOP", "forward + backward FLOPs per step of its own ops: inclusive "
     "less those of the annotated module calls inside it"),
    ("flops_per_call", "FLOP", "step_flops / calls_per_step: FLOPs of one forward call and its "
     "backward"),
    ("flops_dtype", "", "compute dtypes of its counted ops by FLOPs (fp32, tf32 where torch "
     "allows TF32, fp16, bf16, fp8; autocast as it was), e.g. 'bf16' or 'fp32 80%, bf16 20%'"),
    ("achieved_flops_per_s", "FLOP/s", "step_flops / its forward + backward GPU time per step "
     "(inclusive, recomputation not counted); a CPU-only layer: over its wall time"),
    ("achieved_forward_flops_per_s", "FLOP/s", "step_forward_flops / its forward GPU time per "
     "step (wall time on a CPU-only layer)"),
    ("achieved_backward_flops_per_s", "FLOP/s", "step_backward_flops / its backward GPU time "
     "per step (wall time on a CPU-only layer)"),
    ("flops_rate_basis", "", "gpu: achieved rates over GPU time; wall: over wall time (no "
     "kernels: a CPU-only layer, no MFU)"),
    ("mfu", "", "model FLOPs utilisation: the time its FLOPs take at the GPU's dense peak for "
     "each compute dtype (rules/peaks.py: the GPU that ran the most kernel time), over its "
     "forward + backward GPU time per step; above 1 is an attribution error (flops_note); "
     "empty: no GPU time, an unknown GPU or dtype peak"),
    ("flops_note", "", "why FLOPs are empty ('unknown: ...'), 'estimated: ...' when some root "
     "calls' input shapes were past the counted ones, or an MFU above 100 %"),
)  # fmt: skip

# Memory per layer (report/layers/memory.py): the annotation's bytes of the real tensors.
_OWN = "its own (not its children's), each storage counted once in the process"
LAYER_MEMORY_REPORT = _cols(
    ("param_bytes", "B", "bytes of the parameters it holds (" + _OWN + "; a tied weight: its "
     "first holder's), at its optimizer's first step"),
    ("gradient_bytes", "B", "bytes of those parameters' gradients at the end of their "
     "optimizer's first step"),
    ("optimizer_bytes", "B", "bytes of the optimizer state of those parameters (Adam's moments, "
     "momentum buffers, step tensors) after the optimizer's first step"),
    ("memory_tied", "", "'tied to <layer>': it holds a parameter that layer owns (counted there)"),
    ("saved_bytes", "B", "activations autograd saved for backward while it was the innermost "
     "annotated module running, in the first analysed step (saved_tensors_hooks; " + _OWN
     + "; parameters are not activations; tensors a custom autograd.Function keeps on ctx "
     "outside save_for_backward are not seen)"),
    ("saved_inclusive_bytes", "B", "saved_bytes of it and every layer inside it: what "
     "activation checkpointing it would stop keeping, less its input"),
    ("cuda_entry_bytes", "B", "GPU memory allocated (torch.cuda.memory_allocated) when its "
     "first forward call of the measured step started; empty on the CPU"),
    ("cuda_exit_bytes", "B", "GPU memory allocated when that call returned (exit - entry: what "
     "its forward left allocated, its saved activations and output)"),
)  # fmt: skip

ADDED_LATER["layers"] |= {c.name for c in (*LAYER_FLOPS_REPORT, *LAYER_MEMORY_REPORT)}

# The layers table (report/layers/table.py): its own columns, what each layer ran, its gradients'
# all-reduce, its fold, its cost, its memory.
LAYER_REPORT = (*LAYER_COLUMNS, *LAYER_IMPLEMENTATION_REPORT, *LAYER_GRAD_SYNC_REPORT,
                *LAYER_FOLD_REPORT, *LAYER_FLOPS_REPORT, *LAYER_MEMORY_REPORT)  # fmt: skip

# GPU phase columns: the annotation's phases, then ``other`` (ops launched outside them).
PHASE_COLUMNS = (*PHASES, "other")


def phase_positions(phase: pd.Series, missing: int) -> np.ndarray:
    """Each value's position in PHASE_COLUMNS (``missing`` where it is none or not a
    phase), looked up once per category."""
    cat = phase.astype("category")
    table = np.array([PHASE_COLUMNS.index(str(p)) if str(p) in PHASE_COLUMNS else missing
                      for p in cat.cat.categories] + [missing], dtype=np.int64)  # fmt: skip
    out: np.ndarray = table[cat.cat.codes.to_numpy()]  # code -1 (none) reads the last
    return out
# Who owns GPU time that ops of several phases share (report/steps/table.py): compute first, so a
# copy hidden under the forward's kernels is forward time and data time is the GPU waiting.
GPU_PRIORITY = ("forward", "backward", "optimizer", "compile", "data", "other")
# Host time in overlapping phase ranges: compilation first (it interrupts a phase), data last.
HOST_PRIORITY = ("compile", "forward", "backward", "optimizer", "data")
_SHARED = "time where phases overlap goes to the first of " + ", ".join(GPU_PRIORITY)

ITERATION_REPORT = _cols(
    ("iteration", "", "0-based iteration index in the whole profile"),
    ("start_ns", "ns", "step start: its data wait or first forward (annotation); else the end "
     "of the previous key range"),
    ("end_ns", "ns", "step end: its last optimizer update's end (annotation); else the end of "
     "this key range"),
    ("wall_ns", "ns", "end - start"),
    ("between_before_ns", "ns", "previous step's end to this step's start: time between steps "
     "(evaluation, logging, checkpoints), in no step; 0 for the first"),
    ("warmup", "", "iteration is part of the warm-up"),
    ("in_window", "", "iteration is inside the --iter-start/--iter-stop window"),
    ("gpu_busy_ns", "ns", "time in [start, end) some GPU op ran, summed over devices"),
    ("kernels", "", "kernel executions assigned to the iteration"),
    ("kernel_ns", "ns", "GPU time of kernels assigned to the iteration"),
    ("tc_share", "", "share of kernel_ns in Tensor Core kernels; empty without kernels"),
    ("host_gap_ns", "ns", "GPU idle time the CPU caused before the iteration's ops, the part "
     "inside [start, end) (a gap that began earlier is clipped)"),
    ("launch_overhead_pct", "%", "host_gap_ns / (wall_ns x devices) x 100: of the step's device "
     "time, 0-100"),
    ("compute_ns", "ns", "union of the iteration's non-communication kernels per (pid, device) "
     "timeline, summed over timelines"),
    ("comm_ns", "ns", "union of the iteration's communication (NCCL/RCCL) kernels per timeline, "
     "summed over timelines"),
    ("exposed_comm_ns", "ns", "the iteration's communication time no compute kernel of the same "
     "timeline overlaps, summed over timelines"),
    ("overlap_pct", "%", "(comm_ns - exposed_comm_ns) / comm_ns x 100; empty without "
     "communication"),
    *(
        (f"phase_{p}_ns", "ns", f"device time in [start, end) running {p}-phase GPU ops; {_SHARED}")
        for p in PHASE_COLUMNS
    ),
    ("phase_idle_ns", "ns", "device time in [start, end) with no GPU op: wall x devices - busy"),
    *(
        (f"phase_{p}_host_gap_ns", "ns", f"host-bound GPU gaps before {p}-phase ops, "
         "clipped to [start, end)")
        for p in PHASE_COLUMNS
    ),
    *(
        (
            f"{p}_wall_ns",
            "ns",
            f"host time in [start, end) inside '{p}' phase ranges (union; "
            "overlaps go to the first of " + ", ".join(HOST_PRIORITY) + ")",
        )
        for p in PHASES
    ),
    ("other_wall_ns", "ns", "host time in [start, end) outside every phase range"),
    *(
        (cause_column(DEVICE, c), "ns", f"device idle time in [start, end) caused by {c}: "
         f"{CAUSE_DOCS[c]} (rules/idle.py; the idle_*_ns add up to phase_idle_ns)")
        for c in DEVICE_CAUSES
    ),
    *(
        (cause_column(HOST, c), "ns", f"the main thread's time in [start, end) in {c} (the "
         "host_*_ns add up to wall_ns)")
        for c in HOST_CAUSES
    ),
)
ADDED_LATER["iterations"] |= {cause_column(DEVICE, c) for c in DEVICE_CAUSES}
ADDED_LATER["iterations"] |= {cause_column(HOST, c) for c in HOST_CAUSES}

# The idle partition over the analysed steps (report/idle/): one row per cause, layer and phase.
IDLE_REPORT = _cols(
    ("kind", "", "device (the GPUs' idle time, every (process, device) timeline summed) or "
     "host (the main thread's step time)"),
    ("cause", "", "why: " + "; ".join(f"{c}: {d}" for c, d in CAUSE_DOCS.items())),
    ("layer", "", "the layer the explaining thread was in (its innermost range's), empty if "
     "none"),
    ("phase", "", "the phase it was in: data, forward, backward, optimizer, compile or other"),
    ("total_ns", "ns", "nanoseconds over the analysed steps"),
    ("step_mean_ns", "ns", "total_ns / analysed steps"),
    ("step_median_ns", "ns", "median over the analysed steps (a step without it counts 0)"),
    ("share_pct", "%", "total_ns / the kind's whole x 100: device, the idle time "
     "(phase_idle_ns); host, the main thread's step time (wall_ns)"),
    ("step_pct", "%", "total_ns / the step's time x 100: device, wall x devices; host, wall"),
)

# The critical path of the analysed steps (report/critical/): one row per part, layer, phase.
CRITICAL_REPORT = _cols(
    ("part", "", "what held the path: " + "; ".join(f"{p}: {d}" for p, d in PART_DOCS.items())),
    ("layer", "", "the layer of the node on the path (for a latency or wait: the node that "
     "waited), empty if none"),
    ("phase", "", "its phase: data, forward, backward, optimizer, compile or other"),
    ("total_ns", "ns", "nanoseconds of the analysed steps' critical paths"),
    ("step_mean_ns", "ns", "total_ns / analysed steps"),
    ("share_pct", "%", "total_ns / the paths' whole x 100 (a step's path is its time: from "
     "the previous step's completion, or its start if later, to its own completion)"),
)

# The path of the timeline's iteration, piece by piece, in time order (trace.json, the page).
CRITICAL_PATH_REPORT = _cols(
    ("start_ns", "ns", "piece start (session clock)"),
    ("end_ns", "ns", "piece end"),
    ("part", "", "host, device, latency or wait (as critical.csv)"),
    ("track", "", "where the piece ran: 'thread <tid>' or 'GPU <id> stream <id>'"),
    ("layer", "", "its layer, empty if none"),
    ("phase", "", "its phase"),
    ("name", "", "the kernel's name, or the host's state (rules/idle.py causes)"),
)

ADVICE_REPORT = _cols(
    ("problem", "", "what was found, in a few words"),
    ("severity", "", "high, warn or info"),
    ("evidence", "", "the numbers behind the finding"),
    ("recommendation", "", "what to change"),
    ("metric", "", "the metric the rule tests (a summary or table column)"),
    ("value", "", "the metric's measured value"),
    ("threshold", "", "the threshold the value crossed (see thresholds in metrics.py)"),
    ("citation", "", "where the rule and its threshold come from"),
)

# One iteration's events (report/timeline.py): what trace.json and the page's timeline draw;
# without iterations, the busiest stretch of the session's.
TIMELINE_REPORT = _cols(
    ("kind", "", "range (NVTX), api (CUDA API call), kernel, memcpy or memset"),
    ("name", "", "range text, API function name, kernel short name, or memcpy/memset and its "
     "copy kind (memcpy HtoD)"),
    ("full_name", "", "demangled kernel name (other kinds: the name again)"),
    ("pid", "", "process id"),
    ("tid", "", "thread id: the range's or call's thread; a GPU op's launching thread"),
    ("device_id", "", "CUDA device of a GPU op (empty for ranges and API calls)"),
    ("stream_id", "", "CUDA stream of a GPU op (empty for ranges and API calls)"),
    ("start_ns", "ns", "start on the nsys session clock (absolute, not rounded)"),
    ("end_ns", "ns", "end on the nsys session clock (a range never closed: session end)"),
    ("depth", "", "a range's nesting depth on its thread, 0 at top level (else empty)"),
    ("domain", "", "a range's NVTX domain ('' for the default domain; else empty)"),
    ("layer", "", "module (layer) as ingest labelled the op, a launch call's op, or a module "
     "range's own; empty when none"),
    ("phase", "", "data, forward, backward, optimizer, compile or other, labelled the same way"),
    ("correlation_id", "", "CUPTI correlation id joining a launch call to its GPU op"),
    ("track", "", "the row the page's timeline and trace.json draw the event on: a range's or "
     "call's thread (main, autograd 0, DataLoader worker 1, NCCL watchdog, thread N: "
     "rules/threads.py), a GPU op's stream (stream 7, stream 13 · NCCL)"),
    ("iteration", "", "iteration of the event: a GPU op's launch, a call's or range's start "
     "(a range opened before the window: the window's first); empty: no iterations (the "
     "busiest stretch)"),
)  # fmt: skip

# Projected epoch and training time (report/steps/projection.py); empty when steps per epoch are
# unknown (a summary warning says why).
_PER_STEP = "per analysed step of this process (empty without steps)"
RANKS_REPORT = _cols(
    ("rank", "", "the process's rank (annotation process fact; without it the order by pid)"),
    ("pid", "", "process id"),
    ("device_id", "", "CUDA device id (empty: a process that ran annotated steps, no kernel)"),
    ("steps", "", "analysed steps of this process (its own iteration ranges in the window, "
     "else the shared analysed iterations)"),
    ("step_median_ns", "ns", "median wall time of those steps"),
    ("step_mean_ns", "ns", "mean wall time of those steps"),
    ("kernels", "", "kernel executions of this timeline in the window"),
    ("kernel_ns", "ns", "sum of their GPU durations (as nsys gpukernsum of this timeline)"),
    ("compute_ns", "ns", "union of this timeline's non-communication kernels in the window"),
    ("comm_ns", "ns", "union of this timeline's communication kernels (NCCL/RCCL, rules/comm.py)"),
    ("exposed_comm_ns", "ns", "communication not overlapped by compute on the same timeline: "
     "comm_ns less the part of it compute kernels overlap"),
    ("overlap_pct", "%", "(comm_ns - exposed_comm_ns) / comm_ns x 100; empty without comm"),
    ("comm_kernels", "", "communication kernel executions in the window"),
    ("data_ns", "ns", "host time of this process's data phase ranges in the window (union)"),
    ("step_compute_ns", "ns", f"compute_ns {_PER_STEP}"),
    ("step_comm_ns", "ns", f"comm_ns {_PER_STEP}"),
    ("step_exposed_comm_ns", "ns", f"exposed_comm_ns {_PER_STEP}"),
    ("step_data_ns", "ns", f"data_ns {_PER_STEP}"),
    ("bubble_pct", "%", "the share of its mean step its GPU ran no compute kernel: "
     "(step_mean_ns - step_compute_ns) / step_mean_ns x 100 (in a pipeline-parallel run, "
     "its bubble); GPU timelines only"),
    ("step_coll_wait_ns", "ns", "its wait inside recorded collectives per analysed step: each "
     "call's duration less the instance's transfer (collectives.csv); empty without them"),
    ("step_waited_for_ns", "ns", "the other ranks' mean wait per analysed step in the "
     "collectives this rank arrived last at; empty without recorded collectives"),
    ("straggler", "", "true for the rank the others wait for (rules/ranks.py)"),
)

# Collectives matched across ranks (report/collectives/): one row per instance and rank.
COLLECTIVES_REPORT = _cols(
    ("group", "", "the process group's ranks ('0-3', or '0,2' when not a run)"),
    ("op", "", "the torch.distributed function called (all_reduce, all_gather_into_tensor, ...)"),
    ("seq", "", "the call's number among its group's collectives: the same on every rank"),
    ("rank", "", "the rank this row is"),
    ("start_ns", "ns", "call start (session clock)"),
    ("end_ns", "ns", "call end; an async call's completion"),
    ("duration_ns", "ns", "end_ns - start_ns"),
    ("transfer_ns", "ns", "the shortest duration among the instance's ranks: the data's time"),
    ("wait_ns", "ns", "duration_ns - transfer_ns: time this rank waited for the others"),
    ("last_rank", "", "the rank that arrived last (latest start): the one the others waited for"),
    ("ranks", "", "ranks that recorded this instance"),
    ("complete", "", "whether every rank of the group recorded it"),
    ("bytes", "B", "bytes moved by nccl-tests' convention (rules/collectives.py)"),
    ("dtype", "", "the tensors' dtype (empty: a barrier)"),
    ("async", "", "called with async_op=True: timed from the call to its work's completion"),
    ("layer", "", "the layer it belongs to: an FSDP unit's, else the module range it was called "
     "in (empty: outside every layer)"),
    ("pass", "", "forward or backward (an FSDP unit's pass; else the phase it was called in)"),
    ("fsdp", "", "issued by an FSDP unit (FSDP1 or fully_shard) for its layer"),
    ("exposed_ns", "ns", "the part of duration_ns no compute kernel of its GPU overlapped; a "
     "call with no kernel: all of it when blocking, empty when asynchronous"),
)

# Collectives per layer (report/collectives/layers.py): per (layer, pass, group, op), per rank
# and analysed step.
COLLECTIVE_LAYERS_REPORT = _cols(
    ("layer", "", "the layer (as collectives.csv; empty: outside every layer)"),
    ("pass", "", "forward or backward (else the phase the calls ran in)"),
    ("group", "", "the process group's ranks"),
    ("op", "", "the torch.distributed function"),
    ("fsdp", "", "issued by an FSDP unit for this layer"),
    ("ranks", "", "ranks that recorded these calls"),
    ("calls_per_step", "", "calls per rank and analysed step"),
    ("bytes_mean", "B", "mean bytes per call (an FSDP unit: its padded size, nccl-tests' "
     "convention)"),
    ("time_ns", "ns", "the calls' duration per rank and analysed step (transfer + wait)"),
    ("transfer_ns", "ns", "of which the data moved (each instance's shortest duration)"),
    ("wait_ns", "ns", "of which the rank waited for the others"),
    ("exposed_ns", "ns", "of which no compute overlapped (empty: an asynchronous call with no "
     "kernel)"),
    ("hidden_ns", "ns", "time_ns - exposed_ns: overlapped by compute"),
    ("exposed_step_ratio", "", "exposed_ns / the mean analysed iteration (a ratio, not capped: "
     "collectives run between the steps too)"),
)

# Several inputs (nodes): each input's clock against the first's (report/collectives/clocks.py).
CLOCK_OFFSETS_REPORT = _cols(
    ("node", "", "the input's report folder"),
    ("node_ranks", "", "the ranks it holds, comma-separated"),
    ("offset_ns", "ns", "its clock ahead of the first input's: the median over the collectives "
     "both hold of the difference of their median ends (empty: none shared)"),
    ("error_ns", "ns", "the median absolute deviation of those differences"),
    ("instances", "", "collectives the offset was estimated from"),
)

# Per (group, op, size): the collectives' figures over the analysed steps.
COLLECTIVE_OPS_REPORT = _cols(
    ("group", "", "the process group's ranks (as collectives.csv)"),
    ("op", "", "the torch.distributed function"),
    ("size_bytes", "B", "size bucket: bytes rounded down to a power of two (0: no data)"),
    ("ranks", "", "ranks in the group"),
    ("instances", "", "instances in this row"),
    ("bytes_mean", "B", "mean bytes per instance"),
    ("transfer_median_ns", "ns", "median transfer per instance"),
    ("wait_mean_ns", "ns", "mean wait per rank and instance"),
    ("wait_share", "", "the calls' waits / their durations, summed over ranks (0-1)"),
    ("algbw_gbps", "GB/s", "bytes_mean / transfer_median_ns (nccl-tests algbw)"),
    ("busbw_gbps", "GB/s", "algbw x nccl-tests' bus factor for the op and rank count"),
)


# Summary metrics: flat keys, the columns of summary.csv and the scalar fields of summary.json,
# declared with the Summary's fields (report/summary_types.py).
SUMMARY_REPORT = _cols(*SUMMARY_COLUMNS)

GPU_FIELDS = _cols(
    ("pid", "", "process that used the device (empty: listed by the export, no work)"),
    ("device_id", "", "CUDA device id"),
    ("name", "", "GPU product name"),
    ("sm_count", "", "number of SMs"),
    ("compute_capability", "", "major.minor"),
    ("busy_ns", "ns", "union of the busy intervals of this process on this device"),
    ("utilization", "", "busy_ns / the span utilization_scope names (wall_ns, or event_span_ns "
     "for a trimmed capture)"),
)

# The lists of summary.json beside the flat row (report/summary_types.py).
SUMMARY_LISTS = {
    "warnings": "warnings from reading and analysis, one string each",
    "dataloaders": "each DataLoader's recorded settings (the data-loading advice's evidence)",
    "fp32_gemm_kernels": "top FP32 GEMM/conv kernels as {name, gpu_ns} (FP32 advice evidence)",
}

# Several inputs: one summary row per input, with where its report went or why it failed.
RUNS_REPORT = (
    *SUMMARY_REPORT,
    ReportColumn("report_dir", "", "report folder of this input"),
    ReportColumn("error", "", "why this input could not be analysed (empty when it was)"),
)

REPORTS: dict[str, tuple[ReportColumn, ...]] = {
    "summary": SUMMARY_REPORT,
    "kernels": KERNEL_REPORT,
    "ranges": RANGE_REPORT,
    "layers": LAYER_REPORT,
    "iterations": ITERATION_REPORT,
    "advice": ADVICE_REPORT,
    "timeline": TIMELINE_REPORT,
    "ranks": RANKS_REPORT,
    "idle": IDLE_REPORT,
    "critical": CRITICAL_REPORT,
    "critical_path": CRITICAL_PATH_REPORT,
    "collectives": COLLECTIVES_REPORT,
    "collective_ops": COLLECTIVE_OPS_REPORT,
    "collective_layers": COLLECTIVE_LAYERS_REPORT,
    "clock_offsets": CLOCK_OFFSETS_REPORT,
    "runs": RUNS_REPORT,
}


def column_names(table: str) -> list[str]:
    return [c.name for c in REPORTS[table]]


def definitions(table: str) -> dict[str, str]:
    """``{column: one-line definition (unit)}`` for a report table."""
    return {c.name: f"{c.doc} [{c.unit}]" if c.unit else c.doc for c in REPORTS[table]}


def markdown_reference() -> str:
    """The report columns and thresholds as Markdown (for docs/reference/report.md)."""
    out = []
    for table, columns in REPORTS.items():
        name = "summary.csv (several inputs)" if table == "runs" else f"{table}.csv / .json"
        out += [f"**{name}**", "", "| column | unit | meaning |", "| --- | --- | --- |"]
        out += [f"| `{c.name}` | {c.unit} | {c.doc} |" for c in columns]
        out.append("")
    out += ["**summary.json lists**", "", "| field | meaning |", "| --- | --- |"]
    out += [f"| `gpus[].{c.name}` | {c.doc} |" for c in GPU_FIELDS]
    out += [f"| `advice[].{c.name}` | as advice.csv `{c.name}` |" for c in ADVICE_REPORT]
    out += [f"| `{key}` | {doc} |" for key, doc in SUMMARY_LISTS.items()]
    out.append("")
    out += [
        "**Advice thresholds**",
        "",
        "| threshold | value | unit | source |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| `{k}` | {t.value:g} | {t.unit} | {t.citation} |" for k, t in THRESHOLDS.items()]
    out += ["", "**GPU dense peaks (TFLOP/s), the MFU's denominator** (rules/peaks.py; an "
            "unknown GPU, a MIG slice or a dtype without a figure gives no MFU)", "",
            "| GPU | " + " | ".join(DTYPES) + " | source |",
            "| --- |" + " --- |" * len(DTYPES) + " --- |"]  # fmt: skip
    out += [f"| {p.gpu} | " + " | ".join(f"{p.tflops[d]:g}" if d in p.tflops else ""
                                         for d in DTYPES) + f" | {p.source} |" for p in PEAKS]
    return "\n".join(out) + "\n"
