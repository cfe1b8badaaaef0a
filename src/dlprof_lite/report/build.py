"""From one :class:`Profile` to one :class:`Report`: every table, the summary and the advice.

The report stage's single entry point: :func:`build_report` calls the pure table functions in
order and bundles their results. A ``Report`` holds only DataFrames and plain values, so it
pickles (a process pool may build it) and re-renders without the Profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from dlprof_lite.forked import Forked, worth_forking
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.advice import advice_rows, advise
from dlprof_lite.report.collectives.calls import calls_of, pipelined
from dlprof_lite.report.collectives.instances import match, op_summary, rank_waits
from dlprof_lite.report.collectives.layers import layer_table
from dlprof_lite.report.critical.graph import build_graph
from dlprof_lite.report.critical.path import critical_paths
from dlprof_lite.report.critical.table import critical_table, path_pieces
from dlprof_lite.report.denominators import share_span
from dlprof_lite.report.idle.partition import idle_sums
from dlprof_lite.report.idle.state import Threads
from dlprof_lite.report.idle.table import idle_table
from dlprof_lite.report.layers.table import layers_table
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.model import Report, empty_report, typed_collectives
from dlprof_lite.report.ranks.table import (
    communication_summary,
    process_spans,
    ranks_table,
    straggler_layer,
)
from dlprof_lite.report.steps.projection import ProjectionInput
from dlprof_lite.report.steps.table import device_count, iterations_table
from dlprof_lite.report.steps.window import choose_window, cut_ops, cut_ranges, step_of
from dlprof_lite.report.summary import summarize
from dlprof_lite.report.summary_types import Communication
from dlprof_lite.report.tables import kernels_table, ranges_table
from dlprof_lite.report.timeline import (
    TIMELINE_MAX_EVENTS,
    report_timeline,
    steady_iteration,
    timeline_bounds,
)


def build_report(
    profile: Profile,
    *,
    all_iterations: bool = False,
    projection: ProjectionInput | None = None,
    timeline_cap: int = TIMELINE_MAX_EVENTS,
    between_tables: Callable[[], object] = lambda: None,
    parallel: bool = False,
) -> Report:
    """Every table of ``profile``: kernels, ranges and layers over the analysed window (the
    whole run with ``all_iterations`` or without iterations; report/steps/window.py); the summary's
    projection from ``projection`` (the user's steps per epoch and epochs), else from the
    DataLoader's length and one epoch (report/steps/projection.py); the timeline: one steady
    iteration's events, at most ``timeline_cap`` (report/timeline.py). ``between_tables``
    is called after each large table: the command line hands freed memory back there.
    ``parallel``: the host's analyses may run in a forked copy (forked.py)."""
    devices = device_count(profile.kernels, profile.memops, profile.gpus)
    meta = profile.meta
    window = choose_window(profile.iterations, (meta.session_start_ns, meta.session_end_ns),
                           all_iterations=all_iterations)  # fmt: skip
    # The host's analyses (the idle causes, the critical path) read only the profile: a
    # forked copy computes them beside the tables below where it may (forked.py), else
    # they come first, while no table's copy of the ops is held (their transients then
    # raise the peak least).
    ops = len(profile.kernels) + len(profile.memops)
    with Forked(lambda: _host_analyses(profile, devices, between_tables),
                fork=parallel and worth_forking(ops)) as host:  # fmt: skip
        timeline, shown, timeline_warnings = report_timeline(profile, timeline_cap)
        kernels, memops = cut_ops(profile.kernels, window), cut_ops(profile.memops, window)
        ranges = cut_ranges(
            profile.ranges, step_of(profile.ranges["start_ns"].to_numpy(), profile.iterations),
            window,
        )
        between_tables()
        layers = layers_table(kernels, ranges, profile.iterations, window,
                              facts=profile.facts, gpus=profile.gpus)  # fmt: skip
        between_tables()
        spans = process_spans(profile, window)  # each process's own analysed steps
        collectives = match(calls_of(profile), window, spans)
        ranks = ranks_table(profile, window, rank_waits(collectives, len(window.steps)), spans)
        kernels_tab, ranges_tab = kernels_table(kernels), ranges_table(kernels, memops, ranges)
        span = share_span(profile)[0]  # the summary's: its warning is the summary's
        communication = Communication.of({
            **communication_summary(ranks, span.length_ns, span.scope, pipelined(profile)),
            **straggler_layer(kernels, ranks),
        })  # fmt: skip
        between_tables()
        sums, critical, critical_path = host.result()
    iterations = iterations_table(
        profile.kernels, profile.memops, profile.ranges, profile.iterations, devices, idle=sums
    )
    between_tables()
    shown_from, shown_to = timeline_bounds(timeline)
    fields = {**window.fields(), "window_kernel_ns": int(kernels["dur_ns"].sum()),
              "timeline_iteration": shown, "timeline_start_ns": shown_from,
              "timeline_end_ns": shown_to}  # fmt: skip
    found = summarize(profile, iterations, layers, devices, projection, window=fields)
    between_tables()
    found = replace(found, warnings=(*found.warnings, *timeline_warnings),
                    communication=communication)  # fmt: skip
    idle = idle_table(sums, iterations, devices)
    collective_ops = op_summary(collectives)
    collective_layers = layer_table(collectives, len(window.steps),
                                    found.iterations.iterations_mean_ns)  # fmt: skip
    summary = replace(found, advice=tuple(advise(found, layers, idle, collective_ops,
                                                 collective_layers)))  # fmt: skip
    rows = advice_rows(list(summary.advice))
    advice = pd.DataFrame(rows, columns=column_names("advice")) if rows else empty_report("advice")
    return Report(
        summary=summary,
        kernels=kernels_tab,
        ranges=ranges_tab,
        layers=layers,
        iterations=iterations,
        advice=advice,
        timeline=timeline,
        ranks=ranks,
        idle=idle,
        critical=critical,
        critical_path=critical_path,
        collectives=typed_collectives(collectives, "collectives"),
        collective_ops=typed_collectives(collective_ops, "collective_ops"),
        collective_layers=typed_collectives(collective_layers, "collective_layers"),
    )


def _host_analyses(
    profile: Profile, devices: int, between: Callable[[], object]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The idle sums and the critical table and path: what the host's activity answers.
    The critical path shows the timeline's iteration (report_timeline)."""
    threads = Threads(profile.api, profile.ranges)  # the host's activity, looked up once
    sums = idle_sums(profile.kernels, profile.memops, profile.api, profile.ranges,
                     profile.iterations, devices, threads)  # fmt: skip
    between()
    critical = _critical(profile, steady_iteration(profile.iterations), between, threads)
    between()
    return sums, *critical


def _critical(
    profile: Profile, shown: int | None, between: Callable[[], object] = lambda: None,
    threads: Threads | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """The critical table and the shown iteration's path; the graph is let go here (a
    million kernels' graph is 76 MB). ``between``: called after the graph is built (its
    transients are the stage's largest)."""
    meta = profile.meta
    graph = build_graph(profile.kernels, profile.memops, profile.api, profile.ranges,
                        profile.iterations, span=(meta.session_start_ns, meta.session_end_ns),
                        threads=threads)  # fmt: skip
    between()
    path = critical_paths(graph)
    return critical_table(graph, path), path_pieces(graph, path, shown)
