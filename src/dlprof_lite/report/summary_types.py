"""The run summary as frozen dataclasses: complete when built, never mutated.

A :class:`Summary` holds one group per concern (system, window, totals, ...) plus the lists
(GPUs, warnings, advice, DataLoaders, FP32 GEMM kernels). Every scalar field is named exactly
as its flat metric, and carries its unit and one-line definition (``_d``): the registry's
``summary`` columns (``SUMMARY_REPORT`` in :mod:`dlprof_lite.report.metrics`) are made from
the fields, and so are the one flat CSV row and the one JSON document, never hand-listed:
:meth:`Summary.row`, :meth:`Summary.document` and :meth:`Summary.from_document` are the only
serializers. Numbers are plain Python values (no numpy scalars, no NaN: unknown is ``None``),
so a summary read back from ``summary.json`` compares equal to the one written.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Self, TypeVar

import numpy as np
import pandas as pd

Scalar = str | int | float | bool | None
T = TypeVar("T")


def number(value: object) -> float | None:
    """A measured number as a float; None when unknown (None, NaN, NA) or not a number."""
    value = scalar(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def scalar(value: object) -> Scalar:
    """A plain JSON-able scalar: numpy to Python, NaN and pandas NA to None."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _d(unit: str, doc: str) -> Any:
    """A summary field's unit ("ns", "%", "FLOP", "FLOP/s", "B" or "") and one-line definition:
    the registry's ``summary`` columns (:data:`dlprof_lite.report.metrics.SUMMARY_REPORT`)
    are made of them."""
    return field(metadata={"unit": unit, "doc": doc})


class _Group:
    """A group of flat metrics: each field is one ``summary`` column."""

    @classmethod
    def of(cls, values: Mapping[str, object]) -> Self:
        """The group of ``values`` (its fields by name; a field not given is unknown,
        None). A name that is none of its fields is an error: a misspelled figure fails
        where it is made, it does not become a silent None."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]  # a dataclass
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"not {cls.__name__} fields: {', '.join(unknown)}")
        return _dataclass(cls, values)

    def items(self) -> Iterator[tuple[str, Scalar]]:
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            yield f.name, getattr(self, f.name)


@dataclass(frozen=True)
class System(_Group):
    """What was profiled where: the export's system table (host, OS, driver) and the
    profiled process's own ``process`` fact (torch, CUDA, Python, command)."""

    source: str | None = _d("", "input file analysed")
    nsys_version: str | None = _d("", "Nsight Systems version that wrote the export")
    host: str | None = _d(
        "",
        "host name of the profiled system (nsys TARGET_INFO_SYSTEM_ENV Hostname)")
    os: str | None = _d("", "operating system of the profiled system (nsys OsDescription)")
    driver_version: str | None = _d(
        "",
        "NVIDIA driver version, e.g. 535.54.03 (nsys NvDriverVersion)")
    cuda_driver_version: str | None = _d(
        "",
        "CUDA version the driver supports, e.g. 12.2 (nsys CudaDriverVersion)")
    torch_version: str | None = _d(
        "",
        "torch.__version__ in the profiled process (the lowest rank's); none without the "
        "annotation")
    cuda_version: str | None = _d(
        "",
        "CUDA version torch was built with (torch.version.cuda); none for a CPU build or "
        "without the annotation")
    python_version: str | None = _d(
        "",
        "Python version of the profiled process; none without the annotation")
    command: str | None = _d(
        "",
        "the profiled program's sys.argv, shell-quoted (shlex.join; the lowest rank's); none "
        "without the annotation")
    gpu_names: str | None = _d("", "GPU product names, '; '-separated (summary.json: gpus list)")
    devices: int | None = _d(
        "",
        "GPU timelines (process, device) with at least one kernel or memop")
    wall_ns: int | None = _d(
        "ns",
        "session duration: nsys's ANALYSIS_DETAILS.duration (every event lies in [0, "
        "duration] on its clock; startTime/stopTime are on another); without the table, the "
        "events' span")
    event_span_ns: int | None = _d(
        "ns",
        "first event's start to the last event's end (kernels, copies, CUDA API calls, NVTX "
        "ranges)")


@dataclass(frozen=True)
class Window(_Group):
    """Which steps the statistics cover (the key range, the analysed iterations), what the
    kernels, ranges and layers tables cover (``window_*``: report/steps/window.py) and which
    iteration the timeline shows (report/timeline.py)."""

    iterations_analysed: int | None = _d(
        "",
        "in-window iterations after warm-up: step statistics use these")
    key_range: str | None = _d("", "NVTX range whose instances delimit iterations")
    key_range_source: str | None = _d(
        "",
        "rule that chose the key range: key-range, numbered-ranges, annotation, "
        "forward-backward, root-model-calls, most-repeated or none (also when every guess "
        "failed the step test: a warning names the candidates)")
    window_scope: str | None = _d(
        "",
        "what the kernels, ranges and layers tables cover: analysed (the analysed "
        "iterations), whole-run (--all-iterations) or no-iterations (whole run, none found)")
    window_iter_start: int | None = _d(
        "",
        "first iteration of the window's steps (empty: no steps)")
    window_iter_stop: int | None = _d(
        "",
        "iteration after its last step (exclusive, as --iter-stop)")
    window_steps: int | None = _d("", "steps the tables' per-step columns are taken over")
    window_start_ns: int | None = _d(
        "ns",
        "window start (first step's start; whole run: session start)")
    window_end_ns: int | None = _d("ns", "window end (last step's end; whole run: session end)")
    window_kernel_ns: int | None = _d(
        "ns",
        "GPU time of the kernels in the window (the kernels table's)")
    timeline_iteration: int | None = _d(
        "",
        "iteration the timeline table and trace.json show: the analysed one whose wall time "
        "is nearest the median (empty without iterations)")
    timeline_start_ns: int | None = _d(
        "ns",
        "first start of the events the timeline table and trace.json show: "
        "timeline_iteration's, or without iterations the busiest stretch's (of the runs of "
        "20000 events in start order, the one holding the most GPU op time; without GPU work,"
        " top-level range and API call time)")
    timeline_end_ns: int | None = _d("ns", "last end of those events")


@dataclass(frozen=True)
class Totals(_Group):
    kernel_ns: int | None = _d("ns", "sum of kernel GPU durations")
    kernel_count: int | None = _d("", "kernel executions")
    memcpy_ns: int | None = _d("ns", "sum of memcpy GPU durations")
    memcpy_count: int | None = _d("", "memcpy operations")
    memset_ns: int | None = _d("ns", "sum of memset GPU durations")
    memset_count: int | None = _d("", "memset operations")
    gpu_busy_ns: int | None = _d(
        "ns",
        "union of busy intervals (kernels and memops) per device, summed")
    gpu_utilization: float | None = _d(
        "",
        "gpu_busy_ns / (span x devices), the span utilization_scope names: share of the "
        "session a GPU was busy")
    utilization_scope: str | None = _d(
        "",
        "denominator of gpu_utilization and gpus[].utilization: session (wall_ns), or "
        "event_span (event_span_ns) when the events cover less than trimmed_capture_share of "
        "the session (a trimmed capture)")
    active_utilization: float | None = _d(
        "",
        "busy share of each device's first-op-to-last-op span, averaged")
    kernel_median_ns: float | None = _d("ns", "median kernel GPU duration over all executions")
    short_launches: int | None = _d(
        "",
        "kernel executions shorter on the GPU than their launch call (HTA)")


@dataclass(frozen=True)
class StepBreakdown(_Group):
    """Mean per analysed step; phases as in :data:`metrics.PHASE_COLUMNS`."""

    def gpu_ns(self, phase: str) -> float | None:
        """GPU time of ``phase`` (a :data:`metrics.PHASE_COLUMNS` name) per step."""
        return self._of(f"step_{phase}_ns")

    def wall_ns(self, phase: str) -> float | None:
        """Host (range) time of ``phase`` per step."""
        return self._of(f"step_{phase}_wall_ns")

    def host_gap_ns(self, phase: str) -> float | None:
        """GPU time waiting for the host during ``phase`` per step (launch overhead)."""
        return self._of(f"step_{phase}_host_gap_ns")

    def host_gap_pct(self, phase: str) -> float | None:
        """:meth:`host_gap_ns` in % of the step."""
        return self._of(f"step_{phase}_host_gap_pct")

    def _of(self, name: str) -> float | None:
        value: float | None = getattr(self, name, None)
        return value

    step_utilization: float | None = _d(
        "",
        "gpu_busy_ns / (wall_ns x devices) over analysed iterations")
    step_data_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in data-phase GPU ops")
    step_forward_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in forward-phase GPU ops")
    step_backward_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in backward-phase GPU ops")
    step_optimizer_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in optimizer-phase GPU ops")
    step_compile_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in compile-phase GPU ops")
    step_other_ns: float | None = _d(
        "ns",
        "mean per analysed step of device time in other-phase GPU ops")
    step_idle_ns: float | None = _d("ns", "mean per analysed step of device time with no GPU op")
    step_data_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time in 'data' ranges")
    step_forward_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time in 'forward' ranges")
    step_backward_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time in 'backward' ranges")
    step_optimizer_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time in 'optimizer' ranges")
    step_compile_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time in 'compile' ranges")
    step_other_wall_ns: float | None = _d(
        "ns",
        "mean per analysed step of host time outside phase ranges")
    step_data_wall_pct: float | None = _d("%", "step_data_wall_ns / mean step wall time x 100")
    step_data_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, data phase")
    step_forward_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, forward phase")
    step_backward_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, backward phase")
    step_optimizer_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, optimizer phase")
    step_compile_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, compile phase")
    step_other_host_gap_ns: float | None = _d(
        "ns",
        "mean per analysed step of host-bound gaps, other phase")
    step_data_host_gap_pct: float | None = _d(
        "%",
        "data-phase host-bound gaps / (step wall x devices) x 100, analysed steps")
    step_forward_host_gap_pct: float | None = _d(
        "%",
        "forward-phase host-bound gaps / (step wall x devices) x 100, analysed steps")
    step_backward_host_gap_pct: float | None = _d(
        "%",
        "backward-phase host-bound gaps / (step wall x devices) x 100, analysed steps")
    step_optimizer_host_gap_pct: float | None = _d(
        "%",
        "optimizer-phase host-bound gaps / (step wall x devices) x 100, analysed steps")
    step_compile_host_gap_pct: float | None = _d(
        "%",
        "compile-phase host-bound gaps / (step wall x devices) x 100, analysed steps")
    step_other_host_gap_pct: float | None = _d(
        "%",
        "other-phase host-bound gaps / (step wall x devices) x 100, analysed steps")


@dataclass(frozen=True)
class TensorCores(_Group):
    tc_gpu_ns: int | None = _d("ns", "GPU time of Tensor Core kernels")
    tc_share: float | None = _d(
        "",
        "tc_gpu_ns / GPU time of the kernels whose names tell (tc_class tc or no_tc); the "
        "others apart in tc_unknown_share")
    tc_unknown_ns: int | None = _d(
        "ns",
        "GPU time of kernels whose names cannot tell (tc_class unknown: nvFuser, Triton, XLA "
        "fusions, bare CUTLASS names)")
    tc_unknown_share: float | None = _d("", "tc_unknown_ns / kernel_ns")
    tc_inferred_ns: int | None = _d(
        "ns",
        "the part of tc_unknown_ns launched in layers marked 'tc (inferred)' (layers "
        "tc_inferred: recorded dtype and GPU allow Tensor Cores): inferred, not measured")
    eligible_non_tc_ns: int | None = _d(
        "ns",
        "GPU time of TC-eligible layers in GEMM/convolution kernels without Tensor Cores "
        "(layers table tc_miss_gpu_ns: the window)")
    eligible_non_tc_share: float | None = _d("", "eligible_non_tc_ns / window_kernel_ns")
    fp32_gemm_ns: int | None = _d(
        "ns",
        "GPU time of FP32 GEMM/conv kernels on CUDA cores (by kernel name)")
    fp32_gemm_share: float | None = _d("", "fp32_gemm_ns / kernel_ns")


@dataclass(frozen=True)
class LaunchOverhead(_Group):
    launch_overhead_ns: int | None = _d(
        "ns",
        "host-bound GPU gaps inside the analysed steps (each clipped to its step); no "
        "iterations: all gaps")
    launch_overhead_pct: float | None = _d(
        "%",
        "launch_overhead_ns / (analysed steps' wall x devices) x 100; no iterations: / the "
        "devices' active spans (first op start to last op end), 0-100")
    launch_overhead_scope: str | None = _d(
        "",
        "denominator of launch_overhead_pct: iterations (analysed steps) or active_span (no "
        "iterations: each GPU's first op start to last op end)")
    launch_coverage: float | None = _d(
        "",
        "share of GPU operations (kernels, memcpys, memsets) whose launch call is in the "
        "export: launch overhead and layer attribution see only these (a warning below "
        "launch_coverage_warn)")


@dataclass(frozen=True)
class HostSync(_Group):
    """Synchronous copies and synchronization calls (nsys expert-system selections)."""

    sync_memcpy_count: int | None = _d(
        "",
        "synchronous cudaMemcpy* (nsys cuda-sync-memcpy selection)")
    sync_memcpy_ns: int | None = _d("ns", "GPU time of those copies")
    pageable_async_count: int | None = _d("", "cudaMemcpy*Async from or to pageable host memory")
    pageable_async_ns: int | None = _d("ns", "GPU time of those copies")
    sync_api_calls: int | None = _d("", "cudaDeviceSynchronize/cudaStreamSynchronize calls")
    sync_api_ns: int | None = _d(
        "ns",
        "time threads spent in those calls: union per thread (duplicates and overlaps once), "
        "summed over threads")
    sync_api_pct: float | None = _d(
        "%",
        "time some thread was in one, inside the span sync_api_scope names / its length x "
        "100, 0-100")
    sync_api_scope: str | None = _d(
        "",
        "denominator of sync_api_pct: iterations (the analysed steps' wall), or without steps"
        " session (wall_ns) or event_span (event_span_ns, a trimmed capture)")


@dataclass(frozen=True)
class Iterations(_Group):
    iterations_count: int | None = _d("", "iterations found")
    iterations_warmup: int | None = _d("", "iterations marked warm-up")
    iterations_mean_ns: float | None = _d("ns", "mean wall time of analysed iterations")
    iterations_median_ns: float | None = _d("ns", "median wall time of analysed iterations")
    iterations_std_ns: float | None = _d(
        "ns",
        "sample standard deviation (ddof=1) of analysed iteration wall times")
    iterations_p10_ns: float | None = _d(
        "ns",
        "10th percentile (linear) of analysed iteration wall times: p10-p90 is the spread "
        "shown beside a step time (console, page)")
    iterations_p90_ns: float | None = _d(
        "ns",
        "90th percentile (linear) of analysed iteration wall times")
    iterations_cv: float | None = _d(
        "",
        "iterations_std_ns / iterations_mean_ns (coefficient of variation)")
    steady_start: int | None = _d(
        "",
        "suggested --iter-start when variance is high (longest near-median run)")
    steady_stop: int | None = _d("", "suggested --iter-stop (exclusive) for that run")
    between_steps_ns: int | None = _d(
        "ns",
        "time between steps, summed over the run: each step's between_before_ns (evaluation, "
        "logging, checkpoints; in no step's figures)")
    after_training_ns: int | None = _d(
        "ns",
        "the last step's end to the program's last recorded event (a final evaluation, saving"
        " the model)")


@dataclass(frozen=True)
class DataLoading(_Group):
    dataloader_count: int | None = _d(
        "",
        "DataLoaders that fed a data phase (run facts); empty: not recorded")
    dataloader_num_workers: int | None = _d(
        "",
        "their num_workers (the smallest); empty: not recorded")
    dataloader_settings: str | None = _d(
        "",
        "num_workers, batch_size, pin_memory, ... per DataLoader, '; '")


@dataclass(frozen=True)
class AnnotationCost(_Group):
    annotation_cost_ns: float | None = _d(
        "ns",
        "estimated annotation host time per step: calls x cost / steps")
    annotation_cost_pct: float | None = _d("%", "annotation_cost_ns / iterations_mean_ns x 100")


@dataclass(frozen=True)
class Compile(_Group):
    compile_count: int | None = _d(
        "",
        "torch.compile compilations ('compile' ranges) in the whole session")
    compile_wall_ns: int | None = _d("ns", "host time of all compilations, in steps or not")


@dataclass(frozen=True)
class Cost(_Group):
    """The model's FLOPs per step and MFU (report/layers/flops.py: model_cost)."""

    model_flops_per_step: float | None = _d(
        "FLOP", "forward + backward FLOPs per analysed step of the root models (the layers "
        "table's step_flops of each layer without a parent); empty when a root is not counted")
    model_flops_per_s: float | None = _d(
        "FLOP/s", "model_flops_per_step / iterations_median_ns: achieved over the steady step")
    mfu: float | None = _d(
        "", "model FLOPs utilisation of the step: the time the model's FLOPs take at the GPU's "
        "dense peak per compute dtype, over the median step time (this process: one rank); "
        "above 1 is an attribution error")
    mfu_gpu: str | None = _d(
        "", "the peak table's row the MFU divides by (rules/peaks.py, a datasheet per row)")


@dataclass(frozen=True)
class Memory(_Group):
    """The process's tensor bytes by category (report/layers/memory.py: memory_summary)."""

    memory_param_bytes: float | None = _d("B", "parameter bytes of every layer (layers "
                                          "param_bytes summed)")
    memory_gradient_bytes: float | None = _d("B", "gradient bytes at the optimizers' first step")
    memory_optimizer_bytes: float | None = _d("B", "optimizer-state bytes after the "
                                              "optimizers' first step")
    memory_saved_bytes: float | None = _d("B", "activations saved for backward in the first "
                                          "analysed step (layers saved_bytes summed)")
    memory_gpu_peak_bytes: float | None = _d(
        "B", "the GPU allocator's peak in that step (torch.cuda.max_memory_allocated after a "
        "reset at its first forward); empty on the CPU")
    memory_gpu_unexplained_bytes: float | None = _d(
        "B", "memory_gpu_peak_bytes less the four categories (workspaces, outputs, temporaries, "
        "the allocator's rounding); 0 when they add up to more (not all live at the peak)")
    memory_note: str | None = _d("", "why saved activations were not recorded, if so")


def _idle(cause: str) -> str:
    return (f"devices' idle time per analysed step caused by {cause} (mean; the iterations' "
            f"idle_{cause}_ns; rules/idle.py)")


def _host(cause: str) -> str:
    return f"the main thread's time per analysed step in {cause} (mean; host_{cause}_ns)"


@dataclass(frozen=True)
class Idle(_Group):
    """Why the devices wait and where the main thread's step goes (report/idle/): each
    cause's mean per analysed step; the device causes add up to step_idle_ns, the host
    causes to the mean step."""

    idle_data_ns: float | None = _d("ns", _idle("data"))
    idle_sync_ns: float | None = _d("ns", _idle("sync"))
    idle_comm_ns: float | None = _d("ns", _idle("comm"))
    idle_compile_ns: float | None = _d("ns", _idle("compile"))
    idle_gc_ns: float | None = _d("ns", _idle("gc"))
    idle_launch_ns: float | None = _d("ns", _idle("launch"))
    idle_layer_ns: float | None = _d("ns", _idle("layer"))
    idle_optimizer_ns: float | None = _d("ns", _idle("optimizer"))
    idle_other_ns: float | None = _d("ns", _idle("other"))
    idle_queued_ns: float | None = _d("ns", _idle("queued"))
    idle_unknown_ns: float | None = _d("ns", _idle("unknown"))
    host_data_ns: float | None = _d("ns", _host("data"))
    host_sync_ns: float | None = _d("ns", _host("sync"))
    host_comm_ns: float | None = _d("ns", _host("comm"))
    host_compile_ns: float | None = _d("ns", _host("compile"))
    host_gc_ns: float | None = _d("ns", _host("gc"))
    host_layer_ns: float | None = _d("ns", _host("layer"))
    host_optimizer_ns: float | None = _d("ns", _host("optimizer"))
    host_other_ns: float | None = _d("ns", _host("other"))


@dataclass(frozen=True)
class Projection(_Group):
    """Projected epoch and training time (report/steps/projection.py); all None when unknown."""

    projection_steps_per_epoch: int | None = _d(
        "",
        "steps per epoch: --steps-per-epoch, or the training DataLoader's len / batches per "
        "step")
    projection_steps_source: str | None = _d(
        "",
        "where steps per epoch came from (--steps-per-epoch or dataloader: its batches and "
        "batches per step)")
    projection_epochs: int | None = _d("", "epochs projected (--epochs, default 1)")
    projection_step_ns: float | None = _d(
        "ns",
        "mean analysed step wall time, less time between steps")
    projection_step_p10_ns: float | None = _d("ns", "10th percentile (linear) of those step times")
    projection_step_p90_ns: float | None = _d("ns", "90th percentile (linear) of those step times")
    projection_startup_ns: float | None = _d(
        "ns",
        "program start (its import of torch) to the first step, plus the warm-up steps' time "
        "above the mean step; once per run")
    projection_outside_ns: float | None = _d(
        "ns",
        "per epoch: time between steps and after the last step (evaluation, checkpoints), "
        "over the epochs the profile covered")
    projection_epoch_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: steps per epoch x mean step + outside time")
    projection_epoch_p10_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: the same with the p10 step")
    projection_epoch_p90_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: the same with the p90 step")
    projection_train_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: start-up + epochs x projection_epoch_ns")
    projection_train_p10_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: start-up + epochs x projection_epoch_p10_ns")
    projection_train_p90_ns: float | None = _d(
        "ns",
        "projected from the analysed steps: start-up + epochs x projection_epoch_p90_ns")


@dataclass(frozen=True)
class Communication(_Group):
    """Communication vs compute across GPU timelines, rank imbalance and the straggler
    (report/ranks/table.py; all None without ranks)."""

    comm_ns: int | None = _d(
        "ns",
        "communication kernel time in the window: union per GPU timeline, summed")
    comm_share: float | None = _d(
        "",
        "comm_ns / (comm_ns + compute_ns) over GPU timelines: share of kernel busy time spent"
        " communicating")
    exposed_comm_ns: float | None = _d(
        "ns",
        "exposed communication per analysed step, mean over GPU timelines (no steps: the "
        "window's total)")
    exposed_comm_pct: float | None = _d(
        "%",
        "exposed communication as % of each timeline's mean step, mean over GPU timelines (no"
        " steps: of the span exposed_comm_scope names x timelines)")
    exposed_comm_scope: str | None = _d(
        "",
        "denominator of exposed_comm_pct: iterations (each timeline's mean analysed step), or"
        " without steps session (wall_ns) or event_span (event_span_ns, a trimmed capture)")
    ranks: int | None = _d("", "ranks (processes) in the ranks table")
    rank_imbalance: float | None = _d(
        "",
        "max / median of the per-rank median step times (>= 2 ranks)")
    straggler_rank: int | None = _d(
        "",
        "the rank the others wait for (rules/ranks.py); empty: none")
    straggler_excess_ns: float | None = _d(
        "ns",
        "the straggler's compute + data time per step above the median of the other ranks'")
    straggler_data_ns: float | None = _d(
        "ns",
        "the straggler's data time per step above the median of the other ranks'")
    pipeline_bubble_pct: float | None = _d(
        "%",
        "pipeline-parallel runs (ranks sending activations point to point): the mean over GPU "
        "timelines of the share of their step without compute (ranks bubble_pct)")
    straggler_layer: str | None = _d(
        "",
        "the layer whose kernels hold most of the straggler's extra GPU time per step")
    straggler_layer_ns: float | None = _d(
        "ns",
        "the straggler's GPU time per step in straggler_layer above the other ranks' median")
    straggler_waited_ns: float | None = _d(
        "ns",
        "the other ranks' mean wait per step in the recorded collectives the straggler arrived"
        " last at (report/collectives/); empty without recorded collectives")


@dataclass(frozen=True)
class Gpu:
    """One GPU timeline: a device as one process saw it (``pid`` None: listed, no work)."""

    pid: int | None
    device_id: int
    name: str | None
    sm_count: int | None
    compute_capability: str | None
    busy_ns: int
    utilization: float | None


@dataclass(frozen=True)
class Advice:
    problem: str
    severity: str
    evidence: str
    recommendation: str
    metric: str
    value: float
    threshold: float
    citation: str


@dataclass(frozen=True)
class KernelTime:
    """One FP32 GEMM/conv kernel name and its GPU time (the advice's evidence)."""

    name: str
    gpu_ns: int


@dataclass(frozen=True)
class DataLoaderFacts:
    """One DataLoader's settings as the annotation recorded them (name, value) pairs."""

    settings: tuple[tuple[str, Scalar], ...]

    @classmethod
    def of_settings(cls, settings: Mapping[str, object]) -> DataLoaderFacts:
        return cls(tuple((str(k), scalar(v)) for k, v in settings.items()))

    def get(self, key: str) -> Scalar:
        return dict(self.settings).get(key)


# The groups in the order of summary.csv's columns.
GROUPS = {
    "system": System,
    "totals": Totals,
    "tensor_cores": TensorCores,
    "launch_overhead": LaunchOverhead,
    "compile": Compile,
    "iterations": Iterations,
    "window": Window,
    "step": StepBreakdown,
    "data_loading": DataLoading,
    "annotation_cost": AnnotationCost,
    "host_sync": HostSync,
    "projection": Projection,
    "communication": Communication,
    "cost": Cost,
    "memory": Memory,
    "idle": Idle,
}
LISTS = ("gpus", "warnings", "advice", "dataloaders", "fp32_gemm_kernels")
# The flat row's columns after the groups' fields: the lists folded (Summary.row).
ROW_EXTRA = (
    ("advice_count", "", "number of advice rows"),
    ("warnings", "", "warnings from reading and analysis, '; '-separated"),
)
# (name, unit, definition) of every summary.csv column, in order: the registry's source.
SUMMARY_COLUMNS: tuple[tuple[str, str, str], ...] = (
    *((f.name, f.metadata["unit"], f.metadata["doc"]) for cls in GROUPS.values()
      for f in fields(cls)),
    *ROW_EXTRA,
)  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """The run summary: one typed group per concern and the lists. Read fields as attributes
    (``summary.totals.kernel_ns``); ``summary["kernel_ns"]`` is the notebook's by-name read."""

    system: System
    window: Window
    totals: Totals
    step: StepBreakdown
    tensor_cores: TensorCores
    launch_overhead: LaunchOverhead
    host_sync: HostSync
    iterations: Iterations
    data_loading: DataLoading
    annotation_cost: AnnotationCost
    compile: Compile
    projection: Projection
    communication: Communication
    cost: Cost
    memory: Memory
    idle: Idle
    gpus: tuple[Gpu, ...] = ()
    warnings: tuple[str, ...] = ()
    advice: tuple[Advice, ...] = ()
    dataloaders: tuple[DataLoaderFacts, ...] = ()
    fp32_gemm_kernels: tuple[KernelTime, ...] = ()

    def metrics(self) -> dict[str, Scalar]:
        """Every scalar metric by its flat name (the groups' fields)."""
        out: dict[str, Scalar] = {}
        for name in GROUPS:
            group: _Group = getattr(self, name)
            out.update(group.items())
        return out

    def __getitem__(self, key: str) -> object:
        """A field or a list by its flat name, for notebooks (``summary["kernel_ns"]``);
        dlprof-lite itself reads attributes (``summary.totals.kernel_ns``)."""
        if key in LISTS:
            return getattr(self, key)
        metrics = self.metrics()
        if key not in metrics:
            raise KeyError(key)
        return metrics[key]

    def row(self) -> dict[str, Scalar]:
        """The flat CSV row: registry order, lists folded into a string and a count."""
        metrics = self.metrics()
        metrics["warnings"] = "; ".join(self.warnings)
        metrics["advice_count"] = len(self.advice)
        return {name: metrics.get(name) for name, _, _ in SUMMARY_COLUMNS}

    def document(self) -> dict[str, Any]:
        """The JSON document's content: the flat row plus every list, plain values only."""
        doc: dict[str, Any] = dict(self.row())
        doc["gpus"] = [asdict(g) for g in self.gpus]
        doc["advice"] = [asdict(a) for a in self.advice]
        doc["warnings"] = list(self.warnings)
        doc["dataloaders"] = [dict(d.settings) for d in self.dataloaders]
        doc["fp32_gemm_kernels"] = [asdict(k) for k in self.fp32_gemm_kernels]
        return doc

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Summary:
        """The inverse of :meth:`document` (also builds a summary from ``summarize``'s
        flat values)."""
        return build_summary(
            doc,
            gpus=[_dataclass(Gpu, g) for g in doc.get("gpus") or ()],
            warnings=[str(w) for w in doc.get("warnings") or ()],
            advice=[_dataclass(Advice, a) for a in doc.get("advice") or ()],
            dataloaders=doc.get("dataloaders") or (),
            fp32_gemm_kernels=[
                _dataclass(KernelTime, k) for k in doc.get("fp32_gemm_kernels") or ()
            ],
        )


def _dataclass(cls: type[T], values: Mapping[str, Any]) -> T:
    return cls(**{f.name: scalar(values.get(f.name)) for f in fields(cls)})  # type: ignore[arg-type]


def build_summary(
    flat: Mapping[str, object],
    *,
    gpus: Sequence[Gpu] = (),
    warnings: Sequence[str] = (),
    advice: Sequence[Advice] = (),
    dataloaders: Sequence[Mapping[str, object]] = (),
    fp32_gemm_kernels: Sequence[KernelTime] = (),
) -> Summary:
    """A summary from flat metric values (keys as in ``SUMMARY_REPORT``) and the lists: a
    document read back, which may hold fields of another release (they are left out); the
    analysis builds each group itself (``System.of``, ...), strictly."""
    groups: dict[str, Any] = {name: _dataclass(cls, flat) for name, cls in GROUPS.items()}
    return Summary(
        **groups,
        gpus=tuple(gpus),
        warnings=tuple(warnings),
        advice=tuple(advice),
        dataloaders=tuple(
            DataLoaderFacts.of_settings(d) for d in dataloaders
        ),
        fp32_gemm_kernels=tuple(fp32_gemm_kernels),
    )
