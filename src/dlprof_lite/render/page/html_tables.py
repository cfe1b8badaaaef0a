"""The HTML tables of report.html: run facts, the sortable layer table, top kernels, advice.

Place in the pipeline: report (rendering, for render/page/html.py). Every name and value goes
through ``esc`` (html.escape); sortable columns carry their number in ``data-sort`` so a
header click sorts numerically (the page's few lines of sorting script, plotly_bundle.py).
Row counts are capped (``LAYER_ROWS``) so a page stays small for any model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from dlprof_lite.render.page.charts import kernel_labels
from dlprof_lite.render.page.plotly_bundle import esc
from dlprof_lite.report.summary_types import number
from dlprof_lite.report.units import duration, percent

LAYER_ROWS = 2000  # rows of the layer table (network order; the rest counted in a note)


def plain(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def facts_table(tid: str, rows: Sequence[tuple[str, str]]) -> str:
    """A two-column key/value table; values are plain text (escaped here)."""
    body = "\n".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts" id="{esc(tid)}">\n{body}\n</table>'


@dataclass(frozen=True)
class Column:
    """A table column: heading, the row field it shows, how to format it, sortable as a
    number (``data-sort``) or as text."""

    heading: str
    field: str
    fmt: Callable[[object], str] = plain
    numeric: bool = True
    name: bool = False  # a name column: left-aligned, wraps
    title: str = ""  # a field shown on hover (the full name behind a short one)


def cell(col: Column, value: object, title: object = None) -> str:
    cls = ' class="name"' if col.name else ""
    if title is not None and title != value:
        cls += f' title="{esc(title)}"'
    text = esc(col.fmt(value))
    if col.numeric:
        num = number(value)
        sort = "" if num is None else f' data-sort="{num!r}"'
        return f"<td{cls}{sort}>{text}</td>"
    return f"<td{cls}>{text}</td>"


def table(tid: str, columns: Sequence[Column], rows: pd.DataFrame,
          extra: Callable[[pd.Series], str] | None = None) -> str:  # fmt: skip
    """A sortable table of ``rows`` (every column present in the frame), ``extra`` adding a
    last cell of HTML (already escaped) per row."""
    named = ' class="name"'
    head = "".join(f"<th{named if c.name else ''}>{esc(c.heading)}</th>" for c in columns)
    head += f"<th{named}>kernels</th>" if extra else ""
    lines = [f'<table class="sortable" id="{esc(tid)}">', f"<thead><tr>{head}</tr></thead>",
             "<tbody>"]  # fmt: skip
    for _, row in rows.iterrows():
        cells = "".join(
            cell(c, row.get(c.field), row.get(c.title) if c.title else None) for c in columns
        )
        if extra is not None:
            cells += f'<td class="name">{extra(row)}</td>'
        lines.append(f"<tr>{cells}</tr>")
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


def _layer_columns(gpu: bool, per_step: bool) -> list[Column]:
    """Per-step columns when the window has steps, else window totals."""
    cols = [
        Column("#", "order"),
        Column("layer", "layer", numeric=False, name=True),
        Column("type", "type", numeric=False),
    ]
    if per_step:
        cols += [
            Column("calls/step", "calls_per_step"),
            Column("fwd wall/step", "step_forward_wall_ns", duration),
            Column("bwd wall/step", "step_backward_wall_ns", duration),
            Column("self wall/step", "step_self_wall_ns", duration),
        ]
        gpu_cols = [Column("fwd GPU/step", "step_forward_gpu_ns", duration),
                    Column("bwd GPU/step", "step_backward_gpu_ns", duration),
                    Column("self GPU/step", "step_self_gpu_ns", duration)]  # fmt: skip
    else:
        cols += [
            Column("calls", "calls"),
            Column("fwd wall", "forward_wall_ns", duration),
            Column("bwd wall", "backward_wall_ns", duration),
        ]
        gpu_cols = [Column("fwd GPU", "forward_gpu_ns", duration),
                    Column("bwd GPU", "backward_gpu_ns", duration),
                    Column("self GPU", "gpu_ns", duration)]  # fmt: skip
    if gpu:
        cols += [*gpu_cols, Column("Tensor Cores", "tc_share", percent),
                 Column("host gap (window)", "host_gap_ns", duration)]  # fmt: skip
    return cols


def _layer_kernels(row: pd.Series) -> str:
    """A layer's own kernels on expand: top kernels, how many distinct, Tensor Core facts."""
    top = row.get("top_kernels")
    if not isinstance(top, str) or not top:
        return "-"
    facts = [
        ("distinct kernels", plain(row.get("distinct_kernels"))),
        ("kernels run", plain(row.get("kernels"))),
        ("Tensor Core share", percent(row.get("tc_share"))),
        ("Tensor Core eligible", plain(row.get("tc_eligible"))),
        ("inferred", plain(row.get("tc_inferred"))),
        ("dtype", plain(row.get("dtype"))),
        ("input shape", plain(row.get("in_shape"))),
        ("wrapper", plain(row.get("wrapper"))),
    ]
    items = "".join(f"<li>{esc(k)}</li>" for k in top.split("; "))
    more = "".join(f"<br>{esc(k)}: {esc(v)}" for k, v in facts if v != "-")
    return f"<details><summary>{esc(plain(row.get('distinct_kernels')))} kernels</summary>" \
           f"<ul>{items}</ul>{more}</details>"  # fmt: skip


def layer_table(layers: pd.DataFrame, *, gpu: bool, per_step: bool, cap: int = LAYER_ROWS) -> str:
    """``table#layer-table``: one row per layer in network order, each layer's kernels in a
    ``<details>`` (GPU runs); past ``cap`` rows a note says how many are left out."""
    rows = layers.sort_values("order", kind="stable")
    note = ""
    if len(rows) > cap:
        note = f'<p class="note">first {cap} layers in network order; +{len(rows) - cap} more ' \
               "in layers.csv</p>"  # fmt: skip
        rows = rows.iloc[:cap]
    columns = _layer_columns(gpu, per_step)
    return table("layer-table", columns, rows, _layer_kernels if gpu else None) + note


KERNEL_COLUMNS = (
    Column("kernel", "short_name", numeric=False, name=True, title="name"),
    Column("calls", "instances"),
    Column("total", "total_ns", duration),
    Column("avg", "avg_ns", duration),
    Column("% of kernel time", "pct_kernel_time", lambda v: percent(v, 1.0)),
    Column("Tensor Cores", "tc_class", numeric=False),
    Column("avg launch call", "avg_api_ns", duration),
    Column("avg queue", "avg_queue_ns", duration),
    Column("short launches", "short_launches"),
)


def kernels_table(kernels: pd.DataFrame, top: int) -> str:
    """The top kernels, named as the chart above names them (charts.kernel_labels: kernels
    sharing a short name told apart), the whole name on hover."""
    shown = kernels.head(top)
    labels = kernel_labels(shown["short_name"].tolist(), shown["name"].tolist())
    return table("kernel-table", KERNEL_COLUMNS, shown.assign(short_name=labels))


def advice_list(advice: pd.DataFrame) -> str:
    """Each finding: severity, problem, evidence, what to do, the metric against its
    threshold, and the source of the rule."""
    out = []
    for _, row in advice.iterrows():
        sev = str(row.get("severity") or "info")
        out.append(
            f'<div class="advice {esc(sev)}"><strong>[{esc(sev)}] {esc(row.get("problem"))}'
            f"</strong><br>{esc(row.get('evidence'))}<br><em>{esc(row.get('recommendation'))}"
            f'</em><br><span class="note">{esc(row.get("metric"))} = '
            f"{esc(plain(row.get('value')))} (threshold {esc(plain(row.get('threshold')))}); "
            f"{esc(row.get('citation'))}</span></div>"
        )
    return "\n".join(out)
