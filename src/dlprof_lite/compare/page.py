"""compare.html: one self-contained page from a :class:`Comparison` and its sides.

Place in the pipeline: compare (rendering; the CLI writes the page beside compare.csv).
Sections, each ``<section id=...>`` with an ``<h2>``, left out when there is nothing to show:
``verdict`` (each side's verdict line, the step statistics, the warnings), ``steps`` (box
plot of every side's analysed step times, ``chart-step-box``), ``layers`` (the 30 layers
whose self time per step changed most, per compared side: ``chart-layer-delta``, then
``chart-layer-delta-2``, ...), ``phases`` (per-phase change of GPU and host time per step,
``chart-phase-delta``, and its table). Figures only from the comparison's numbers and
``Side.step_ns()``; the page frame and plotly.js: render/page/plotly_bundle.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dlprof_lite.compare.comparison import Comparison, verdict_line
from dlprof_lite.compare.deltas import LAYER, PHASE, SUMMARY, Delta
from dlprof_lite.compare.side import Side
from dlprof_lite.durations import short, signed
from dlprof_lite.render.page.charts import axis_labels, scaled, unit_for
from dlprof_lite.render.page.figures import Figure, figure, text
from dlprof_lite.render.page.plotly_bundle import Chart, document, esc, section

BOX_POINTS = 5000  # step times per side in the box plot (evenly spaced order statistics)
TOP_LAYERS = 30
_LAYER_METRICS = (("self_wall_median_ns", "self wall"), ("self_gpu_median_ns", "self GPU"))
_PHASE_METRICS = (("gpu_median_ns", "GPU"), ("wall_median_ns", "host"))


def box_sample(steps: np.ndarray, limit: int = BOX_POINTS) -> np.ndarray:
    """All steps when few; else ``limit`` evenly spaced order statistics (min and max kept),
    so the box's quartiles and whiskers stay those of every step, to within a sample."""
    if len(steps) <= limit:
        return steps
    ordered = np.sort(steps)
    sample: np.ndarray = ordered[np.linspace(0, len(ordered) - 1, limit).round().astype(int)]
    return sample


def steps_figure(sides: Sequence[Side]) -> Figure | None:
    samples = [(s.label, box_sample(s.step_ns())) for s in sides]
    samples = [(label, v) for label, v in samples if len(v)]
    if not samples:
        return None
    unit, size = unit_for(np.concatenate([v for _, v in samples]))
    traces = [{"type": "box", "name": label, "y": scaled(values, size), "boxmean": True,
               "boxpoints": "outliers"} for label, values in samples]  # fmt: skip
    layout = {
        "title": text("Analysed step time per side (box: quartiles; dashed: mean)"),
        "meta": {"unit": unit, "ns": size}, "showlegend": False,
        "yaxis": {"title": text(f"step time ({unit})")}, "height": 420,
    }  # fmt: skip
    return figure(traces, layout)


def entities(rows: Sequence[Delta], top: int) -> list[dict[str, Delta]]:
    """The first ``top`` ranked entities of a section, each as {metric: row}."""
    out: dict[int, dict[str, Delta]] = {}
    for row in rows:
        if row.rank <= top:
            out.setdefault(row.rank, {})[row.metric] = row
    return [out[rank] for rank in sorted(out)]


def _name(entity: dict[str, Delta]) -> str:
    first = next(iter(entity.values()))
    name = first.name + (f" ({first.direction})" if first.direction else "")
    return name + ("" if first.status == "both" else f" [{first.status}]")


def delta_figure(
    ents: Sequence[dict[str, Delta]], metrics: Sequence[tuple[str, str]], title: str
) -> Figure | None:
    """Horizontal bars of each entity's change (side - baseline), one trace per metric that
    any entity has a value for (GPU time of a CPU run is left out)."""
    kept = [(m, label) for m, label in metrics
            if any(e.get(m) and (e[m].value or e[m].baseline_value) for e in ents)]  # fmt: skip
    if not ents or not kept:
        return None
    names = [_name(e) for e in ents]
    changes = {m: [e[m].delta or 0.0 if m in e else 0.0 for e in ents] for m, _ in kept}
    unit, size = unit_for(np.concatenate([np.asarray(v) for v in changes.values()]))
    y = axis_labels(names)
    traces = []
    for metric, label in kept:
        pct = [e[metric].delta_pct if metric in e else None for e in ents]
        traces.append({
            "type": "bar", "name": label, "orientation": "h", "y": y,
            "x": scaled(changes[metric], size),
            "customdata": [[n, "-" if p is None else f"{p:+.1f} %"]
                           for n, p in zip(names, pct, strict=True)],
            "hovertemplate": f"%{{customdata[0]}}<br>{label}: %{{x:+.4g}} {unit} "
                             "(%{customdata[1]})<extra></extra>",
        })  # fmt: skip
    layout = {
        "title": text(title), "meta": {"unit": unit, "ns": size}, "barmode": "group",
        "xaxis": {"title": text(f"change per step ({unit})")}, "yaxis": {"autorange": "reversed"},
        "height": max(320, 22 * len(ents) * len(kept) + 160), "margin": {"l": 240},
        "legend": {"orientation": "h", "y": -0.15},
    }  # fmt: skip
    return figure(traces, layout)


_SUMMARY_SHOWN = {"tc_share": ("Tensor Core share", 100.0),
                  "launch_overhead_pct": ("launch overhead", 1.0),
                  "mfu": ("MFU", 100.0)}  # fmt: skip


def summary_lines(rows: Sequence[Delta]) -> list[str]:
    """``Tensor Core share: A 12.0% -> B 30.0%``; a figure unknown or 0 on both sides (the
    launch overhead of a CPU run) is left out."""
    out = []
    for row in rows:
        if (not row.value and not row.baseline_value) or row.metric not in _SUMMARY_SHOWN:
            continue
        label, scale = _SUMMARY_SHOWN[row.metric]
        a, b = ("-" if v is None else f"{v * scale:.1f}%" for v in (row.baseline_value, row.value))
        out.append(f"{label}: {row.baseline} {a} -> {row.label} {b}")
    return out


def _verdict(c: Comparison) -> str:
    lines = [f'<p class="verdict {esc(d.verdict.split()[0])}">{esc(verdict_line(d))}</p>'
             for d in c.steps]  # fmt: skip
    lines += [f"<p>{esc(line)}</p>" for d in c.steps
              for line in summary_lines(c.section(SUMMARY, d.label))]  # fmt: skip
    head = "".join(f"<th>{h}</th>" for h in ("side", "runs", "steps", "mean", "median", "std",
                                              "p10", "p90", "min", "max"))  # fmt: skip
    rows = "".join(
        f'<tr><td class="name">{esc(s.label)}</td><td>{s.runs}</td><td>{s.n}</td>'
        + "".join(f"<td>{esc(short(v))}</td>" for v in (s.mean_ns, s.median_ns, s.std_ns,
                                                    s.p10_ns, s.p90_ns, s.min_ns, s.max_ns))
        + "</tr>"
        for s in c.sides
    )  # fmt: skip
    table = f'<table id="step-stats"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    settings = (f'<p class="note">baseline {esc(c.baseline)}; runs are the samples: a '
                f"t-test on log run medians at alpha {c.alpha:g} (one run a side: not "
                f"tested); within-run {c.confidence:.0%} intervals by moving-block bootstrap "
                f"({c.resamples} resamples, seed {c.seed})</p>")  # fmt: skip
    warn = "".join(f"<li>{esc(w)}</li>" for w in c.warnings)
    return section("verdict", "Verdict", [*lines, table, settings,
                                           f"<ul>{warn}</ul>" if warn else ""])  # fmt: skip


def _layers(c: Comparison) -> str | None:
    body: list[str] = []
    for d in c.steps:
        ranked = entities(c.section(LAYER, d.label), TOP_LAYERS)
        # A layer whose self time did not move (a parent of the one that did) is no bar.
        ents = [e for e in ranked if any(e[m].delta for m, _ in _LAYER_METRICS if m in e)]
        title = (f"{d.label} vs {d.baseline}: the {len(ents)} layers whose self time per step "
                 "(median over steps) changed most")  # fmt: skip
        fig = delta_figure(ents, _LAYER_METRICS, title)
        if fig is not None:
            name = "layer-delta" if not body else f"layer-delta-{len(body) + 1}"
            body.append(Chart(name, fig).html())
    return section("layers", "Layers", body) if body else None


def _phase_table(tid: str, rows: Sequence[dict[str, Delta]]) -> str:
    # A metric no side has (GPU time of CPU-only runs) is left out, not shown as zeros.
    kept = [(m, label) for m, label in _PHASE_METRICS
            if any(e[m].value or e[m].baseline_value for e in rows if m in e)]  # fmt: skip
    heads = ["phase"]
    for _, label in kept:
        heads += [f"{label}: baseline", "side", "change"]
    head = "".join(f"<th>{h}</th>" for h in heads)
    out = []
    for e in rows:
        cells = [f'<td class="name">{esc(_name(e))}</td>']
        for metric, _ in kept:
            r = e.get(metric)
            values = (
                ("-", "-", "-")
                if r is None
                else (short(r.baseline_value or 0.0), short(r.value or 0.0),
                      signed(r.delta or 0.0))
            )
            cells += [f"<td>{esc(v)}</td>" for v in values]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table id="{esc(tid)}"><thead><tr>{head}</tr></thead><tbody>{"".join(out)}'
            "</tbody></table>")  # fmt: skip


def _phases(c: Comparison) -> str | None:
    body: list[str] = []
    for d in c.steps:
        ents = [e for e in entities(c.section(PHASE, d.label), 1 << 30)
                if any(r.value or r.baseline_value for r in e.values())]  # fmt: skip
        title = f"{d.label} vs {d.baseline}: change per step by phase (median over steps)"
        fig = delta_figure(ents, _PHASE_METRICS, title)
        if fig is None:
            continue
        n = "" if not body else f"-{len(body) // 2 + 1}"
        body += [Chart(f"phase-delta{n}", fig).html(), _phase_table(f"phase-table{n}", ents)]
    return section("phases", "Phases", body) if body else None


def compare_page(comparison: Comparison, sides: Sequence[Side]) -> str:
    """The whole compare.html (see the module docstring); ``sides`` as compared, the
    baseline first."""
    box = steps_figure(sides)
    parts = [
        _verdict(comparison),
        section("steps", "Step time", [Chart("step-box", box).html()]) if box else None,
        _layers(comparison),
        _phases(comparison),
    ]
    labels = " vs ".join(s.label for s in sides)
    return document(f"dlprof-lite compare: {labels}", f"dlprof-lite comparison: {labels}",
                    [p for p in parts if p is not None])  # fmt: skip
