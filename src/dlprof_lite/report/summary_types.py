"""The run summary as frozen dataclasses: complete when built, never mutated.

A :class:`Summary` holds one group per concern (system, window, totals, ...) plus the lists
(GPUs, warnings, advice, DataLoaders, FP32 GEMM kernels). Every scalar field is named exactly
as its flat metric in :mod:`dlprof_lite.report.metrics` (``SUMMARY_REPORT``), so the one flat
CSV row and the one JSON document are derived from the fields, never hand-listed:
:meth:`Summary.row`, :meth:`Summary.document` and :meth:`Summary.from_document` are the only
serializers. Numbers are plain Python values (no numpy scalars, no NaN: unknown is ``None``),
so a summary read back from ``summary.json`` compares equal to the one written.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import column_names

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


class _Group:
    """A group of flat metrics: each field is one ``summary`` column."""

    def items(self) -> Iterator[tuple[str, Scalar]]:
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            yield f.name, getattr(self, f.name)


def _group(cls: type[T], flat: Mapping[str, object]) -> T:
    return cls(**{f.name: scalar(flat.get(f.name)) for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class System(_Group):
    """What was profiled where: the export's system table (host, OS, driver) and the
    profiled process's own ``process`` fact (torch, CUDA, Python, command)."""

    source: str | None
    nsys_version: str | None
    host: str | None
    os: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    torch_version: str | None
    cuda_version: str | None
    python_version: str | None
    command: str | None
    gpu_names: str | None
    devices: int | None
    wall_ns: int | None
    event_span_ns: int | None


@dataclass(frozen=True)
class Window(_Group):
    """Which steps the statistics cover (the key range, the analysed iterations), what the
    kernels, ranges and layers tables cover (``window_*``: report/window.py) and which
    iteration the timeline shows (report/timeline.py)."""

    key_range: str | None
    key_range_source: str | None
    iterations_analysed: int | None
    window_scope: str | None
    window_iter_start: int | None
    window_iter_stop: int | None
    window_steps: int | None
    window_start_ns: int | None
    window_end_ns: int | None
    window_kernel_ns: int | None
    timeline_iteration: int | None
    timeline_start_ns: int | None
    timeline_end_ns: int | None


@dataclass(frozen=True)
class Totals(_Group):
    kernel_ns: int | None
    kernel_count: int | None
    memcpy_ns: int | None
    memcpy_count: int | None
    memset_ns: int | None
    memset_count: int | None
    gpu_busy_ns: int | None
    gpu_utilization: float | None
    utilization_scope: str | None
    active_utilization: float | None
    kernel_median_ns: float | None
    short_launches: int | None


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

    step_utilization: float | None
    step_data_ns: float | None
    step_forward_ns: float | None
    step_backward_ns: float | None
    step_optimizer_ns: float | None
    step_compile_ns: float | None
    step_other_ns: float | None
    step_idle_ns: float | None
    step_data_wall_ns: float | None
    step_forward_wall_ns: float | None
    step_backward_wall_ns: float | None
    step_optimizer_wall_ns: float | None
    step_compile_wall_ns: float | None
    step_other_wall_ns: float | None
    step_data_wall_pct: float | None
    step_data_host_gap_ns: float | None
    step_forward_host_gap_ns: float | None
    step_backward_host_gap_ns: float | None
    step_optimizer_host_gap_ns: float | None
    step_compile_host_gap_ns: float | None
    step_other_host_gap_ns: float | None
    step_data_host_gap_pct: float | None
    step_forward_host_gap_pct: float | None
    step_backward_host_gap_pct: float | None
    step_optimizer_host_gap_pct: float | None
    step_compile_host_gap_pct: float | None
    step_other_host_gap_pct: float | None


@dataclass(frozen=True)
class TensorCores(_Group):
    tc_gpu_ns: int | None
    tc_share: float | None
    tc_unknown_ns: int | None
    tc_unknown_share: float | None
    tc_inferred_ns: int | None
    eligible_non_tc_ns: int | None
    eligible_non_tc_share: float | None
    fp32_gemm_ns: int | None
    fp32_gemm_share: float | None


@dataclass(frozen=True)
class LaunchOverhead(_Group):
    launch_overhead_ns: int | None
    launch_overhead_pct: float | None
    launch_overhead_scope: str | None
    launch_coverage: float | None


@dataclass(frozen=True)
class HostSync(_Group):
    """Synchronous copies and synchronization calls (nsys expert-system selections)."""

    sync_memcpy_count: int | None
    sync_memcpy_ns: int | None
    pageable_async_count: int | None
    pageable_async_ns: int | None
    sync_api_calls: int | None
    sync_api_ns: int | None
    sync_api_pct: float | None
    sync_api_scope: str | None


@dataclass(frozen=True)
class Iterations(_Group):
    iterations_count: int | None
    iterations_warmup: int | None
    iterations_mean_ns: float | None
    iterations_median_ns: float | None
    iterations_std_ns: float | None
    iterations_p10_ns: float | None
    iterations_p90_ns: float | None
    iterations_cv: float | None
    steady_start: int | None
    steady_stop: int | None
    between_steps_ns: int | None
    after_training_ns: int | None


@dataclass(frozen=True)
class DataLoading(_Group):
    dataloader_count: int | None
    dataloader_num_workers: int | None
    dataloader_settings: str | None


@dataclass(frozen=True)
class AnnotationCost(_Group):
    annotation_cost_ns: float | None
    annotation_cost_pct: float | None


@dataclass(frozen=True)
class Compile(_Group):
    compile_count: int | None
    compile_wall_ns: int | None


@dataclass(frozen=True)
class Projection(_Group):
    """Projected epoch and training time (report/projection.py); all None when unknown."""

    projection_steps_per_epoch: int | None
    projection_steps_source: str | None
    projection_epochs: int | None
    projection_step_ns: float | None
    projection_step_p10_ns: float | None
    projection_step_p90_ns: float | None
    projection_startup_ns: float | None
    projection_outside_ns: float | None
    projection_epoch_ns: float | None
    projection_epoch_p10_ns: float | None
    projection_epoch_p90_ns: float | None
    projection_train_ns: float | None
    projection_train_p10_ns: float | None
    projection_train_p90_ns: float | None

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> Projection:
        """The group from ``projection_*`` values (missing ones None)."""
        return _group(cls, values)


@dataclass(frozen=True)
class Communication(_Group):
    """Communication vs compute across GPU timelines, rank imbalance and the straggler
    (report/ranks.py; all None without ranks)."""

    comm_ns: int | None
    comm_share: float | None
    exposed_comm_ns: float | None
    exposed_comm_pct: float | None
    exposed_comm_scope: str | None
    ranks: int | None
    rank_imbalance: float | None
    straggler_rank: int | None
    straggler_excess_ns: float | None
    straggler_data_ns: float | None

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> Communication:
        """The group from its field values (missing ones None)."""
        return _group(cls, values)


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

    def get(self, key: str) -> Scalar:
        return dict(self.settings).get(key)


GROUPS = {
    "system": System,
    "window": Window,
    "totals": Totals,
    "step": StepBreakdown,
    "tensor_cores": TensorCores,
    "launch_overhead": LaunchOverhead,
    "host_sync": HostSync,
    "iterations": Iterations,
    "data_loading": DataLoading,
    "annotation_cost": AnnotationCost,
    "compile": Compile,
    "projection": Projection,
    "communication": Communication,
}
LISTS = ("gpus", "warnings", "advice", "dataloaders", "fp32_gemm_kernels")


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
        return {name: metrics.get(name) for name in column_names("summary")}

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
    """A summary from flat metric values (keys as in ``SUMMARY_REPORT``) and the lists."""
    groups: dict[str, Any] = {name: _group(cls, flat) for name, cls in GROUPS.items()}
    return Summary(
        **groups,
        gpus=tuple(gpus),
        warnings=tuple(warnings),
        advice=tuple(advice),
        dataloaders=tuple(
            DataLoaderFacts(tuple((str(k), scalar(v)) for k, v in d.items())) for d in dataloaders
        ),
        fp32_gemm_kernels=tuple(fp32_gemm_kernels),
    )
