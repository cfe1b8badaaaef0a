"""From one :class:`Profile` to one :class:`Report`: every table, the summary and the advice.

The report stage's single entry point: :func:`build_report` calls the pure table functions in
order and bundles their results. A ``Report`` holds only DataFrames and plain values, so it
pickles (a process pool may build it) and re-renders without the Profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from dlprof_lite.errors import OutputError
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.advice import advice_rows, advise
from dlprof_lite.report.denominators import of_scope, share_span
from dlprof_lite.report.frames import empty_report
from dlprof_lite.report.layers import layers_table
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.projection import ProjectionInput
from dlprof_lite.report.ranks import communication_summary, empty_ranks, ranks_table
from dlprof_lite.report.steps import device_count, iterations_table
from dlprof_lite.report.summary import summarize
from dlprof_lite.report.summary_types import Communication, Summary
from dlprof_lite.report.tables import kernels_table, ranges_table
from dlprof_lite.report.timeline import (
    TIMELINE_MAX_EVENTS,
    empty_timeline,
    report_timeline,
    timeline_bounds,
)
from dlprof_lite.report.window import choose_window, cut_ops, cut_ranges, step_of
from dlprof_lite.rules.outputs import FORMATS

TABLES = ("summary", "kernels", "ranges", "layers", "iterations", "advice", "timeline",
          "ranks")  # fmt: skip
WINDOWED = ("kernels", "ranges", "layers")  # tables over the window (report/window.py)


@dataclass(frozen=True)
class Report:
    """One analysed profile: the typed ``summary`` and one DataFrame per table.

    ``kernels``, ``ranges``, ``layers``, ``iterations``, ``advice``, ``timeline`` and
    ``ranks`` are the tables the report folder holds (their columns: the metric registry,
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
    # Communication vs compute per (process, device) and the straggler (report/ranks.py);
    # a folder written before it existed reads back with none.
    ranks: pd.DataFrame = field(default_factory=empty_ranks)

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
        from dlprof_lite.report.output import write_report

        unknown = sorted(set(formats) - set(FORMATS))
        if unknown or not formats:
            raise OutputError(f"unknown report format(s) {unknown or list(formats)}; "
                              f"choose from {', '.join(FORMATS)}")  # fmt: skip
        return write_report(self, Path(folder), tuple(formats), force=force)

    def __repr__(self) -> str:
        return "\n".join(describe(self))

    def with_source(self, source: str) -> Report:
        """The same report naming another input file (a new Report; this one is unchanged)."""
        system = replace(self.summary.system, source=source)
        return replace(self, summary=replace(self.summary, system=system))


def build_report(
    profile: Profile,
    *,
    all_iterations: bool = False,
    projection: ProjectionInput | None = None,
    timeline_cap: int = TIMELINE_MAX_EVENTS,
    between_tables: Callable[[], object] = lambda: None,
) -> Report:
    """Every table of ``profile``: kernels, ranges and layers over the analysed window (the
    whole run with ``all_iterations`` or without iterations; report/window.py); the summary's
    projection from ``projection`` (the user's steps per epoch and epochs), else from the
    DataLoader's length and one epoch (report/projection.py); the timeline: one steady
    iteration's events, at most ``timeline_cap`` (report/timeline.py). ``between_tables``
    is called after each large table: the command line hands freed memory back there."""
    devices = device_count(profile.kernels, profile.memops, profile.gpus)
    meta = profile.meta
    window = choose_window(profile.iterations, (meta.session_start_ns, meta.session_end_ns),
                           all_iterations=all_iterations)  # fmt: skip
    kernels, memops = cut_ops(profile.kernels, window), cut_ops(profile.memops, window)
    ranges = cut_ranges(
        profile.ranges, step_of(profile.ranges["start_ns"].to_numpy(), profile.iterations), window
    )
    between_tables()
    layers = layers_table(kernels, ranges, profile.iterations, window,
                          marks=profile.marks, gpus=profile.gpus)  # fmt: skip
    between_tables()
    iterations = iterations_table(
        profile.kernels, profile.memops, profile.ranges, profile.iterations, devices
    )
    between_tables()
    timeline, shown, timeline_warnings = report_timeline(profile, timeline_cap)
    shown_from, shown_to = timeline_bounds(timeline)
    fields = {**window.fields(), "window_kernel_ns": int(kernels["dur_ns"].sum()),
              "timeline_iteration": shown, "timeline_start_ns": shown_from,
              "timeline_end_ns": shown_to}  # fmt: skip
    found = summarize(profile, iterations, layers, devices, projection, window=fields)
    between_tables()
    ranks = ranks_table(profile, window)
    between_tables()
    span = share_span(profile)[0]  # the summary's: its warning is the summary's
    communication = Communication.from_values(
        communication_summary(ranks, span.length_ns, span.scope)
    )
    found = replace(found, warnings=(*found.warnings, *timeline_warnings),
                    communication=communication)  # fmt: skip
    summary = replace(found, advice=tuple(advise(found, layers)))
    rows = advice_rows(list(summary.advice))
    advice = pd.DataFrame(rows, columns=column_names("advice")) if rows else empty_report("advice")
    return Report(
        summary=summary,
        kernels=kernels_table(kernels),
        ranges=ranges_table(kernels, memops, ranges),
        layers=layers,
        iterations=iterations,
        advice=advice,
        timeline=timeline,
        ranks=ranks,
    )


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
    return "-" if ns is None else f"{ns / 1e6:.3f} ms"


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
