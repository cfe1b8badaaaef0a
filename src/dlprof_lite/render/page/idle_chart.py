"""The idle chart: each analysed step's GPU idle time (a CPU run: its host time) by cause.

Place in the pipeline: render (for render/page/html.py; the causes' words, which the
console says too, are rules/idle.py's). One stacked bar per analysed step, one trace per cause in
rules/idle.py's order (its precedence), read from the iterations' ``idle_<cause>_ns`` on a
GPU run (they add up to the step's ``phase_idle_ns``) or ``host_<cause>_ns`` on a CPU run
(the main thread's; they add up to ``wall_ns``). A cause no charted step has gets no trace.
More than ``IDLE_BARS`` steps: each bar is the mean of a run of consecutive steps, so the
bars still add up and the page stays small.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.render.page.charts import PHASE_COLORS, base_layout, scaled, unit_for, whole_step
from dlprof_lite.render.page.figures import Figure, figure, marker, text
from dlprof_lite.report.model import analysed
from dlprof_lite.rules.idle import (
    CAUSE_WORDS,
    DEVICE,
    DEVICE_CAUSES,
    HOST,
    HOST_CAUSES,
    cause_column,
)

IDLE_BARS = 500  # bars at most; more steps are averaged in runs of consecutive steps
# The phases' colours where a cause is a phase, so the step breakdown and this chart agree.
CAUSE_COLORS = {
    "data": PHASE_COLORS["data"], "sync": "#e53935", "comm": "#00897b",
    "compile": PHASE_COLORS["compile"], "gc": "#fdd835", "launch": "#fb8c00",
    "layer": "#1e88e5", "optimizer": PHASE_COLORS["optimizer"], "other": PHASE_COLORS["other"],
    "queued": "#b0bec5", "unknown": "#6d4c41",
}  # fmt: skip


def idle_steps(iterations: pd.DataFrame, *, gpu: bool) -> tuple[pd.DataFrame, pd.Series, str]:
    """The analysed steps' cause columns (ns, one column per cause of the run's kind), each
    step's whole (wall x devices on a GPU run, wall on a CPU run) and the kind; no rows when
    there is nothing to chart (no analysed step, a report without the columns, all zero)."""
    kind, causes = (DEVICE, DEVICE_CAUSES) if gpu else (HOST, HOST_CAUSES)
    columns = [cause_column(kind, c) for c in causes]
    steps = analysed(iterations)
    if steps.empty or not set(columns) <= set(steps.columns):
        return pd.DataFrame(columns=columns), pd.Series(dtype=float), kind
    values = steps[columns].apply(pd.to_numeric, errors="coerce").fillna(0)
    values.index = steps["iteration"].to_numpy(dtype=np.int64)
    if not (values.to_numpy() > 0).any():
        return values.iloc[0:0], pd.Series(dtype=float), kind
    # The device time of a step: busy + idle = wall x devices (report/steps/table.py).
    parts = ["gpu_busy_ns", "phase_idle_ns"] if gpu else ["wall_ns"]
    whole = steps[parts].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)
    return values, pd.Series(whole.to_numpy(float), index=values.index), kind


def _bars(
    values: pd.DataFrame, whole: pd.Series
) -> tuple[pd.DataFrame, pd.Series, list[str], int]:
    """At most ``IDLE_BARS`` bars: runs of consecutive steps averaged, each at the middle of
    its run and labelled by its first and last iteration; one step per bar when they fit.
    The last value: the steps in a run."""
    size = -(-len(values) // IDLE_BARS)
    numbers = values.index.to_numpy(dtype=np.int64)
    if size == 1:
        return values, whole, [f"iteration {n}" for n in numbers], 1
    run = np.arange(len(values)) // size
    means = values.groupby(run).mean()
    wholes = whole.groupby(run).mean()
    ends = pd.Series(numbers).groupby(run).agg(["first", "last"])
    means.index = wholes.index = (ends["first"] + ends["last"]).to_numpy() / 2
    labels = [f"iterations {a}–{b} (mean)" for a, b in zip(ends["first"], ends["last"],
                                                            strict=True)]  # fmt: skip
    return means, wholes, labels, size


def idle_figure(iterations: pd.DataFrame, *, gpu: bool) -> Figure | None:
    """The stacked bars, or None with nothing to chart (:func:`idle_steps`)."""
    values, whole, kind = idle_steps(iterations, gpu=gpu)
    if values.empty:
        return None
    shown, wholes, labels, run = _bars(values, whole)
    unit, size = unit_for(shown.sum(axis=1).to_numpy(float))
    x = [int(n) if float(n).is_integer() else float(n) for n in shown.index]
    step = wholes.to_numpy(float)
    traces = []
    for cause in DEVICE_CAUSES:
        column = cause_column(kind, cause)
        if column not in shown.columns or not (shown[column] > 0).any():
            continue
        ns = shown[column].to_numpy(float)
        pct = np.where(step > 0, ns / np.where(step > 0, step, 1) * 100, 0.0)
        traces.append({
            "type": "bar", "name": cause, "x": x, "y": scaled(ns, size),
            "customdata": [[round(float(p), 2), label] for p, label in zip(pct, labels,
                                                                            strict=True)],
            **marker(CAUSE_COLORS[cause]),
            "hovertemplate": f"{cause}: {CAUSE_WORDS[cause]}<br>%{{y:.4g}} {unit}, "
                             "%{customdata[0]:.1f}% of the step<extra>%{customdata[1]}</extra>",
        })  # fmt: skip
    title = ("Why the GPU waits, per analysed step: the causes add up to its idle time"
             if gpu else "Where the step goes (host), per analysed step: the causes add up "
             "to its time")  # fmt: skip
    if len(shown) < len(values):
        title += f" ({len(values)} steps; each bar the mean of a run)"
    # Bars fill their axis edge to edge: a margin keeps the first step's tick (often 0)
    # off the corner, where it would overwrite the y axis's 0.
    margin = run / 2 + 0.02 * (x[-1] - x[0] + run)
    xaxis = {"title": text("iteration"), "tick0": 0, "range": [x[0] - margin, x[-1] + margin],
             "dtick": whole_step(int(x[-1] - x[0]) + run)}  # fmt: skip
    yaxis = {"title": text(f"time ({unit})")}
    return figure(traces, base_layout(title, unit, size, barmode="stack", height=380,
                                      xaxis=xaxis, yaxis=yaxis))  # fmt: skip
