"""The report's model: the :class:`Report` type, its table names and its typed empty tables.

What every later stage may read of ``report/`` (``render``, ``store``, ``compare``): this
module, the summary's types (:mod:`.summary_types`), the registry of columns and fields
(:mod:`.metrics`) and how figures are written (:mod:`.units`). The analyses that fill a
Report live beside it; :func:`dlprof_lite.report.build.build_report` is their entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dlprof_lite.durations import in_ms
from dlprof_lite.errors import OutputError
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.summary_types import Summary
from dlprof_lite.report.units import of_scope
from dlprof_lite.rules.outputs import FORMATS

if TYPE_CHECKING:
    from dlprof_lite.report.critical.prediction import Prediction

RANK_INTS = ("rank", "pid", "device_id", "steps", "compute_ns", "comm_ns", "exposed_comm_ns",
             "comm_kernels", "data_ns", "kernels", "kernel_ns")  # fmt: skip
TIMELINE_TEXT = ("kind", "name", "full_name", "domain", "layer", "phase", "track")
TIMELINE_INTS = ("pid", "tid", "device_id", "stream_id", "depth", "correlation_id")


def analysed_mask(iterations: pd.DataFrame) -> np.ndarray:
    """The analysed steps among ``iterations`` (a Profile's or the report's table): inside the
    window and not warm-up. Every step statistic uses these, and only these."""
    if iterations.empty:
        return np.zeros(0, dtype=bool)
    mask: np.ndarray = (iterations["in_window"].to_numpy(dtype=bool)
                        & ~iterations["warmup"].to_numpy(dtype=bool))  # fmt: skip
    return mask


def analysed(iterations: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`analysed_mask`."""
    if iterations.empty:
        return iterations
    kept: pd.DataFrame = iterations.loc[analysed_mask(iterations)]
    return kept


def empty_report(table: str) -> pd.DataFrame:
    """A report table with its declared columns (object dtype) and no rows."""
    names = column_names(table)
    return pd.DataFrame(np.empty((0, len(names)), dtype=object), columns=names)


def empty_ranks() -> pd.DataFrame:
    """The ranks table with no rows, typed as a filled one."""
    return typed_ranks(empty_report("ranks"))


def typed_ranks(frame: pd.DataFrame) -> pd.DataFrame:
    """The ranks table's declared column order and dtypes."""
    out = frame.reindex(columns=column_names("ranks"))
    types: dict[str, str] = {c: "Int64" for c in RANK_INTS}
    types.update({c: "float64" for c in column_names("ranks")
                  if c not in RANK_INTS and c != "straggler"}, straggler="bool")  # fmt: skip
    typed: pd.DataFrame = out.astype(types)
    return typed


IDLE_TEXT = ("kind", "cause", "layer", "phase")


def empty_idle() -> pd.DataFrame:
    """The idle table with no rows, typed as a filled one."""
    return typed_idle(empty_report("idle"))


def typed_idle(frame: pd.DataFrame) -> pd.DataFrame:
    """The idle table's declared column order and dtypes."""
    out = frame.reindex(columns=column_names("idle")).reset_index(drop=True)
    types = {c: object for c in IDLE_TEXT} | {"total_ns": "int64"}
    types |= {c: "float64" for c in ("step_mean_ns", "step_median_ns", "share_pct", "step_pct")}
    typed: pd.DataFrame = out.astype(types)
    return typed


CRITICAL_TEXT = ("part", "layer", "phase", "track", "name")


def empty_critical() -> pd.DataFrame:
    return typed_critical(empty_report("critical"), "critical")


def empty_critical_path() -> pd.DataFrame:
    return typed_critical(empty_report("critical_path"), "critical_path")


def typed_critical(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """The critical or critical_path table's declared column order and dtypes."""
    return _typed(frame, table, CRITICAL_TEXT, ("step_mean_ns", "share_pct"))


def _typed(frame: pd.DataFrame, table: str, text: tuple[str, ...], floats: tuple[str, ...],
           bools: tuple[str, ...] = ()) -> pd.DataFrame:  # fmt: skip
    """``table``'s declared column order; ``text`` columns object (a missing one None, as a
    folder reads it back, not NaN), ``bools`` bool, ``floats`` float64, the rest int64."""
    out = frame.reindex(columns=column_names(table)).reset_index(drop=True)
    types: dict[str, object] = {}
    for c in out.columns:
        types[c] = (object if c in text else "bool" if c in bools
                    else "float64" if c in floats else "int64")  # fmt: skip
    typed: pd.DataFrame = out.astype(types)  # type: ignore[arg-type]
    for c in text:
        if c in typed.columns:
            typed[c] = typed[c].where(typed[c].notna(), None)
    return typed


COLLECTIVE_TEXT = ("group", "op", "dtype", "layer", "pass")
COLLECTIVE_BOOLS = ("complete", "async", "fsdp")
COLLECTIVE_FLOATS = ("bytes_mean", "transfer_median_ns", "wait_mean_ns", "wait_share",
                     "algbw_gbps", "busbw_gbps", "exposed_ns", "calls_per_step", "time_ns",
                     "transfer_ns", "wait_ns", "hidden_ns", "exposed_step_ratio")  # fmt: skip


def empty_collectives() -> pd.DataFrame:
    return typed_collectives(empty_report("collectives"), "collectives")


def empty_collective_ops() -> pd.DataFrame:
    return typed_collectives(empty_report("collective_ops"), "collective_ops")


def empty_collective_layers() -> pd.DataFrame:
    return typed_collectives(empty_report("collective_layers"), "collective_layers")


def typed_collectives(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """A collectives table's (collectives, collective_ops, collective_layers) declared column
    order and dtypes."""
    return _typed(frame, table, COLLECTIVE_TEXT, COLLECTIVE_FLOATS, COLLECTIVE_BOOLS)


def empty_timeline() -> pd.DataFrame:
    """The timeline table with no rows, typed as a filled one."""
    return typed_timeline(empty_report("timeline"))


def typed_timeline(frame: pd.DataFrame) -> pd.DataFrame:
    """Declared column order and dtypes: times int64, ids nullable Int64, text categorical."""
    out = frame.reindex(columns=column_names("timeline")).reset_index(drop=True)
    # Text as object first: a column no event has (no ranges: no domain) would otherwise
    # become a category of float64, and read back as one of object.
    out = out.astype({c: object for c in TIMELINE_TEXT})
    types: dict[str, str] = {c: "Int64" for c in TIMELINE_INTS}
    types.update({c: "category" for c in TIMELINE_TEXT}, start_ns="int64", end_ns="int64",
                 iteration="Int64")  # fmt: skip
    typed: pd.DataFrame = out.astype(types)
    # A negative correlation id is none (ingest reads a NULL one as -1; nsys writes ids >= 0).
    corr = typed["correlation_id"]
    typed["correlation_id"] = corr.mask(corr < 0)
    return typed


TABLES = ("summary", "kernels", "ranges", "layers", "iterations", "advice", "timeline",
          "ranks", "idle", "critical", "critical_path", "collectives",
          "collective_ops", "collective_layers")  # fmt: skip
WINDOWED = ("kernels", "ranges", "layers")  # tables over the window (report/steps/window.py)


@dataclass(frozen=True)
class Report:
    """One analysed profile: the typed ``summary`` and one DataFrame per table.

    ``kernels``, ``ranges``, ``layers``, ``iterations``, ``advice``, ``timeline``, ``ranks``
    and ``idle`` are the tables the report folder holds (their columns: the metric registry,
    :mod:`dlprof_lite.report.metrics`). Frozen and complete when built; ``save`` writes the
    folder, :func:`dlprof_lite.open_report` reads it back equal."""

    summary: Summary
    kernels: pd.DataFrame
    ranges: pd.DataFrame
    layers: pd.DataFrame
    iterations: pd.DataFrame
    advice: pd.DataFrame
    # One steady iteration's events, capped (report/timeline.py); a folder written before
    # the timeline existed reads back with none.
    timeline: pd.DataFrame = field(default_factory=empty_timeline)
    # Communication vs compute per (process, device) and the straggler (report/ranks/table.py);
    # a folder written before it existed reads back with none.
    ranks: pd.DataFrame = field(default_factory=empty_ranks)
    # Why the devices wait and where the main thread's step goes, per cause, layer and phase
    # (report/idle/); a folder written before it existed reads back with none.
    idle: pd.DataFrame = field(default_factory=empty_idle)
    # The critical path: its parts over the analysed steps, and the timeline iteration's
    # path piece by piece (report/critical/); a folder written before them reads back empty.
    critical: pd.DataFrame = field(default_factory=empty_critical)
    critical_path: pd.DataFrame = field(default_factory=empty_critical_path)
    # Collectives matched across ranks, per instance and rank, and per op and size
    # (report/collectives/); a folder written before them reads back empty.
    collectives: pd.DataFrame = field(default_factory=empty_collectives)
    collective_ops: pd.DataFrame = field(default_factory=empty_collective_ops)
    # Collectives per layer and pass (report/collectives/layers.py); empty before it existed.
    collective_layers: pd.DataFrame = field(default_factory=empty_collective_layers)

    def table(self, name: str) -> pd.DataFrame:
        """A report table by name (``summary`` is its one-row flat form)."""
        if name == "summary":
            return pd.DataFrame([self.summary.row()], columns=column_names("summary"))
        frame: pd.DataFrame = getattr(self, name)
        return frame

    def save(
        self,
        folder: str | Path,
        *,
        formats: Sequence[str] = FORMATS,
        force: bool = False,
    ) -> Path:
        """Write this report as a folder, the way the command line does: staged and renamed
        into place (never half written), an existing folder replaced only with ``force``."""
        from dlprof_lite.render.output import write_report  # the one way back (render)

        unknown = sorted(set(formats) - set(FORMATS))
        if unknown or not formats:
            raise OutputError(f"unknown report format(s) {unknown or list(formats)}; "
                              f"choose from {', '.join(FORMATS)}")  # fmt: skip
        return write_report(self, Path(folder), tuple(formats), force=force)

    @classmethod
    def open(cls, folder: str | Path) -> Report:
        """Read a report folder back (written by :meth:`save` or the command line)."""
        from dlprof_lite.render.reader import open_report  # the one way back (render)

        return open_report(folder)

    def what_if(self, *scales: str, nsys: str | None = None) -> Prediction:
        """The predicted step time with some work scaled, e.g. ``report.what_if(
        "layer=conv2:0.5", "phase=data:0")``: the profile this report was analysed from is
        read again and its steps' graph replayed (docs/critical-path.md)."""
        from dlprof_lite.whatif import predict_from

        return predict_from(self, scales, nsys=nsys)

    def __repr__(self) -> str:
        return "\n".join(describe(self))

    def with_source(self, source: str) -> Report:
        """The same report naming another input file (a new Report; this one is unchanged)."""
        system = replace(self.summary.system, source=source)
        return replace(self, summary=replace(self.summary, system=system))


def describe(report: Report) -> list[str]:
    """The short ``repr``: source, GPUs, iterations, steady step time, top layer, top advice
    (at most 8 lines; the tables hold the rest)."""
    s = report.summary
    gpus = ", ".join(
        f"{g.name or '?'} (device {g.device_id}" + (f", pid {g.pid}" if g.pid is not None else "")
        + (f", busy {g.utilization:.0%} of {of_scope(s.totals.utilization_scope)})"
           if g.utilization is not None else ")")
        for g in s.gpus[:4]
    ) + (f", ... ({len(s.gpus)} in all)" if len(s.gpus) > 4 else "")  # fmt: skip
    it = s.iterations
    steps = "no iterations found"
    if it.iterations_count:
        steps = (f"{it.iterations_count} iterations ({it.iterations_warmup} warm-up, "
                 f"{s.window.iterations_analysed} analysed) of {s.window.key_range!r}")  # fmt: skip
    return [
        f"<Report of {s.system.source}>",
        f"  GPUs: {gpus or 'none with GPU work'}",
        f"  iterations: {steps}",
        f"  steady step: {_duration(it.iterations_median_ns)} median"
        f" ({_duration(it.iterations_mean_ns)} mean)",
        f"  top layer: {_top_layer(report.layers)}",
        "  top advice: " + (f"[{s.advice[0].severity}] {s.advice[0].problem}" if s.advice
                            else "nothing stands out"),
        "  tables: " + ", ".join(f"{n} {len(report.table(n))}" for n in TABLES[1:]),
    ]  # fmt: skip


def _duration(ns: float | None) -> str:
    return "-" if ns is None else in_ms(ns, 3)


def _top_layer(layers: pd.DataFrame) -> str:
    """The layer with the most self time per step (in the window without steps): its own
    kernels' GPU time, else (a CPU run) its own forward + backward host time."""
    if layers.empty:
        return "- (no layer ranges)"
    gpu = pd.to_numeric(layers["gpu_ns"], errors="coerce").fillna(0)
    cpu = float(gpu.max()) == 0
    per_step = pd.to_numeric(layers["step_self_wall_ns"], errors="coerce").notna().any()
    if per_step:
        own = pd.to_numeric(layers["step_self_wall_ns" if cpu else "step_self_gpu_ns"])
    else:
        own = layers["self_forward_wall_ns"] + layers["self_backward_wall_ns"] if cpu else gpu
    what = ("host (self)" if cpu else "GPU (self)") + (" per step" if per_step else "")
    row = layers.iloc[int(own.to_numpy().argmax())]
    kind = f" ({row['type']})" if isinstance(row["type"], str) and row["type"] else ""
    return f"{row['layer']}{kind}, {_duration(float(own.max()))} {what}"
