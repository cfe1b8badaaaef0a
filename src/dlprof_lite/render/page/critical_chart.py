"""The critical path's chart: what holds the analysed steps' paths, layer by layer.

Place in the pipeline: render (for render/page/html.py), from the report's ``critical`` table
(report/critical/table.py). One horizontal bar per layer (a piece without a layer: its
phase, in brackets), stacked by part (rules/critical.py PARTS: host, device, latency,
wait), the ``CRITICAL_ROWS`` with most time per step; the path of the timeline's iteration is
drawn on the timeline itself (render/page/timeline_chart.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.render.page.charts import base_layout, scaled, short, unit_for
from dlprof_lite.render.page.figures import Figure, figure, marker, text
from dlprof_lite.rules.critical import PART_DOCS, PARTS

CRITICAL_ROWS = 15
PART_COLORS = {"host": "#1e88e5", "device": "#43a047", "latency": "#fb8c00", "wait": "#b0bec5"}


def critical_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Mean ns per step of each (row, part): rows named by layer, else ``[phase]``."""
    layer = table["layer"].astype(object).fillna("").astype(str)
    phase = table["phase"].astype(object).fillna("").astype(str)
    row = layer.where(layer != "", "[" + phase.where(phase != "", "other") + "]")
    frame = pd.DataFrame({"row": row.to_numpy(), "part": table["part"].astype(str).to_numpy(),
                          "ns": pd.to_numeric(table["step_mean_ns"], errors="coerce")
                          .fillna(0).to_numpy()})  # fmt: skip
    grid = frame.pivot_table(index="row", columns="part", values="ns", aggfunc="sum",
                             fill_value=0.0)  # fmt: skip
    grid = grid.reindex(columns=[p for p in PARTS if p in grid.columns])
    return grid.loc[grid.sum(axis=1).sort_values(ascending=False, kind="stable").index]


def critical_figure(table: pd.DataFrame) -> tuple[Figure | None, int]:
    """The stacked bars and how many rows are left out; None without a path."""
    if table.empty:
        return None, 0
    grid = critical_rows(table)
    shown = grid.head(CRITICAL_ROWS)
    whole = float(grid.to_numpy().sum())
    unit, size = unit_for(shown.sum(axis=1).to_numpy(float))
    names = [short(n, 60) for n in shown.index]
    traces = []
    for part in shown.columns:
        ns = shown[part].to_numpy(float)
        pct = np.where(whole > 0, ns / (whole or 1) * 100, 0.0)
        traces.append({
            "type": "bar", "orientation": "h", "name": part, "y": names,
            "x": scaled(ns, size), "customdata": [round(float(p), 2) for p in pct],
            **marker(PART_COLORS[part]),
            "hovertemplate": f"{part}: {PART_DOCS[part]}<br>%{{x:.4g}} {unit} per step, "
                             "%{customdata:.1f}% of the path<extra>%{y}</extra>",
        })  # fmt: skip
    layout = base_layout(
        "The critical path per analysed step, by layer: what its time is made of",
        unit, size, barmode="stack", height=max(320, 24 * len(names) + 170),
        xaxis={"title": text(f"time on the path per step ({unit})")},
        yaxis={"categoryorder": "array", "categoryarray": names, "autorange": "reversed",
               "automargin": True},
    )  # fmt: skip
    return figure(traces, layout), max(len(grid) - len(shown), 0)
