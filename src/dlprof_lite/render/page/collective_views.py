"""Recorded collectives drawn: who makes whom wait, the collectives per op and size, per layer.

Place in the pipeline: render (for render/page/html.py's ranks section), from the report's
``collectives``, ``collective_ops`` and ``collective_layers`` tables (report/collectives/).
The matrix: one row per rank that waited, one column per rank it waited for (the instance's
last to arrive), each cell that wait per analysed step; a dark column is a rank the others wait for.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.render.page.charts import base_layout, scaled, unit_for
from dlprof_lite.render.page.figures import Figure, figure, text
from dlprof_lite.render.page.html_tables import Column, table
from dlprof_lite.report.units import bytes_text, duration, percent

OP_COLUMNS = (
    Column("collective", "op", numeric=False, name=True),
    Column("ranks", "group", numeric=False),
    Column("size", "size", numeric=False),
    Column("calls", "instances"),
    Column("transfer", "transfer_median_ns", duration),
    Column("wait/rank", "wait_mean_ns", duration),
    Column("waiting", "wait_share", percent),
    Column("busbw GB/s", "busbw_gbps", lambda v: "-" if v != v else f"{float(v):.3g}"),  # type: ignore[arg-type]
)


def who_waits(collectives: pd.DataFrame) -> pd.DataFrame:
    """Nanoseconds each rank (rows) waited in instances another rank (columns) arrived last
    at, from the collectives table's rows."""
    if collectives.empty:
        return pd.DataFrame()
    waited = collectives[(collectives["rank"] != collectives["last_rank"]).to_numpy(dtype=bool)]
    return waited.pivot_table(index="rank", columns="last_rank", values="wait_ns",
                              aggfunc="sum", fill_value=0)  # fmt: skip


def waits_figure(collectives: pd.DataFrame, steps: int) -> Figure | None:
    """The who-waits-for-whom matrix (per analysed step); None without two ranks' waits."""
    matrix = who_waits(collectives)
    if matrix.empty:
        return None
    ranks = sorted(set(matrix.index) | set(matrix.columns))
    grid = matrix.reindex(index=ranks, columns=ranks, fill_value=0).to_numpy(float) / max(steps, 1)
    unit, size = unit_for(grid.ravel())
    labels = [f"rank {r}" for r in ranks]
    trace = {"type": "heatmap", "z": [scaled(row, size) for row in grid], "x": labels,
             "y": labels,
             "colorscale": "Reds", "colorbar": {"title": text(unit)},
             "hovertemplate": f"%{{y}} waits for %{{x}}: %{{z:.4g}} {unit} per step"
                              "<extra></extra>"}  # fmt: skip
    layout = base_layout(
        "Who makes whom wait in collectives: each rank's wait per step (rows) for the rank "
        "that arrived last (columns)", unit, size,
        xaxis={"title": text("waited for"), "side": "bottom"},
        yaxis={"title": text("waits"), "autorange": "reversed", "automargin": True},
        height=max(320, 40 * len(ranks) + 200),
    )  # fmt: skip
    return figure([trace], layout)


def ops_table_html(ops: pd.DataFrame) -> str:
    shown = ops.assign(size=[bytes_text(b) for b in ops["bytes_mean"]])
    return table("collective-table", OP_COLUMNS, shown.sort_values(
        "wait_mean_ns", ascending=False, kind="stable"))  # fmt: skip


LAYER_COLUMNS = (
    Column("layer", "layer", numeric=False, name=True),
    Column("pass", "pass", numeric=False),
    Column("collective", "op", numeric=False),
    Column("size", "size", numeric=False),
    Column("calls/step", "calls_per_step", lambda v: f"{float(v):.3g}"),  # type: ignore[arg-type]
    Column("time/step", "time_ns", duration),
    Column("transfer", "transfer_ns", duration),
    Column("wait", "wait_ns", duration),
    Column("exposed", "exposed_ns", duration),
    Column("of the step", "exposed_step_ratio", percent),
)


def layers_table_html(rows: pd.DataFrame) -> str:
    """The collectives per layer and pass, most exposed first (an empty layer: outside every
    layer)."""
    shown = rows.assign(
        layer=[v if isinstance(v, str) and v else "(outside layers)" for v in rows["layer"]],
        size=[bytes_text(b) if b == b and b > 0 else "-" for b in rows["bytes_mean"]],
    )  # fmt: skip
    return table("collective-layer-table", LAYER_COLUMNS, shown)
