"""The one-iteration timeline of report.html: a Gantt chart from ``Report.timeline``.

Place in the pipeline: report (rendering, for render/page/html.py). The timeline table (one
steady iteration's events: ranges, CUDA API calls, kernels and memory operations) becomes
horizontal bars on lanes, CPU above GPU: per thread (named: ``main``, ``autograd 0``,
``DataLoader worker 1``, rules/threads.py) its ranges packed on levels (an enclosing range
above the ranges it holds) and one lane for its CUDA API calls, then one lane per GPU stream.
Bars are coloured by phase and carry their layer's name where it fits. Times are from the
iteration's first event, in one unit. Hover shows the name, kind, layer and phase. At most
``TIMELINE_PAGE_MAX`` events are drawn (the longest; the table keeps them all, trace.json
shows them in Perfetto).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.render.page.charts import PHASE_COLORS, base_layout, short, unit_for
from dlprof_lite.render.page.critical_chart import PART_COLORS
from dlprof_lite.render.page.figures import Figure, figure, text

TIMELINE_PAGE_MAX = 5000
GPU_KINDS = ("kernel", "memcpy", "memset")
PHASE_ORDER = ("data", "forward", "backward", "optimizer", "compile")
NO_PHASE = "no phase"
NO_PHASE_COLOR = "#b0bec5"


def _int(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame:
        return pd.Series(-1, index=frame.index, dtype="int64")
    return pd.to_numeric(frame[column], errors="coerce").fillna(-1).astype("int64")


def range_levels(frame: pd.DataFrame, thread: pd.Series) -> pd.Series:
    """Each range's level on its thread: the first level free at its start, ranges taken by
    start (the longer first), so an enclosing range sits above what it holds. Depth alone
    would not do: start/end ranges (the iteration, the phases) all have depth 0 and overlap."""
    order = frame.assign(_t=thread.to_numpy(), _len=frame["start_ns"] - frame["end_ns"])
    order = order.sort_values(["_t", "start_ns", "_len"], kind="stable")
    level = pd.Series(0, index=frame.index, dtype="int64")
    ends: dict[object, list[int]] = {}
    for idx, t, start, stop in zip(order.index, order["_t"], order["start_ns"], order["end_ns"],
                                   strict=True):  # fmt: skip
        busy = ends.setdefault(t, [])
        free = next((i for i, e in enumerate(busy) if e <= start), len(busy))
        if free == len(busy):
            busy.append(int(stop))
        else:
            busy[free] = int(stop)
        level[idx] = free
    return level


def tracks(frame: pd.DataFrame) -> pd.Series:
    """Each event's named track (the timeline table's ``track``: main, autograd 0, stream 7,
    rules/threads.py); a frame without one (an older report) falls back to the ids."""
    gpu = frame["kind"].astype(str).isin(GPU_KINDS)
    plain = np.where(gpu, "stream " + _int(frame, "stream_id").astype(str),
                     "thread " + _int(frame, "tid").astype(str))  # fmt: skip
    if "track" not in frame:
        return pd.Series(plain, index=frame.index, dtype=object)
    named = frame["track"].astype(object)
    return named.where(named.notna(), pd.Series(plain, index=frame.index))


def lanes(frame: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Each event's lane name and every lane in display order (CPU threads first: ranges by
    level, then API calls; then GPU streams), named by thread and stream (``main``, ``main ·
    level 1``, ``main · CUDA API``, ``GPU 0 · stream 7``). The process is named when there
    are several."""
    kind = frame["kind"].astype(str)
    pid, tid = _int(frame, "pid"), _int(frame, "tid")
    dev, stream = _int(frame, "device_id"), _int(frame, "stream_id")
    several = pid[~kind.isin(GPU_KINDS)].nunique() > 1
    proc = ("pid " + pid.astype(str) + " · ") if several else pd.Series("", index=frame.index)
    track = tracks(frame)
    thread = proc + track.astype(str)
    is_range = kind == "range"
    level = pd.Series(0, index=frame.index, dtype="int64")
    if is_range.any():
        level[is_range] = range_levels(frame[is_range], thread[is_range])
    gpu = kind.isin(GPU_KINDS)
    # Sort keys: (group 0 CPU / 1 GPU, a, b, c) -> display order.
    key = pd.DataFrame({
        "g": gpu.astype(int),
        "a": np.where(gpu, dev, pid), "b": np.where(gpu, stream, tid),
        "c": np.where(gpu, 0, np.where(is_range, level, 1 << 20)),
    })  # fmt: skip
    deeper = np.where(level > 0, " · level " + level.astype(str), "")
    name = np.where(
        gpu, "GPU " + dev.astype(str) + " · " + track.astype(str),
        np.where(is_range, thread + deeper, thread + " · CUDA API"),
    )  # fmt: skip
    key["name"] = name
    order = key.drop_duplicates("name").sort_values(["g", "a", "b", "c"], kind="stable")
    return pd.Series(name, index=frame.index), order["name"].tolist()


def _text(values: pd.Series) -> list[str]:
    return ["-" if v is None or v is pd.NA or v != v else short(v, 80) for v in values.tolist()]


def shown_window(frame: pd.DataFrame, iteration: tuple[int, int] | None) -> tuple[int, int]:
    """The span the chart shows: the iteration's bounds widened to its CUDA calls and GPU
    ops (a kernel may end after its iteration); without bounds, every event. Ranges are kept
    whole in the table (an epoch range may span the run), so only they can reach past it."""
    ops = frame[frame["kind"].astype(str) != "range"]
    every = ops if iteration is not None and not ops.empty else frame
    lo, hi = int(every["start_ns"].min()), int(every["end_ns"].max())
    if iteration is not None:
        lo, hi = min(lo, iteration[0]), max(hi, iteration[1])
    return lo, hi


def gpu_focus(frame: pd.DataFrame, window: tuple[int, int]) -> tuple[int, int]:
    """The x range a chart without an iteration opens on: its GPU work's span and a twentieth
    of it either side (a stretch of a session may be seconds of host work around milliseconds
    of kernels), within ``window``; the whole window without GPU work. Plotly's double-click
    zooms out to every event."""
    gpu = frame[frame["kind"].astype(str).isin(GPU_KINDS)]
    if gpu.empty:
        return window
    lo, hi = int(gpu["start_ns"].min()), int(gpu["end_ns"].max())
    pad = max((hi - lo) // 20, 1)
    return max(window[0], lo - pad), min(window[1], hi + pad)


def _customdata(part: pd.DataFrame, dur: pd.Series) -> list[list[str]]:
    """Hover text per event: name, layer, phase, its real duration (bars are clipped), kind."""
    none = pd.Series(None, index=part.index)
    return [list(t) for t in zip(
        _text(part["name"]), _text(part.get("layer", none)), _text(part.get("phase", none)),
        [f"{d / 1e3:.3f} µs" for d in dur.tolist()], part["kind"].astype(str).tolist(),
        strict=True)]  # fmt: skip


def colour(phase: str) -> str:
    return PHASE_COLORS.get(phase, NO_PHASE_COLOR)


def phases(frame: pd.DataFrame) -> pd.Series:
    """Each event's colour group: its phase (data, forward, backward, optimizer, compile),
    ``no phase`` where none is known (the iteration range, calls outside any phase)."""
    phase = frame["phase"].astype(object) if "phase" in frame else pd.Series(None, frame.index)
    known = phase.notna() & phase.astype(str).isin(list(PHASE_COLORS))
    return phase.where(known, NO_PHASE).astype(str)


def labels(frame: pd.DataFrame) -> list[str]:
    """The text on each bar: its layer, else a range's own name (``iteration``,
    ``forward``); plotly hides a label its bar is too narrow for (``uniformtext``)."""
    layer = frame["layer"].astype(object) if "layer" in frame else pd.Series(None, frame.index)
    own = frame["name"].astype(object).where(frame["kind"].astype(str) == "range")
    text = layer.where(layer.notna(), own)
    return ["" if v is None or v is pd.NA or v != v else short(v, 40) for v in text.tolist()]


def timeline_figure(
    frame: pd.DataFrame,
    cap: int = TIMELINE_PAGE_MAX,
    iteration: tuple[int, int] | None = None,
    what: str = "One iteration",
    critical: pd.DataFrame | None = None,
) -> tuple[Figure | None, int]:
    """The Gantt chart of a timeline-shaped frame (report/metrics.py TIMELINE_REPORT) and how
    many events it leaves out: rows named by thread and stream (:func:`lanes`), bars coloured
    by phase and labelled by layer. ``iteration``: its (start, end) ns; bars are clipped to
    :func:`shown_window`, the hover keeps each event's real duration; without one the chart
    opens on the GPU work (:func:`gpu_focus`). ``what``: the span's name in the title.
    ``critical``: the iteration's critical path (the report's ``critical_path``), drawn as a
    lane of its own on top, coloured by part."""
    if frame.empty:
        return None, 0
    dur = (frame["end_ns"].astype("int64") - frame["start_ns"].astype("int64")).clip(lower=0)
    left = max(len(frame) - cap, 0)
    if left:
        frame = frame.loc[dur.sort_values(ascending=False, kind="stable").index[:cap]]
        dur = dur.loc[frame.index]
    origin, end = shown_window(frame, iteration)
    first, last = (origin, end) if iteration is not None else gpu_focus(frame, (origin, end))
    unit, size = unit_for([last - first])
    begin = frame["start_ns"].astype("int64").clip(lower=origin, upper=end)
    width = frame["end_ns"].astype("int64").clip(lower=origin, upper=end) - begin
    lane, order = lanes(frame)
    group, text_of = phases(frame), pd.Series(labels(frame), index=frame.index)
    traces = []
    for phase in [*PHASE_ORDER, NO_PHASE]:
        rows = group == phase
        if not rows.any():
            continue
        traces.append({
            "type": "bar", "name": phase, "orientation": "h", "y": lane[rows].tolist(),
            "base": ((begin[rows] - origin) / size).tolist(), "x": (width[rows] / size).tolist(),
            # An outline of the fill's colour: an event far shorter than a pixel (a 5 µs
            # kernel in a 2 s stretch) still shows as a line.
            "marker": {"color": colour(phase), "line": {"color": colour(phase), "width": 1}},
            "text": text_of[rows].tolist(), "textposition": "inside",
            "insidetextanchor": "start", "textfont": {"size": 10}, "cliponaxis": True,
            "customdata": _customdata(frame[rows], dur[rows]),
            "hovertemplate": "%{customdata[0]} (%{customdata[4]})<br>%{customdata[3]} "
                             f"(from %{{base:.4g}} {unit})<br>layer: %{{customdata[1]}}"
                             "<br>phase: %{customdata[2]}<extra>%{y}</extra>",
        })  # fmt: skip
    if critical is not None and not critical.empty:
        traces += _path_traces(critical, origin, end, size, unit)
        order = [CRITICAL_LANE, *order]
    layout = base_layout(
        f"{what}: ranges and CUDA API calls per thread, GPU work per stream",
        unit, size, barmode="overlay", height=max(320, 26 * len(order) + 160),
        xaxis={"title": text(f"time from the first event ({unit})"),
               "range": [(first - origin) / size, (last - origin) / size]},
        yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed",
               "automargin": True},
        uniformtext={"mode": "hide", "minsize": 9},
    )  # fmt: skip
    layout["meta"] = {"unit": unit, "ns": size, "origin_ns": origin}
    return figure(traces, layout), left


CRITICAL_LANE = "critical path"


def _path_traces(path: pd.DataFrame, origin: int, end: int, size: float, unit: str
                 ) -> list[dict[str, object]]:  # fmt: skip
    """The critical path's pieces on a lane of their own, one trace per part."""
    begin = path["start_ns"].astype("int64").clip(lower=origin, upper=end)
    width = path["end_ns"].astype("int64").clip(lower=origin, upper=end) - begin
    dur = path["end_ns"].astype("int64") - path["start_ns"].astype("int64")
    out: list[dict[str, object]] = []
    for part, color in PART_COLORS.items():
        rows = (path["part"].astype(str) == part).to_numpy(bool)
        if not rows.any():
            continue
        mine = path[rows]
        where = [f"{short(n, 60)} on {t}" if isinstance(n, str) and n else str(t)
                 for n, t in zip(mine["name"].tolist(), mine["track"].tolist(), strict=True)]
        out.append({
            "type": "bar", "name": f"path: {part}", "orientation": "h",
            "y": [CRITICAL_LANE] * int(rows.sum()),
            "base": ((begin[rows] - origin) / size).tolist(), "x": (width[rows] / size).tolist(),
            "marker": {"color": color, "line": {"color": color, "width": 1}},
            "text": labels(mine.assign(kind="path")), "textposition": "inside",
            "insidetextanchor": "start", "textfont": {"size": 10}, "cliponaxis": True,
            "customdata": [[w, _text(pd.Series([lay]))[0], f"{d / 1e3:.3f} µs"]
                           for w, lay, d in zip(where, mine["layer"].tolist(),
                                                dur[rows].tolist(), strict=True)],
            "hovertemplate": f"critical path, {part}: %{{customdata[0]}}<br>%{{customdata[2]}}"
                             f" (from %{{base:.4g}} {unit})<br>layer: %{{customdata[1]}}"
                             "<extra></extra>",
        })  # fmt: skip
    return out
