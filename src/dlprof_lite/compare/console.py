"""The comparison on the console: step statistics, verdicts, the largest changes, warnings.

Place in the pipeline: compare (only the CLI calls this; everything shown is also in
compare.csv/compare.json). Names from profiles and the command line go to rich as ``Text``
with control characters made visible, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from dlprof_lite.compare.comparison import Comparison, p_text, verdict_line
from dlprof_lite.compare.deltas import IDLE, KERNEL, LAYER, PHASE, SUMMARY, Delta
from dlprof_lite.compare.stats import FASTER, SLOWER, StepStats
from dlprof_lite.durations import short, signed
from dlprof_lite.narrow import print_fitting
from dlprof_lite.report.units import bytes_text, flops
from dlprof_lite.safe_text import printable

VERDICT_STYLE = {SLOWER: "bold red", FASTER: "bold green"}
IDLE_SHOWN = 4  # causes per idle line: the rest are counted, the files hold them all


def _t(text: object, style: str = "") -> Text:
    return Text(printable(text), style=style)


def _ns(value: float | None) -> str:
    return "-" if value is None else short(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


Titled = tuple[str, RichTable]  # a table and the title printed above it (never wrapped)


def _new_table(headings: Sequence[str]) -> RichTable:
    """A table whose headings are Text, never markup."""
    table = RichTable(show_edge=False, pad_edge=False)
    for i, heading in enumerate(headings):
        if i == 0:
            table.add_column(_t(heading), overflow="ellipsis", no_wrap=True, max_width=48)
        else:
            table.add_column(_t(heading), justify="right", no_wrap=True)
    return table


def _print(console: Console, titled: Titled) -> None:
    title, table = titled
    print_fitting(console, table, title)  # stacked when it does not fit (80 columns, a log)


def _steps_table(sides: Sequence[StepStats]) -> Titled:
    pooled = any(s.runs > 1 for s in sides)
    headings = ["side", "runs", "steps", "mean", "median", "std", "p10", "p90", "min", "max"]
    if pooled:
        headings += ["within-run std", "between-run std"]
    table = _new_table(headings)
    for s in sides:
        cells = [str(s.runs), str(s.n)] + [
            short(v)
            for v in (s.mean_ns, s.median_ns, s.std_ns, s.p10_ns, s.p90_ns, s.min_ns, s.max_ns)
        ]
        if pooled:
            cells += [_ns(s.within_run_std_ns), _ns(s.between_run_std_ns)]
        table.add_row(_t(s.label), *(_t(c) for c in cells))
    return "step time per side", table


def _entities(rows: Sequence[Delta], top: int) -> list[dict[str, Delta]]:
    """The first ``top`` entities of a ranked section, each as {metric: row}."""
    out: list[dict[str, Delta]] = []
    for row in rows:
        if row.rank > top:
            break
        if len(out) < row.rank:
            out.append({})
        out[row.rank - 1][row.metric] = row
    return out


def _changed(entity: dict[str, Delta], metrics: Sequence[str]) -> bool:
    return any(entity[m].delta for m in metrics if m in entity)


def _delta_cells(row: Delta | None) -> list[str]:
    """baseline, value, change, change % of a row (durations for ns metrics)."""
    if row is None:
        return ["-", "-", "-", "-"]
    if row.metric.endswith("_ns"):
        base, value = _ns(row.baseline_value), _ns(row.value)
        return [base, value, signed(row.delta or 0.0), _pct(row.delta_pct)]
    base, value = (f"{v:.3g}" if v is not None else "-" for v in (row.baseline_value, row.value))
    return [base, value, f"{row.delta or 0.0:+.3g}", _pct(row.delta_pct)]


# The figures layers are ranked by (deltas.LAYER_RANKED_BY): medians of self time per step.
_LAYER_WALL, _LAYER_GPU = "self_wall_median_ns", "self_gpu_median_ns"


def _layers_table(rows: Sequence[Delta], top: int, base: str, label: str) -> Titled | None:
    entities = [e for e in _entities(rows, top) if _changed(e, (_LAYER_WALL, _LAYER_GPU))]
    if not entities:
        return None
    gpu = any(r.metric == _LAYER_GPU and (r.value or r.baseline_value) for r in rows)
    tested = any(r.p_value is not None for r in rows)
    headings = ["layer", "dir", "self wall: baseline", "side", "change", "%"]
    if gpu:
        headings += ["self GPU: baseline", "side", "change", "%"]
    if tested:
        headings += ["runs test"]
    table = _new_table(headings)
    for e in entities:
        first = next(iter(e.values()))
        name = first.name + ("" if first.status == "both" else f" ({first.status})")
        cells = [first.direction, *_delta_cells(e.get(_LAYER_WALL))]
        if gpu:
            cells += _delta_cells(e.get(_LAYER_GPU))
        if tested:
            cells.append(_layer_test(e))
        table.add_row(_t(name), *(_t(c) for c in cells))
    title = f"layers, by change of self time per step, median over steps ({label} vs {base})"
    if tested:
        title = (f"layers, those the runs call slower or faster first, then by change of self "
                 f"time per step, median over steps ({label} vs {base})")  # fmt: skip
    return title, table


def _layer_test(entity: dict[str, Delta]) -> str:
    """The run-level test of a layer's ranked figures: ``slower p = 0.003`` (Holm-adjusted),
    ``-`` when none was tested (a figure 0 in some run)."""
    found = [entity[m] for m in (_LAYER_WALL, _LAYER_GPU) if m in entity
             and entity[m].p_value is not None]  # fmt: skip
    if not found:
        return "-"
    best = min(found, key=lambda d: d.p_value or 1.0)
    word = best.verdict if best.verdict in (SLOWER, FASTER) else "no change"
    return f"{word} {p_text(best.p_value)}"


def _simple_table(
    title: str, rows: Sequence[Delta], top: int, metrics: Sequence[str], headings: Sequence[str]
) -> Titled | None:
    entities = [e for e in _entities(rows, top) if _changed(e, metrics)]
    if not entities:
        return None
    # A metric nobody has (GPU time of a CPU run) is left out, with its two headings.
    kept = [
        i
        for i, m in enumerate(metrics)
        if any(r.metric == m and (r.value or r.baseline_value) for r in rows)
    ]
    metrics = [metrics[i] for i in kept]
    headings = [headings[0], *(h for i in kept for h in headings[1 + 2 * i : 3 + 2 * i])]
    table = _new_table(headings)
    for e in entities:
        first = next(iter(e.values()))
        name = first.name + ("" if first.status == "both" else f" ({first.status})")
        cells = [c for m in metrics for c in _delta_cells(e.get(m))[2:]]
        table.add_row(_t(name), *(_t(c) for c in cells))
    return title, table


def _idle_lines(rows: Sequence[Delta], base: str, label: str) -> list[Text]:
    """``GPU idle per step by cause, median over steps (B vs A): data +3.10 ms, sync -500.0
    µs``, and the same for the main thread's step: the causes whose ranked figure moved,
    largest change first (the section's rank breaks ties)."""
    out = []
    for metric, what in (("device_median_ns", "GPU idle"), ("host_median_ns", "host time")):
        moved = sorted((r for r in rows if r.metric == metric and r.delta),
                       key=lambda r: (-abs(r.delta or 0.0), r.rank))  # fmt: skip
        if not moved:
            continue
        causes = ", ".join(f"{r.name} {signed(r.delta or 0.0)}" for r in moved[:IDLE_SHOWN])
        more = f" (+{len(moved) - IDLE_SHOWN} more)" if len(moved) > IDLE_SHOWN else ""
        out.append(_t(f"{what} per step by cause, median over steps ({label} vs {base}): "
                      f"{causes}{more}"))  # fmt: skip
    return out


def _summary_lines(rows: Sequence[Delta]) -> list[Text]:
    out = []
    for row in rows:
        if not row.value and not row.baseline_value:
            continue  # unknown or 0 on both sides (a CPU run's launch overhead)
        if row.metric in ("tc_share", "mfu"):
            a, b = (
                f"{v * 100:.1f}%" if v is not None else "-" for v in (row.baseline_value, row.value)
            )
        elif row.metric == "model_flops_per_step":
            a, b = (flops(v) for v in (row.baseline_value, row.value))
        elif row.metric.endswith("_bytes"):
            a, b = (bytes_text(v) for v in (row.baseline_value, row.value))
        else:
            a, b = (f"{v:.1f}%" if v is not None else "-" for v in (row.baseline_value, row.value))
        shown = {"tc_share": "Tensor Core share", "launch_overhead_pct": "launch overhead",
                 "model_flops_per_step": "model FLOPs per step", "mfu": "MFU",
                 "memory_saved_bytes": "saved activations",
                 "memory_gpu_peak_bytes": "GPU memory peak"}  # fmt: skip
        out.append(
            _t(f"{shown.get(row.metric, row.metric)}: {row.baseline} {a} -> {row.label} {b}")
        )
    return out


def render_comparison(c: Comparison, console: Console, top: int = 10) -> None:
    """Print the comparison: steps table, verdicts, top deltas per other side, warnings."""
    _print(console, _steps_table(c.sides))
    for d in c.steps:
        console.print(_t(verdict_line(d), VERDICT_STYLE.get(d.verdict, "")))
    for d in c.steps:
        base, label = d.baseline, d.label
        tables = [
            _layers_table(c.section(LAYER, label), top, base, label),
            _simple_table(
                f"kernels, by change of GPU time per step ({label} vs {base})",
                c.section(KERNEL, label), top, ("gpu_ns", "instances"),
                ["kernel", "GPU/step change", "%", "calls/step change", "%"],
            ),
            _simple_table(
                f"phases per step, median over steps ({label} vs {base})",
                c.section(PHASE, label), top, ("gpu_median_ns", "wall_median_ns"),
                ["phase", "GPU change", "%", "wall change", "%"],
            ),
        ]  # fmt: skip
        for table in tables:
            if table is not None:
                _print(console, table)
        for line in _idle_lines(c.section(IDLE, label), base, label):
            console.print(line)
        for line in _summary_lines(c.section(SUMMARY, label)):
            console.print(line)
    for warning in c.warnings:
        console.print(_t(f"warning: {warning}", "yellow"))
