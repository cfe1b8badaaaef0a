"""report.html: one self-contained page from a :class:`Report` (its tables and summary only).

Place in the pipeline: report (rendering; the CLI writes the page into the report folder).
Sections, each ``<section id=...>`` with an ``<h2>``, left out when the report has nothing
for them: ``header`` (source, GPUs, versions, window, step time and its spread, projection,
annotation cost), ``steps`` (step breakdown), ``idle`` (why the GPU waits, or where a CPU
run's host time goes, step by step), ``critical`` (the critical path by layer and part),
``layers`` (chart and sortable table),
``iterations``, ``kernels``, ``advice``, ``timeline``. On a CPU-only run the GPU parts are
hidden, not drawn as zeros. Charts: render/page/charts.py; tables: render/page/html_tables.py; the
page frame and plotly.js: render/page/plotly_bundle.py.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.render.page.charts import (
    containers,
    iterations_figure,
    kernels_figure,
    layer_columns,
    layers_figure,
    steps_figure,
)
from dlprof_lite.render.page.cost_chart import cost_figure, cost_layers
from dlprof_lite.render.page.critical_chart import critical_figure, critical_rows
from dlprof_lite.render.page.html_tables import (
    advice_list,
    facts_table,
    kernels_table,
    layer_table,
    plain,
)
from dlprof_lite.render.page.idle_chart import idle_figure
from dlprof_lite.render.page.memory_chart import memory_figure
from dlprof_lite.render.page.plotly_bundle import Chart, document, esc, section
from dlprof_lite.render.page.timeline_chart import timeline_figure
from dlprof_lite.render.phrases import share_of, step_phrase, tc_phrase
from dlprof_lite.report.model import Report
from dlprof_lite.report.summary_types import Summary, number
from dlprof_lite.report.units import bytes_text, duration, flops, percent
from dlprof_lite.rules.critical import PARTS

TOP_KERNEL_ROWS = 20


def has_gpu(summary: Summary) -> bool:
    """The run did GPU work (kernels or memory operations)."""
    t = summary.totals
    return any(number(c) for c in (t.kernel_count, t.memcpy_count, t.memset_count))


def _window_line(s: Summary) -> str:
    w = s.window
    if w.window_iter_start is None or w.window_iter_stop is None:
        return f"{w.window_scope or 'whole run'} (no iterations found)"
    last = w.window_iter_stop - 1
    return (f"iterations {w.window_iter_start}–{last} ({w.window_steps} steps, "
            f"{w.window_scope}); key range {w.key_range!r} ({w.key_range_source})")  # fmt: skip


def _gpus_line(s: Summary) -> str:
    if not s.gpus:
        return s.system.gpu_names or "none with GPU work"
    scope = s.totals.utilization_scope
    return "; ".join(
        f"{g.name or '?'} (device {g.device_id}"
        + (f", cc {g.compute_capability}" if g.compute_capability else "")
        + (f", busy {share_of(g.utilization, scope)})" if g.utilization is not None else ")")
        for g in s.gpus[:8]
    ) + (f"; ... {len(s.gpus)} in all" if len(s.gpus) > 8 else "")  # fmt: skip


def _projection_line(s: Summary) -> str:
    p = s.projection
    if p.projection_epoch_ns is None:
        return "unknown (steps per epoch not known: pass --steps-per-epoch)"
    return (f"{duration(p.projection_epoch_ns)} per epoch (p10 "
            f"{duration(p.projection_epoch_p10_ns)} – p90 {duration(p.projection_epoch_p90_ns)}"
            f"), {p.projection_steps_per_epoch} steps ({p.projection_steps_source}); "
            f"{p.projection_epochs} epoch(s): {duration(p.projection_train_ns)}")  # fmt: skip


def header_rows(report: Report) -> list[tuple[str, str]]:
    """The header's facts, each a (label, text) pair; unknown facts are left out."""
    s = report.summary
    sy, it = s.system, s.iterations
    versions = ", ".join(
        f"{k} {v}" for k, v in (("torch", sy.torch_version), ("CUDA", sy.cuda_version),
                                ("Python", sy.python_version), ("driver", sy.driver_version),
                                ("CUDA driver", sy.cuda_driver_version),
                                ("nsys", sy.nsys_version)) if v
    )  # fmt: skip
    rows = [
        ("source", plain(sy.source)),
        ("host", " / ".join(v for v in (sy.host, sy.os) if v) or "-"),
        ("versions", versions or "-"),
        ("command", plain(sy.command)),
        ("GPUs", _gpus_line(s)),
        ("analysed window", _window_line(s)),
        ("iterations", f"{it.iterations_count or 0} found, {it.iterations_warmup or 0} warm-up, "
                       f"{s.window.iterations_analysed or 0} analysed"),
        ("steady step time", step_phrase(s)),
        ("projected epoch time", _projection_line(s)),
    ]  # fmt: skip
    cost = s.annotation_cost
    if cost.annotation_cost_ns is not None:
        rows.append(
            (
                "annotation cost",
                f"{duration(cost.annotation_cost_ns)} per step "
                f"({plain(cost.annotation_cost_pct)}% of the step)",
            )
        )
    if has_gpu(s):
        rows += [
            ("GPU busy", share_of(s.totals.gpu_utilization, s.totals.utilization_scope)),
            ("GPU busy in the steps", share_of(s.step.step_utilization, "iterations")),
            ("Tensor Core share", tc_phrase(s)),
            ("launch overhead", share_of(s.launch_overhead.launch_overhead_pct,
                                         s.launch_overhead.launch_overhead_scope, scale=1.0)),
        ]  # fmt: skip
        coverage = s.launch_overhead.launch_coverage
        if coverage is not None and coverage < 1:
            rows.append(("GPU operations with their launch call", percent(coverage)))
    return [(k, v) for k, v in rows if v != "-"]


def _header(report: Report) -> str:
    body = [facts_table("run-facts", header_rows(report))]
    if report.summary.warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in report.summary.warnings[:50])
        body.append(f'<details><summary>{len(report.summary.warnings)} warning(s)</summary>'
                    f"<ul>{items}</ul></details>")  # fmt: skip
    return section("header", "Run", body)


def _steps(report: Report, gpu: bool) -> str | None:
    fig = steps_figure(report.summary, gpu=gpu)
    if fig is None:
        return None
    note = (
        (
            '<p class="note">GPU: device time per phase; launch overhead is GPU idle time the '
            "CPU caused (host-bound gaps). Host: time in each phase's ranges.</p>"
        )
        if gpu
        else ""
    )
    return section("steps", "Step breakdown", [Chart("steps", fig).html(), note])


def _idle(report: Report, gpu: bool) -> str | None:
    fig = idle_figure(report.iterations, gpu=gpu)
    if fig is None:
        return None
    if gpu:
        title = "Why the GPU waits"
        what = ("Each analysed step's GPU idle time (every device's, summed), split by what "
                "the thread that launched the next GPU work was doing (queued: that work was "
                "launched already): the causes add up to the step's idle time (iterations.csv "
                "idle_<cause>_ns; idle.csv names the layers).")
    else:
        title = "Where the step goes (host)"
        what = ("No GPU work: each analysed step's time on the main thread, split by what it "
                "was doing: the causes add up to the step's time (iterations.csv "
                "host_<cause>_ns; idle.csv names the layers).")
    note = f'<p class="note">{esc(what)}</p>'
    return section("idle", title, [Chart("idle", fig).html(), note])


def _critical(report: Report) -> str | None:
    fig, left = critical_figure(report.critical)
    if fig is None:
        return None
    table = report.critical
    parts = table.groupby("part", sort=False)["share_pct"].sum()
    said = ", ".join(f"{p} {percent(parts[p], 1)}" for p in PARTS if p in parts.index)
    grid = critical_rows(table)
    top = next((str(r) for r in grid.index if not str(r).startswith("[")), None)
    what = ("Each analysed step's critical path: the chain of dependencies (thread and stream "
            "order, launches, syncs, waits for other streams and threads) that set its time, "
            f"walked back from its last work. Of the paths: {said}. Speeding up work off the "
            "path gains nothing; critical.csv has every row, critical_path.csv the timeline "
            "iteration's path, drawn on the timeline below.")
    if top is not None:
        what += (" What a fix would gain: dlprof-lite whatif REPORT --scale "
                 f"layer={top}:0.5 (docs: critical-path.md).")
    if left:
        what += f" +{left} smaller rows not in the chart."
    return section("critical", "Critical path", [Chart("critical", fig).html(),
                                                 f'<p class="note">{esc(what)}</p>'])


def _layers(report: Report, gpu: bool) -> str | None:
    fig, left = layers_figure(report.layers, gpu=gpu)
    if fig is None:
        return None
    note = f'<p class="note">+{left} smaller layers not in the chart</p>' if left else ""
    pattern, per_step = layer_columns(report.layers)
    table = layer_table(report.layers, gpu=gpu, per_step=per_step)
    return section("layers", "Layers", [Chart("layers", fig).html(), note,
                                        _containers_note(report.layers, pattern, gpu), table])


def _cost(report: Report) -> str | None:
    fig = cost_figure(report.layers)
    if fig is None:
        return None
    c = report.summary.cost
    parts = [f"the model: {flops(c.model_flops_per_step)} per step",
             f"{flops(c.model_flops_per_s, 'FLOP/s')} over the median step"]  # fmt: skip
    if number(c.mfu) is not None:
        parts.append(f"MFU {percent(c.mfu)} of the {c.mfu_gpu}'s dense peak")
    shown, _ = cost_layers(report.layers)
    note = (f'<p class="note">{esc("; ".join(parts))}. The {len(shown)} layers with the most '
            "time per step that do counted work (matmul, convolution, attention); "
            "layers.csv has every layer's step_flops, achieved_flops_per_s and mfu.</p>")
    return section("cost", "Cost per layer", [Chart("cost", fig).html(), note])


def _memory(report: Report) -> str | None:
    fig = memory_figure(report.layers)
    if fig is None:
        return None
    m = report.summary.memory
    parts = [f"{label} {bytes_text(getattr(m, f'memory_{c}'))}" for label, c in (
        ("parameters", "param_bytes"), ("gradients", "gradient_bytes"),
        ("optimizer state", "optimizer_bytes"), ("saved activations", "saved_bytes"))]
    if m.memory_gpu_peak_bytes is not None:
        parts.append(f"GPU allocator peak of the step {bytes_text(m.memory_gpu_peak_bytes)}, "
                     f"{bytes_text(m.memory_gpu_unexplained_bytes)} of it in none of these")
    note = f'<p class="note">In all: {esc("; ".join(parts))}.</p>'
    return section("memory", "Memory per layer", [Chart("memory", fig).html(), note])


def _containers_note(layers: pd.DataFrame, pattern: str, gpu: bool) -> str:
    """The layers that hold others (a root, a block), shown apart from the chart's leaves:
    their inclusive forward and backward time would repeat their layers' (charts.containers)."""
    held = containers(layers)
    if held.all() or not held.any():
        return ""
    view = "gpu" if gpu else "wall"
    parts = []
    for row in layers[held.to_numpy()].sort_values("order").head(20).to_dict("records"):
        fwd, bwd = (duration(row.get(pattern.format(d=d, v=view))) for d in ("forward", "backward"))
        parts.append(f"{esc(row['layer'])} ({esc(row['type'])}) {fwd} forward + {bwd} backward")
    what = "per step" if "step_" in pattern else "whole run"
    return (f'<p class="note">Containers, not charted beside the layers they hold (inclusive '
            f"{'GPU' if gpu else 'wall'} time {what}): " + "; ".join(parts) + "</p>")


def _iterations(report: Report, gpu: bool) -> str | None:
    fig = iterations_figure(report.iterations, report.summary, gpu=gpu)
    if fig is None:
        return None
    return section("iterations", "Iterations", [Chart("iterations", fig).html()])


def _kernels(report: Report) -> str | None:
    fig = kernels_figure(report.kernels, TOP_KERNEL_ROWS)
    if fig is None:
        return None
    left = len(report.kernels) - TOP_KERNEL_ROWS
    note = f'<p class="note">top {TOP_KERNEL_ROWS} of {len(report.kernels)} kernels by GPU ' \
           "time; kernels.csv has all</p>" if left > 0 else ""  # fmt: skip
    return section("kernels", "Top kernels", [Chart("kernels", fig).html(),
                                               kernels_table(report.kernels, TOP_KERNEL_ROWS),
                                               note])  # fmt: skip


def _ranks(report: Report) -> str | None:
    from dlprof_lite.render.page.rank_views import ranks_figure, ranks_table_html

    fig = ranks_figure(report.ranks)
    if fig is None:
        return None
    parts = [Chart("ranks", fig).html(), ranks_table_html(report.ranks)]
    calls = getattr(report, "collectives", None)
    if calls is not None and len(calls):
        from dlprof_lite.render.page.collective_views import (
            layers_table_html,
            ops_table_html,
            waits_figure,
        )

        waits = waits_figure(calls, report.summary.window.window_steps or 1)
        if waits is not None:
            parts.append(Chart("ranks-waits", waits).html())
        parts.append(ops_table_html(report.collective_ops))
        if len(report.collective_layers):
            parts.append(layers_table_html(report.collective_layers))
        parts.append('<p class="note">collectives.csv has every call of every rank: its wait '
                     "(its duration less the instance's fastest) and the rank that arrived "
                     "last</p>")
    return section("ranks", "Ranks", parts)


def _advice(report: Report) -> str | None:
    if report.advice.empty:
        return None
    return section("advice", "Advice", [advice_list(report.advice)])


def _timeline(report: Report) -> str | None:
    frame = report.timeline
    if frame.empty:
        return None
    it = report.summary.window.timeline_iteration
    bounds = _iteration_bounds(report.iterations, it)
    span = f"Iteration {it}" if it is not None else "The busiest stretch"
    fig, left = timeline_figure(frame, iteration=bounds, what=span, critical=report.critical_path)
    if fig is None:
        return None
    what = f"iteration {it}" if it is not None else (
        "no iterations: the busiest stretch of the session, shown from its first GPU "
        "operation to its last (double-click the chart twice for all of it)")  # fmt: skip
    note = f'<p class="note">{esc(what)}; the {left} shortest events are left out</p>' if left \
        else f'<p class="note">{esc(what)}; trace.json opens it in Perfetto</p>'  # fmt: skip
    title = "Timeline of one iteration" if it is not None else "Timeline of the busiest stretch"
    return section("timeline", title, [Chart("timeline", fig).html(), note])


def _iteration_bounds(iterations: pd.DataFrame, it: object) -> tuple[int, int] | None:
    """(start, end) ns of iteration ``it`` from the iterations table, None when unknown."""
    if not isinstance(it, int) or iterations.empty:
        return None
    row = iterations[iterations["iteration"] == it]
    if row.empty:
        return None
    return int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])


def report_page(report: Report) -> str:
    """The whole report.html of ``report`` (see the module docstring)."""
    gpu = has_gpu(report.summary)
    parts = [
        _header(report),
        _steps(report, gpu),
        _idle(report, gpu),
        _critical(report),
        _layers(report, gpu),
        _cost(report),
        _memory(report),
        _iterations(report, gpu),
        _kernels(report) if gpu else None,
        _ranks(report),
        _advice(report),
        _timeline(report),
    ]
    source = report.summary.system.source or "profile"
    return document(f"dlprof-lite: {source}", f"dlprof-lite report: {source}",
                    [p for p in parts if p is not None])  # fmt: skip
