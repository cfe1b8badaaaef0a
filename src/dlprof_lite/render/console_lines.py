"""The console summary's lines above its tables: what ran, how the steps were found, where
each step's time goes by phase, and why the GPU waits (a CPU run: where the main thread's
step goes), cause by cause.

Place in the pipeline: render, for :mod:`dlprof_lite.render.console`, which prints them and
the tables below them. Every figure comes from the report (its summary and idle table).
"""

from __future__ import annotations

import pandas as pd
from rich.text import Text

from dlprof_lite.durations import long, span
from dlprof_lite.render.page.html import has_gpu
from dlprof_lite.render.phrases import share_of, step_phrase, tc_phrase
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.model import Report
from dlprof_lite.report.summary_types import Summary, number
from dlprof_lite.report.units import duration as _t
from dlprof_lite.report.units import percent as _pct
from dlprof_lite.rules.critical import PARTS
from dlprof_lite.rules.idle import CAUSE_WORDS, DEVICE, HOST
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable

TOP = 5
IDLE_FLOOR_PCT = 1.0  # a cause under this share of the step is not listed: noise to a reader
IDLE_LAYERS = 2  # layers named beside a cause


def line_text(*parts: str | tuple[str, str]) -> Text:
    """One printable line: ``parts`` are text or (text, style); all of it, names included,
    goes to rich as a ``Text`` with control characters made visible, so neither markup
    (``[/bold]``, ``[link=...]``), emoji codes nor ESC sequences from a name are acted on."""
    return Text.assemble(
        *((printable(p[0]), p[1]) if isinstance(p, tuple) else printable(p) for p in parts)
    )


def header_lines(s: Summary) -> list[str | Text]:
    head = f" {s.system.source}  ({_system(s)})"
    lines: list[str | Text] = [line_text(("dlprof-lite", "bold"), head)]
    several = len({g.pid for g in s.gpus if g.pid is not None}) > 1
    for g in s.gpus:
        who = f" (pid {g.pid})" if several and g.pid is not None else ""
        lines.append(
            f"GPU {g.device_id}{who}: {g.name or '?'} ({g.sm_count or '?'} SMs, "
            f"cc {g.compute_capability or '?'}), busy "
            f"{share_of(g.utilization, s.totals.utilization_scope)}"
        )
    t, lo = s.totals, s.launch_overhead
    lines.append(
        f"session {_t(s.system.wall_ns)} · kernels {t.kernel_count} in {_t(t.kernel_ns)}"
        f" · memcpy {_t(t.memcpy_ns)} · memset {_t(t.memset_ns)} · launch overhead "
        f"{share_of(lo.launch_overhead_pct, lo.launch_overhead_scope, scale=1.0)}"
    )
    if s.totals.kernel_count:
        lines.append(f"Tensor Cores: {tc_phrase(s)}")
    if s.iterations.iterations_count:
        steady = ""
        if s.iterations.steady_start is not None:
            steady = f" · steady window {s.iterations.steady_start}..{s.iterations.steady_stop}"
        lines.append(
            f"iterations {s.iterations.iterations_count} ({s.iterations.iterations_warmup} warm-up,"
            f" {s.window.iterations_analysed} analysed): {step_phrase(s)},"
            f" mean {_t(s.iterations.iterations_mean_ns)}{steady}"
        )
        outside = _outside_line(s)
        lines += [*([outside] if outside else []), *_step_lines(s)]
    projected = _projection_line(s)
    return [*lines, *([projected] if projected else []), _window_line(s)]


def _outside_line(s: Summary) -> str | None:
    """Time in no step (evaluation, logging, checkpoints; after the last step), when any."""
    it = s.iterations
    between, after = number(it.between_steps_ns) or 0, number(it.after_training_ns) or 0
    if not between and not after:
        return None
    return f"outside steps: between steps {long(between)} · after training {long(after)}"


def _system(s: Summary) -> str:
    """``nsys 2024.5.1, host gpu01, driver 550.54.15, torch 2.4.0``: what is known."""
    parts = [f"nsys {s.system.nsys_version or '?'}"]
    for label, value in (("host", s.system.host), ("driver", s.system.driver_version),
                         ("torch", s.system.torch_version)):  # fmt: skip
        if value is not None:
            parts.append(f"{label} {value}")
    return ", ".join(parts)


def _projection_line(s: Summary) -> str | None:
    """The projected epoch and training time (summary ``projection_*``); None without a
    projection, whose reason is already among the warnings."""
    pr = s.projection
    epoch, train = number(pr.projection_epoch_ns), number(pr.projection_train_ns)
    if epoch is None or train is None:
        return None
    low, high = number(pr.projection_epoch_p10_ns), number(pr.projection_epoch_p90_ns)
    spread = f" (p10–p90 {span(low, high)})" if low is not None and high is not None else ""
    epochs = int(number(s.projection.projection_epochs) or 1)
    steps = f"{pr.projection_steps_per_epoch} steps of {_t(pr.projection_step_ns)}"
    source = s.projection.projection_steps_source
    startup = long(number(s.projection.projection_startup_ns) or 0)
    outside = long(number(s.projection.projection_outside_ns) or 0)
    return (
        f"projected: epoch {long(epoch)}{spread}, {steps}"
        f"{f' ({source})' if source else ''}; training {long(train)} for {epochs} "
        f"epoch{'s' if epochs != 1 else ''} (start-up {startup}, outside steps {outside}/epoch)"
    )


def _window_line(s: Summary) -> str:
    """What the layers, kernels and ranges tables cover (the summary's window fields)."""
    scope = s.window.window_scope
    if scope == "analysed":
        first, stop = s.window.window_iter_start, s.window.window_iter_stop
        where = f"iterations {first}..{int(number(stop) or 0) - 1}" if first is not None else "none"
        return (f"tables: the analysed iterations ({where}, {s.window.window_steps} steps; "
                "--all-iterations: the whole run)")  # fmt: skip
    if scope == "whole-run":
        return f"tables: the whole run (per step: all {s.window.window_steps} iterations)"
    return "tables: the whole run (no iterations found: no per-step figures)"


_KEY_RULES = {
    "key-range": "--key-range",
    "numbered-ranges": "the script's numbered ranges, a guess",
    "annotation": "dlprof-lite's annotation: one per optimizer update",
    "forward-backward": "no optimizer: one per training forward and its backward",
    "root-model-calls": "root model calls, a guess",
    "most-repeated": "the most-repeated range, a guess",
}


def _step_lines(s: Summary) -> list[str]:
    """Which rule found the steps, then the mean step on the GPU and on the host.

    A phase the step does not hold (no data phase in the script, none at all without the
    annotation) is left out rather than printed as ``0 ns``, and so is the GPU line of a
    profile without GPU work; ``other`` is the step time no phase covers. Each line adds up
    to the step (GPU: x devices).
    """
    source = str(s.window.key_range_source or "")
    lines = []
    if source in ("annotation", "forward-backward"):
        lines.append(f"steps: {_KEY_RULES[source]} (from its data wait to its end)")
    elif source in _KEY_RULES and s.window.key_range:
        lines.append(f"steps: instances of {s.window.key_range!r} ({_KEY_RULES[source]})")
    gpu = [(p, s.step.gpu_ns(p)) for p in PHASE_COLUMNS]
    host = [(p, s.step.wall_ns(p)) for p in PHASE_COLUMNS]
    has_host = any(v for p, v in host if p != "other")
    shown = [(p, v) for p, v in gpu if nonzero(v) or nonzero(dict(host).get(p))]
    shown.append(("idle", s.step.step_idle_ns))
    if any(nonzero(v) for _, v in gpu):
        lines.append("step (mean, GPU): " + " · ".join(f"{p} {_t(v)}" for p, v in shown))
    if has_host:
        held = [(p, v) for p, v in host if nonzero(v)]
        lines.append("step (mean, host): " + " · ".join(f"{p} {_t(v)}" for p, v in held))
    return lines


def idle_lines(report: Report, top: int = TOP) -> list[Text]:
    """Why the GPU waits (a GPU run; a CPU run: where the main thread's step goes): the causes
    of the idle table (report/idle/table.py) with at least ``IDLE_FLOOR_PCT`` of the step,
    largest first, each with its mean per analysed step and the layers the table names for
    it. Nothing without analysed steps: the table is empty then."""
    gpu = has_gpu(report.summary)
    idle = report.idle
    rows = idle[(idle["kind"] == (DEVICE if gpu else HOST)).to_numpy(bool)]
    if rows.empty:
        return []
    causes = rows.groupby("cause", sort=False)[["step_mean_ns", "step_pct"]].sum()
    causes = causes.sort_values("step_mean_ns", ascending=False, kind="stable")
    total, share = causes["step_mean_ns"].sum(), causes["step_pct"].sum()
    what = (f"idle {_t(total)} per step ({_pct(share, 1)} of the step's device time)" if gpu
            else f"{_t(total)} per step")  # fmt: skip
    lines = [line_text(("Why the GPU waits" if gpu else "Where the step goes (host)", "bold"),
                   f": {what}, by cause (mean per analysed step)")]  # fmt: skip
    shown = causes[(causes["step_pct"] >= IDLE_FLOOR_PCT).to_numpy(bool)]
    for cause, row in shown.head(top).iterrows():
        lines.append(line_text(
            f"  {cause} — {CAUSE_WORDS.get(str(cause), str(cause))}: "
            f"{_t(row['step_mean_ns'])}/step ({_pct(row['step_pct'], 1)} of the step)",
            _idle_layers(rows[(rows["cause"] == cause).to_numpy(bool)]),
        ))  # fmt: skip
    left = len(causes) - min(len(shown), top)
    if left:
        below = "" if len(shown) > top else f", each under {IDLE_FLOOR_PCT:g}% of the step"
        plural = "s" if left > 1 else ""
        lines.append(line_text(f"  +{left} smaller cause{plural}{below} (idle.csv)"))
    return lines


CRITICAL_LAYERS = 3  # layers named on the critical path's line


def critical_lines(report: Report, folder: str | None = None) -> list[Text]:
    """The critical path of the analysed steps (report/critical/): its parts, the layers
    with most of it, and the what-if command that predicts a fix's gain. Nothing without a
    path (no steps, no main thread)."""
    table = report.critical
    if table.empty:
        return []
    parts = table.groupby("part", sort=False)["share_pct"].sum()
    said = " · ".join(f"{p} {_pct(parts[p], 1)}" for p in PARTS if p in parts.index)
    lines = [line_text(("Critical path", "bold"),
                       f" (what sets the step's time): {said}")]  # fmt: skip
    layer = table["layer"].astype(object)
    named = table[(layer.notna() & (layer.astype(str) != "")).to_numpy(bool)]
    if not named.empty:
        by_layer = named.groupby("layer", sort=False)["share_pct"].sum()
        top = by_layer.sort_values(ascending=False, kind="stable").head(CRITICAL_LAYERS)
        lines.append(line_text("  on it most: " + ", ".join(
            f"{name} {_pct(share, 1)}" for name, share in top.items())))  # fmt: skip
        where = folder or "REPORT"
        lines.append(line_text(f"  what a fix would gain: {PROG} whatif {where} --scale "
                               f"layer={top.index[0]}:0.5 (docs: critical-path.md)"))  # fmt: skip
    return lines


def _idle_layers(rows: pd.DataFrame) -> str:
    """``, in conv1 (forward)``: the layers with most of one cause (its rows of the idle
    table), each with its time unless it holds all of the cause; empty when none is named."""
    layer = rows["layer"].astype(object)
    named = rows[(layer.notna() & (layer.astype(str) != "")).to_numpy(bool)]
    if named.empty:
        return ""
    named = named.sort_values("step_mean_ns", ascending=False, kind="stable").head(IDLE_LAYERS)
    places = [f"{r['layer']}" + (f" ({r['phase']})" if isinstance(r["phase"], str) and r["phase"]
                                 else "") for r in named.to_dict("records")]  # fmt: skip
    if len(rows) == 1:  # the one layer holds all of it
        return f", in {places[0]}"
    return ", in " + ", ".join(f"{p} {_t(ns)}" for p, ns in zip(places, named["step_mean_ns"],
                                                                 strict=True))  # fmt: skip


def nonzero(value: object) -> bool:
    return bool(number(value))
