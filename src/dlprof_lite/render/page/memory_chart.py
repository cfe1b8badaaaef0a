"""The memory chart: each layer's own bytes stacked by category, in network order.

Place in the pipeline: render (for render/page/html.py). Parameters, gradients, optimizer
state and the activations saved for backward in the first analysed step
(report/layers/memory.py), one bar per layer that holds any, in one binary unit.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.render.page.charts import axis_labels, common_parent
from dlprof_lite.render.page.figures import Figure, figure, marker, text

MEMORY_LAYERS = 200  # the layers holding the most, charted in network order
CATEGORIES = (("param_bytes", "parameters", "#1e88e5"), ("gradient_bytes", "gradients", "#fb8c00"),
              ("optimizer_bytes", "optimizer state", "#43a047"),
              ("saved_bytes", "saved activations", "#8e24aa"))  # fmt: skip
MEMORY_COLUMNS = tuple(c for c, _, _ in CATEGORIES)
_UNITS = (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))


def own_bytes(layers: pd.DataFrame) -> pd.Series:
    """Each layer's own bytes, the four kinds together (the console's and the chart's)."""
    values = layers[list(MEMORY_COLUMNS)].apply(pd.to_numeric, errors="coerce").fillna(0)
    out: pd.Series = values.sum(axis=1)
    return out


def memory_layers(layers: pd.DataFrame) -> pd.DataFrame:
    """The charted layers: those holding bytes of their own, the largest, in network order."""
    if layers.empty or "param_bytes" not in layers.columns:
        return layers.iloc[0:0]
    own = own_bytes(layers)
    shown = layers.assign(_own=own)[(own > 0).to_numpy(bool)]
    out: pd.DataFrame = shown.nlargest(MEMORY_LAYERS, "_own").sort_values("order", kind="stable")
    return out


def memory_figure(layers: pd.DataFrame) -> Figure | None:
    shown = memory_layers(layers)
    if shown.empty:
        return None
    largest = float(shown["_own"].max())
    unit, size = next(((u, s) for u, s in _UNITS if largest >= s), _UNITS[-1])
    names = shown["layer"].astype(str).tolist()
    under, relative = common_parent(names)
    x = axis_labels(relative, 28)
    traces = []
    for column, label, color in CATEGORIES:
        values = pd.to_numeric(shown[column], errors="coerce").fillna(0) / size
        if not (values > 0).any():
            continue
        traces.append({"type": "bar", "name": label, "x": x, "y": values.round(6).tolist(),
                       "customdata": names, **marker(color),
                       "hovertemplate": f"%{{customdata}}<br>{label}: %{{y:.4g}} {unit}"
                                        "<extra></extra>"})  # fmt: skip
    layout = {
        "title": text("Memory per layer: its own tensors by kind (saved activations: the first "
                      "analysed step)"),
        "barmode": "stack", "height": 460, "meta": {"unit": unit, "bytes": size},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "yaxis": {"title": text(f"bytes ({unit})"), "automargin": True},
        "xaxis": {"tickangle": -90, "automargin": True,
                  **({"title": text(f"layers in {under}")} if under else {})},
    }  # fmt: skip
    return figure(traces, layout)
