"""The ranks table drawn: a chart and a table for report.html (report/ranks/table.py computes it).

Place in the pipeline: report (rendering). Each GPU timeline (or process without kernels) of
a run of several ranks is one bar: per analysed step, its compute, the communication compute
hid, the communication nobody hid (exposed: what a rank waits for) and its data time; the
straggler is marked. A run of one rank has no such section.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.render.page.charts import base_layout, scaled, unit_for
from dlprof_lite.render.page.figures import Figure, figure, marker, text
from dlprof_lite.render.page.html_tables import Column, table
from dlprof_lite.report.units import duration, percent

PARTS = (  # (name, colour): the bar's stack, left to right
    ("compute", "#1e88e5"),
    ("hidden communication", "#90caf9"),
    ("exposed communication", "#e53935"),
    ("data", "#8d6e63"),
)
RANK_COLUMNS = (
    Column("rank", "label", numeric=False, name=True),
    Column("steps", "steps"),
    Column("median step", "step_median_ns", duration),
    Column("compute/step", "step_compute_ns", duration),
    Column("comm/step", "step_comm_ns", duration),
    Column("exposed/step", "step_exposed_comm_ns", duration),
    Column("overlap", "overlap_pct", lambda v: percent(v, 1.0)),
    Column("data/step", "step_data_ns", duration),
)


def labelled(ranks: pd.DataFrame) -> pd.DataFrame:
    """The ranks table with a ``label`` per row: rank, device, straggler."""
    straggler = ranks["straggler"].fillna(False).astype(bool).tolist()
    labels = []
    for rank, device, slow in zip(ranks["rank"], ranks["device_id"], straggler, strict=True):
        where = "" if device is pd.NA or device != device else f" · GPU {device}"
        labels.append(f"rank {rank}{where}{' (straggler)' if slow else ''}")
    return ranks.assign(label=labels)


def _column(ranks: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(ranks[name], errors="coerce").fillna(0.0).to_numpy(float)


def ranks_figure(ranks: pd.DataFrame) -> Figure | None:
    """One stacked bar per timeline; None for fewer than two ranks."""
    if len(ranks) < 2:
        return None
    shown = labelled(ranks)
    comm, exposed = _column(shown, "step_comm_ns"), _column(shown, "step_exposed_comm_ns")
    values = {
        "compute": _column(shown, "step_compute_ns"),
        "hidden communication": np.maximum(comm - exposed, 0.0),
        "exposed communication": exposed,
        "data": _column(shown, "step_data_ns"),
    }
    unit, size = unit_for(np.concatenate(list(values.values())))
    traces = [{"type": "bar", "name": name, "orientation": "h", "x": scaled(values[name], size),
               "y": shown["label"].tolist(), **marker(colour),
               "hovertemplate": f"%{{y}}<br>{name}: %{{x:.4g}} {unit}<extra></extra>"}
              for name, colour in PARTS]  # fmt: skip
    layout = base_layout(
        "Ranks: per analysed step, compute, communication (hidden and exposed) and data",
        unit, size, barmode="stack", xaxis={"title": text(f"time per step ({unit})")},
        yaxis={"autorange": "reversed", "automargin": True},
        height=max(300, 40 * len(shown) + 160),
    )  # fmt: skip
    return figure(traces, layout)


def ranks_table_html(ranks: pd.DataFrame) -> str:
    return table("rank-table", RANK_COLUMNS, labelled(ranks))
