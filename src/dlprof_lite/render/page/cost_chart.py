"""The cost chart: each layer's time per step against its FLOPs per step, and its MFU.

Place in the pipeline: render (for render/page/html.py). Left, one marker per layer with
counted FLOPs (log-log: FLOPs per step across, time per step up; a layer far above its
neighbours takes long for the work it does); right, on a GPU run, MFU bars of the same
layers (report/layers/flops.py). Roots are left out: their FLOPs and time are their layers'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.render.page.charts import axis_labels, base_layout, scaled, unit_for
from dlprof_lite.render.page.figures import Figure, figure, text

COST_LAYERS = 60  # the layers with the most time per step, charted
_COLOR = "#1e88e5"
_OVER = "#e53935"


def cost_layers(
    layers: pd.DataFrame, *, unknown: bool = False, cap: int = COST_LAYERS
) -> tuple[pd.DataFrame, bool]:
    """The layers of the cost views and whether the run is on a GPU: below a root, with time
    of their own per step (a folded layer's is its parent's) and FLOPs (``unknown``: or a
    note saying why none), most time first, with ``_time`` (GPU time on a GPU, else wall)
    and ``_flops``. The console's section and the page's chart show the same layers."""
    if layers.empty or "step_flops" not in layers.columns:
        return layers.iloc[0:0], False
    flops = pd.to_numeric(layers["step_flops"], errors="coerce")
    gpu = bool((layers["flops_rate_basis"] == "gpu").any())
    view = "gpu" if gpu else "wall"
    time = (pd.to_numeric(layers[f"step_forward_{view}_ns"], errors="coerce").fillna(0)
            + pd.to_numeric(layers[f"step_backward_{view}_ns"], errors="coerce").fillna(0))
    counted = (flops > 0) | (layers["flops_note"].notna() if unknown else False)
    shown = layers.assign(_flops=flops, _time=time)
    shown = shown[(counted & (time > 0) & layers["parent"].notna()).to_numpy(dtype=bool)]
    return shown.sort_values("_time", ascending=False, kind="stable").head(cap), gpu


def cost_figure(layers: pd.DataFrame) -> Figure | None:
    """The figure, or None when no layer has both FLOPs and time."""
    shown, gpu = cost_layers(layers)
    if shown.empty:
        return None
    unit, size = unit_for(shown["_time"].to_numpy(float))
    names = shown["layer"].astype(str).tolist()
    rate = "GPU" if gpu else "host wall"
    traces: list[dict[str, object]] = [{
        "type": "scatter", "mode": "markers", "name": "layers", "x": shown["_flops"].tolist(),
        "y": scaled(shown["_time"], size), "customdata": names, "xaxis": "x", "yaxis": "y",
        "marker": {"color": _COLOR, "size": 9},
        "hovertemplate": "%{customdata}<br>%{x:.3s}FLOP per step<br>"
                         f"%{{y:.4g}} {unit} {rate} time<extra></extra>",
    }]  # fmt: skip
    more: dict[str, object] = {}
    if gpu:
        mfu = pd.to_numeric(shown["mfu"], errors="coerce").to_numpy(float)
        traces.append({
            "type": "bar", "name": "MFU", "x": axis_labels(names, 28),
            "y": [None if v != v else round(v * 100, 3) for v in mfu], "customdata": names,
            "xaxis": "x2", "yaxis": "y2",
            "marker": {"color": [_OVER if v > 1 else _COLOR for v in np.nan_to_num(mfu)]},
            "hovertemplate": "%{customdata}<br>MFU %{y:.1f}%<extra></extra>",
        })  # fmt: skip
        more = {"xaxis2": {"domain": [0.55, 1.0], "anchor": "y2", "tickangle": -90,
                           "automargin": True},
                "yaxis2": {"anchor": "x2", "title": text("MFU (% of dense peak)"),
                           "rangemode": "tozero"}}  # fmt: skip
    title = f"Cost per layer: {rate} time per step against FLOPs per step"
    if gpu:
        title += " (left), MFU (right; red: above 100 %, an attribution error)"
    layout = base_layout(
        title, unit, size, showlegend=False, height=460,
        xaxis={"type": "log", "title": text("FLOPs per step"), "exponentformat": "SI",
               "domain": [0.0, 0.45 if gpu else 1.0]},
        yaxis={"type": "log", "title": text(f"time per step ({unit})"), "automargin": True},
        **more,
    )  # fmt: skip
    return figure(traces, layout)
