"""Plotly figures from a Report's tables and summary (never from raw events).

Place in the pipeline: report (rendering, for render/page/html.py). Each function returns a
plotly figure as JSON data (render/page/figures.py) or None when the report has nothing for it
(the page then leaves the section out). Durations are shown in one unit per chart, picked
from its largest value; ``layout.meta`` carries that unit and its size in ns (``{"unit":
"ms", "ns": 1e6}``) so a reader of the figure JSON (the tests) converts back exactly.
Everything is capped: a page stays small for any profile (``LAYER_CHART_MAX``,
``ITERATION_POINTS``, ``TOP_KERNELS``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dlprof_lite.narrow import distinct_short
from dlprof_lite.render.page.figures import Figure, figure, marker, text
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.summary_types import Summary, number
from dlprof_lite.rules.names import PHASES

LAYER_CHART_MAX = 400  # layers in the chart (the largest, in network order); "+N more" noted
ITERATION_POINTS = 5000  # points of the iteration series (min and max of each bucket kept)
TOP_KERNELS = 20
NAME_CHARS = 60  # axis labels; hover shows the whole name
LAYER_NAME_CHARS = 28  # the layers chart's rotated labels
UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
PHASE_COLORS = {
    "data": "#8d6e63", "forward": "#1e88e5", "backward": "#fb8c00", "optimizer": "#43a047",
    "compile": "#8e24aa", "other": "#78909c", "launch overhead": "#e53935", "idle": "#cfd8dc",
}  # fmt: skip


def unit_for(values: Sequence[float] | np.ndarray) -> tuple[str, float]:
    """The display unit for durations in ns: the largest unit the biggest value reaches."""
    finite = np.asarray(values, dtype=float)
    top = float(np.nanmax(np.abs(finite))) if finite.size and np.isfinite(finite).any() else 0.0
    for unit, size in UNITS:
        if top >= size:
            return unit, size
    return "ns", 1.0


def scaled(values: Sequence[float] | np.ndarray | pd.Series, size: float) -> list[float | None]:
    """ns values in a unit, as plain floats (unknown: None, drawn as a gap)."""
    array = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(float)
    return [None if not np.isfinite(v) else float(v) / size for v in array]


def short(name: object, limit: int = NAME_CHARS) -> str:
    text = "" if name is None or name is pd.NA else str(name)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Every chart's legend sits in one row above its plot area, left-aligned: never over the
# bars, the tick labels or the axis titles; the title sits above it (its own margin row);
# buttons (a view toggle) go at the right end of the legend's row (:data:`BUTTONS`).
LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom",
          "traceorder": "normal"}  # fmt: skip
BUTTONS = {"type": "buttons", "direction": "right", "x": 1, "xanchor": "right", "y": 1.02,
           "yanchor": "bottom", "pad": {"t": 0, "b": 0}}  # fmt: skip


def base_layout(title: str, unit: str, size: float, **more: object) -> dict[str, object]:
    return {
        "title": {"text": title, "x": 0, "xref": "paper", "xanchor": "left", "y": 0.98,
                  "yref": "container", "yanchor": "top"},
        "meta": {"unit": unit, "ns": size},
        "margin": {"l": 60, "r": 30, "t": 90, "b": 60},
        "legend": LEGEND,
        **more,
    }  # fmt: skip


def _value(value: object) -> float:
    known = number(value)
    return 0.0 if known is None else known


def step_parts(summary: Summary, *, gpu: bool) -> dict[str, dict[str, float]]:
    """The step breakdown's stacked parts, ns per analysed step, by view: GPU device time per
    phase, then launch overhead (host-bound gaps) and the rest of the GPU idle time; host
    time per phase range. Launch overhead is part of the idle time, so each view sums to
    the mean step (x devices for the GPU view)."""
    views: dict[str, dict[str, float]] = {}
    if gpu:
        parts = {p: _value(summary.step.gpu_ns(p)) for p in PHASE_COLUMNS}
        gaps = sum(_value(summary.step.host_gap_ns(p)) for p in PHASE_COLUMNS)
        idle = _value(summary.step.step_idle_ns)
        parts["launch overhead"] = min(gaps, idle)
        parts["idle"] = idle - parts["launch overhead"]
        views["GPU"] = parts
    views["host"] = {p: _value(summary.step.wall_ns(p)) for p in (*PHASES, "other")}
    return views


def steps_figure(summary: Summary, *, gpu: bool) -> Figure | None:
    """Stacked horizontal bars: one per view (GPU, host), one trace per part; None without
    analysed steps (the breakdown is their mean)."""
    if not summary.window.iterations_analysed:
        return None
    views = step_parts(summary, gpu=gpu)
    names = list(dict.fromkeys(p for parts in views.values() for p in parts))
    every = [v for parts in views.values() for v in parts.values()]
    if not any(every):
        return None
    unit, size = unit_for(every)
    traces = []
    for part in names:
        ys = [view for view, parts in views.items() if parts.get(part)]
        if not ys:
            continue  # a part no view has (compile time without torch.compile)
        xs = scaled([views[v][part] for v in ys], size)
        traces.append({
            "type": "bar", "name": part, "y": ys, "x": xs, "orientation": "h",
            **marker(PHASE_COLORS.get(part)),
            "hovertemplate": f"{part}: %{{x:.4g}} {unit}<extra>%{{y}}</extra>",
        })  # fmt: skip
    return figure(traces, base_layout("Mean analysed step, by phase", unit, size, barmode="stack",
                                  xaxis={"title": text(f"time per step ({unit})")}, height=320,
                                  yaxis={"autorange": "reversed"}))  # fmt: skip


def containers(layers: pd.DataFrame) -> pd.Series:
    """Whether each layer holds other layers of the table (a root, a block): its inclusive
    time repeats theirs, so the chart shows it apart from the leaves (html.py's note)."""
    parents = set(layers["parent"].dropna().astype(str)) if "parent" in layers else set()
    held: pd.Series = layers["layer"].astype(str).isin(parents)
    return held


def chart_layers(layers: pd.DataFrame, cap: int = LAYER_CHART_MAX) -> tuple[pd.DataFrame, int]:
    """The layers the chart shows (the ``cap`` largest leaves by inclusive time per step, in
    network order) and how many leaves were left out. Containers (:func:`containers`) are
    never charted beside their own layers; a table of containers only is charted whole."""
    held = containers(layers)
    if not held.all():
        layers = layers[~held.to_numpy()]
    if len(layers) <= cap:
        return layers.sort_values("order", kind="stable"), 0
    size = sum(
        pd.to_numeric(layers[c], errors="coerce").fillna(0.0)
        for c in ("step_forward_wall_ns", "step_backward_wall_ns", "step_forward_gpu_ns",
                  "step_backward_gpu_ns")
    )  # fmt: skip
    keep = layers.loc[pd.Series(size).sort_values(ascending=False, kind="stable").index[:cap]]
    return keep.sort_values("order", kind="stable"), len(layers) - cap


def axis_labels(names: Sequence[object], width: int = NAME_CHARS) -> list[str]:
    """Category labels of at most ``width`` characters that keep distinct names distinct
    (narrow.distinct_short: the distinguishing tail kept), made unique (a repeat of the same
    name gets its position) so bars of two layers never merge. Hover shows the full name."""
    out: list[str] = []
    seen: set[str] = set()
    full = ["" if n is None or n is pd.NA else str(n) for n in names]
    for i, label in enumerate(distinct_short(full, width), start=1):
        if label in seen:
            label = f"{label} #{i}"
        seen.add(label)
        out.append(label)
    return out


_NAMESPACES = re.compile(r"\b(?:[A-Za-z_]\w*::)+")


def common_parent(names: Sequence[str]) -> tuple[str, list[str]]:
    """The module path every name lies in (``model.encoder.layers``), and each name below it
    (``0.self_attention``): a prefix repeated on every label says nothing and crowds out the
    part that differs. Only whole path parts are dropped; ``("", names)`` when none is shared
    by all or a name would be left empty."""
    parts = [n.split(".") for n in names]
    if len(parts) < 2:
        return "", list(names)
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    if not shared:
        return "", list(names)
    return ".".join(parts[0][:shared]), [".".join(p[shared:]) for p in parts]


def kernel_labels(short_names: Sequence[object], names: Sequence[object]) -> list[str]:
    """Axis labels of kernels: the short name, and where several kernels share one (cuDF's
    many ``_kernel_agent``), what tells them apart: the start of their first template
    argument, namespaces dropped (``_kernel_agent<MergeAgent<int*, int*, long…``)."""
    shorts = ["" if s is None or s is pd.NA or s != s else str(s) for s in short_names]
    counts = pd.Series(shorts).value_counts()
    out = []
    for short_name, full in zip(shorts, names, strict=True):
        text = "" if full is None or full is pd.NA else str(full)
        opening = text.find(short_name + "<") if short_name else -1
        if counts[short_name] < 2 or opening < 0:
            out.append(short_name or text)
            continue
        hint = _NAMESPACES.sub("", text[opening + len(short_name) + 1 :])
        out.append(short(f"{short_name}<{' '.join(hint.split())}", NAME_CHARS))
    return axis_labels(out)


def layer_columns(layers: pd.DataFrame) -> tuple[str, bool]:
    """The layers chart's column pattern (``{d}``: direction, ``{v}``: wall or gpu) and
    whether it is per step: per-step means when the window has steps, else window totals
    (an export without iterations)."""
    per_step = any(
        pd.to_numeric(layers[f"step_forward_{v}_ns"], errors="coerce").notna().any()
        for v in ("wall", "gpu")
    )
    return ("step_{d}_{v}_ns" if per_step else "{d}_{v}_ns"), per_step


def _numbers(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column, errors="coerce").fillna(0.0).to_numpy(float)


def layers_figure(layers: pd.DataFrame, *, gpu: bool) -> tuple[Figure | None, int]:
    """Per-layer forward and backward time (inclusive), stacked, in network order: per step,
    or window totals without steps; a wall/GPU toggle (plotly buttons) when both have data;
    Tensor Core share marked on a second axis. Returns the figure and how many layers it
    leaves out."""
    if layers.empty:
        return None, 0
    shown, left = chart_layers(layers)
    pattern, per_step = layer_columns(shown)
    views = [(v, label) for v, label in (("wall", "host wall"), ("gpu", "GPU"))
             if (v == "wall" or gpu) and any(_numbers(shown[pattern.format(d=d, v=v)]).any()
                                             for d in ("forward", "backward"))]  # fmt: skip
    if not views:
        return None, 0
    full = shown["layer"].astype(str).tolist()
    under, relative = common_parent(full)
    x = axis_labels(relative, LAYER_NAME_CHARS)
    unit, size = unit_for(
        np.concatenate(
            [
                _numbers(shown[pattern.format(d=d, v=v)])
                for v, _ in views
                for d in ("forward", "backward")
            ]
        )
    )
    what = "per step" if per_step else "whole run"
    traces: list[dict[str, object]] = []
    for i, (view, label) in enumerate(views):
        for direction in ("forward", "backward"):
            traces.append({
                "type": "bar", "name": f"{direction} ({label})", "x": x, "visible": i == 0,
                "customdata": full, "y": scaled(shown[pattern.format(d=direction, v=view)], size),
                **marker(PHASE_COLORS[direction]),
                "hovertemplate": f"%{{customdata}}<br>{direction}: %{{y:.4g}} {unit}"
                                 "<extra></extra>",
            })  # fmt: skip
    more: dict[str, object] = {}
    if gpu and any(v == "gpu" for v, _ in views):
        traces.append({
            "type": "scatter", "name": "Tensor Core share", "x": x,
            "y": scaled(shown["tc_share"], 0.01), "yaxis": "y2", "mode": "markers",
            "marker": {"symbol": "diamond", "color": "#6a1b9a", "size": 8}, "customdata": full,
            "hovertemplate": "%{customdata}<br>Tensor Cores: %{y:.0f}%<extra></extra>",
        })  # fmt: skip
        more["yaxis2"] = {"title": text("Tensor Core share (%)"), "overlaying": "y",
                          "side": "right", "range": [0, 105], "showgrid": False,
                          "tickmode": "linear", "tick0": 0, "dtick": 25}  # fmt: skip
    title = f"Layers in network order: forward and backward time {what}"
    if left:
        title += f" — the {len(shown)} largest; +{left} more in the table"
    if len(views) > 1:
        more["updatemenus"] = [{**BUTTONS, "buttons": _toggle(len(traces))}]
    # Names read upright from the axis (rotated a quarter turn, so neighbours never overlap),
    # the margin grown to the longest; plotly skips labels where bars are too narrow for one.
    layout = base_layout(title, unit, size, barmode="stack", height=360 + 6 * LAYER_NAME_CHARS,
                     yaxis={"title": text(f"time {what} ({unit})"), "automargin": True},
                     xaxis={"tickangle": -90, "automargin": True,
                            **({"title": text(f"layers in {under}")} if under else {})},
                     **more)  # fmt: skip
    return figure(traces, layout), left


def _toggle(traces: int) -> list[dict[str, object]]:
    """Buttons showing one view's two bar traces (traces 0-1 wall, 2-3 GPU); the Tensor Core
    markers (trace 4) stay."""
    buttons: list[dict[str, object]] = []
    for v, label in enumerate(("host wall time", "GPU time")):
        visible = [t // 2 == v for t in range(4)] + [True] * (traces - 4)
        buttons.append({"label": label, "method": "restyle", "args": [{"visible": visible}]})
    return buttons


def decimated(values: np.ndarray, limit: int = ITERATION_POINTS) -> np.ndarray:
    """Indices of at most ``limit`` points of a series, in order: all when few; else the
    series cut in ``limit / 2`` buckets and each bucket's minimum and maximum kept, so every
    spike stays visible."""
    n = len(values)
    if n <= limit:
        return np.arange(n)
    buckets = np.array_split(np.arange(n), limit // 2)
    keep = []
    for idx in buckets:
        part = np.nan_to_num(values[idx], nan=0.0)
        keep += [idx[int(np.argmin(part))], idx[int(np.argmax(part))]]
    return np.unique(np.asarray(keep))


def _spans(flags: np.ndarray, x: np.ndarray, limit: int = 50) -> list[tuple[float, float]]:
    """Runs of consecutive True flags as (first x - 0.5, last x + 0.5), at most ``limit``."""
    out: list[tuple[float, float]] = []
    start = None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        if start is not None and (not flag or i == len(flags) - 1):
            end = i if flag else i - 1
            out.append((float(x[start]) - 0.5, float(x[end]) + 0.5))
            start = None
    return out[:limit]


def _band(x0: float, x1: float, color: str, label: str, first: bool) -> dict[str, object]:
    """A shaded span of iterations, named in the legend (once per label), never labelled
    inside the plot: two narrow neighbouring bands' labels would overlap."""
    return {"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
            "fillcolor": color, "opacity": 0.15, "line": {"width": 0}, "layer": "below",
            "name": label, "showlegend": first, "legendgroup": label}  # fmt: skip


OUTLIER_FACTOR = 3.0  # a step above this many times the median (and the p90) is an outlier


def axis_top(values: np.ndarray) -> float | None:
    """The y-axis top for a series with outliers, None when it has none: a step is an
    outlier above ``OUTLIER_FACTOR`` x the median and above the p90 (a 200 ms warm-up beside
    7 ms steps); the axis then ends a little above the highest of the others, so one step
    does not flatten every other into a line."""
    finite = values[np.isfinite(values)]
    if len(finite) < 3:
        return None
    median, p90 = float(np.median(finite)), float(np.quantile(finite, 0.9))
    limit = max(OUTLIER_FACTOR * median, p90)
    rest = finite[finite <= limit]
    if not len(rest) or finite.max() <= limit or median <= 0:
        return None
    top = float(rest.max()) * 1.15
    # An outlier within that margin is not cut off: the axis keeps its own range (and no
    # note names a step above the top, which none would be).
    return top if top < float(finite.max()) else None


def _outlier_note(x: np.ndarray, y: np.ndarray, top: float, unit: str) -> dict[str, object]:
    """The note at the top edge naming the highest step cut off the axis (and how many)."""
    above = np.flatnonzero(np.nan_to_num(y, nan=-np.inf) > top)
    worst = int(above[np.argmax(y[above])])
    more = f" (+{len(above) - 1} more off the axis)" if len(above) > 1 else ""
    left = worst <= len(x) / 2
    return {"x": int(x[worst]), "y": 1, "xref": "x", "yref": "paper", "yanchor": "top",
            "xanchor": "left" if left else "right", "showarrow": False,
            "text": f"▲ iteration {int(x[worst])}: {y[worst]:.4g} {unit}{more}",
            "bgcolor": "rgba(255,255,255,0.85)", "font": {"size": 11}}  # fmt: skip


def _scale_buttons(top: float) -> list[dict[str, object]]:
    """The iterations chart's two views of a series with outliers: the clipped linear axis
    (the note naming the highest step shown) or a log axis holding every step."""
    clipped = {"yaxis.type": "linear", "yaxis.range": [0, top], "annotations[0].visible": True}
    log = {"yaxis.type": "log", "yaxis.autorange": True, "annotations[0].visible": False}
    return [{"label": "linear, outliers cut", "method": "relayout", "args": [clipped]},
            {"label": "log scale", "method": "relayout", "args": [log]}]  # fmt: skip


def iterations_figure(iterations: pd.DataFrame, summary: Summary, *, gpu: bool) -> Figure | None:
    """Each iteration's wall time (and GPU busy time) in order, at most ``ITERATION_POINTS``
    points per trace; the warm-up and the analysed window shaded (shapes, in the legend); an
    outlier step (:func:`axis_top`) cut off the axis and named in a note, a button showing
    every step on a log axis instead."""
    if iterations.empty:
        return None
    x = iterations["iteration"].to_numpy(dtype="int64")
    wall = pd.to_numeric(iterations["wall_ns"], errors="coerce").to_numpy(float)
    keep = decimated(wall)
    unit, size = unit_for(wall)
    traces = [{
        "type": "scatter", "name": "step wall time", "x": x[keep].tolist(),
        "y": scaled(wall[keep], size), "mode": "lines+markers", "marker": {"size": 4},
        "line": {"color": "#1e88e5"},
        "hovertemplate": f"iteration %{{x}}: %{{y:.4g}} {unit}<extra></extra>",
    }]  # fmt: skip
    if gpu:
        busy = pd.to_numeric(iterations["gpu_busy_ns"], errors="coerce").to_numpy(float)
        traces.append({
            "type": "scatter", "name": "GPU busy", "x": x[keep].tolist(),
            "y": scaled(busy[keep], size), "mode": "lines", "line": {"color": "#43a047"},
            "hovertemplate": f"iteration %{{x}}: GPU busy %{{y:.4g}} {unit}<extra></extra>",
        })  # fmt: skip
    warm = _spans(iterations["warmup"].astype(bool).to_numpy(), x)
    shapes = [_band(a, b, "#fb8c00", "warm-up", i == 0) for i, (a, b) in enumerate(warm)]
    w = summary.window
    if w.window_iter_start is not None and w.window_iter_stop is not None:
        shapes.append(_band(w.window_iter_start - 0.5, w.window_iter_stop - 0.5, "#43a047",
                            "analysed", True))  # fmt: skip
    title = "Iterations"
    if len(keep) < len(x):
        title += f" ({len(x)}; each bucket's min and max of {len(keep)} points shown)"
    yaxis: dict[str, object] = {"title": text(f"time ({unit})"), "rangemode": "tozero"}
    more: dict[str, object] = {}
    top = axis_top(wall)
    if top is not None:
        yaxis["range"] = [0, top / size]
        more["annotations"] = [_outlier_note(x, wall / size, top / size, unit)]
        more["updatemenus"] = [{**BUTTONS, "buttons": _scale_buttons(top / size)}]
    xaxis = {"title": text("iteration"), "tick0": 0, "dtick": whole_step(int(np.ptp(x)) + 1)}
    return figure(traces, base_layout(title, unit, size, shapes=shapes, height=360,
                                      xaxis=xaxis, yaxis=yaxis, **more))  # fmt: skip


def whole_step(count: int, ticks: int = 12) -> int:
    """A round tick step (1, 2 or 5 x 10^k) for an axis of ``count`` whole numbers (the
    iterations) showing at most about ``ticks`` of them: never a tick between two."""
    step = 1
    while count / step > ticks:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def kernels_figure(kernels: pd.DataFrame, top: int = TOP_KERNELS) -> Figure | None:
    """The ``top`` kernels by total GPU time (the kernels table's order), Tensor Core kernels
    in another colour."""
    if kernels.empty:
        return None
    rows = kernels.head(top)
    total = pd.to_numeric(rows["total_ns"], errors="coerce").to_numpy(float)
    unit, size = unit_for(total)
    tc = rows["tc_class"].astype(str).tolist()
    colors = {"tc": "#6a1b9a", "no_tc": "#78909c"}
    bar = {
        "type": "bar", "name": "GPU time", "orientation": "h", "x": scaled(total, size),
        "y": kernel_labels(rows["short_name"].tolist(), rows["name"].tolist()),
        **marker([colors.get(c, "#bdbdbd") for c in tc]),
        "customdata": [[str(n), c, plain_count(i)] for n, c, i in
                       zip(rows["name"].tolist(), tc, rows["instances"].tolist(), strict=True)],
        "hovertemplate": f"%{{customdata[0]}}<br>%{{x:.4g}} {unit} in %{{customdata[2]}} calls"
                         "<br>Tensor Cores: %{customdata[1]}<extra></extra>",
    }  # fmt: skip
    return figure([bar], base_layout(f"Top {len(rows)} kernels by GPU time (purple: Tensor Cores)",
                                 unit, size, height=max(300, 24 * len(rows) + 120),
                                 xaxis={"title": text(f"GPU time ({unit})")},
                                 yaxis={"autorange": "reversed", "automargin": True}))  # fmt: skip


def plain_count(value: object) -> str:
    return "-" if value is None or value is pd.NA else str(value)
