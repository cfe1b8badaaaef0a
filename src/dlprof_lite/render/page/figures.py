"""Plotly figures as plain JSON data, built without plotly's Python figure classes.

Place in the pipeline: report (rendering; render/page/charts.py, timeline_chart.py, rank_views.py
and compare/page.py build their charts with it). A figure is what ``Plotly.newPlot`` takes,
``{"data": [trace, ...], "layout": {...}}``, written with plotly's full property names
(``{"marker": {"color": c}}``, ``{"title": {"text": t}}``: never the ``marker_color`` or
``title=t`` shorthands of ``plotly.graph_objects``), so it is exactly the JSON
``plotly.graph_objects`` would write. Those classes validated every property through
validators imported on first use: 0.2 s of a small report, for charts of a few dozen numbers.
The tests validate every figure of the pages with ``plotly.graph_objects`` instead: a figure
it would reject or rewrite fails there.

Every figure gets plotly's ``plotly_white`` template, read from the installed plotly
package's data as ``plotly.io.templates`` reads it (plotly.js knows no template names).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from dlprof_lite.render.page.plotly_cache import package_data

Figure = dict[str, Any]
TEMPLATE = "plotly_white"


@functools.cache
def _template_text() -> str:
    return package_data(f"templates/{TEMPLATE}.json").read_text(encoding="utf-8")


def template() -> dict[str, Any]:
    """The ``plotly_white`` template (a fresh copy: figures never share mutable parts)."""
    out: dict[str, Any] = json.loads(_template_text())
    return out


def figure(traces: list[dict[str, Any]], layout: dict[str, Any]) -> Figure:
    """A figure of ``traces`` (each with its ``type``) and ``layout``, themed."""
    return {"data": traces, "layout": {**layout, "template": template()}}


def text(value: str) -> dict[str, str]:
    """A title: plotly writes every title as ``{"text": ...}``."""
    return {"text": value}


def marker(color: object) -> dict[str, object]:
    """``{"marker": {"color": color}}``, or nothing when ``color`` is None (plotly leaves an
    unset property out)."""
    return {} if color is None else {"marker": {"color": color}}
