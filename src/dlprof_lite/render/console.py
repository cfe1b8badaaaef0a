"""The short console summary: what ran, where the time went, and what to change.

Rendered with rich (plain text when the output is not a terminal). Only the CLI calls this;
everything shown here is also in the report files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from dlprof_lite.narrow import distinct_short
from dlprof_lite.render.console_lines import (
    TOP,
    critical_lines,
    header_lines,
    idle_lines,
    line_text,
)
from dlprof_lite.render.page.cost_chart import cost_layers
from dlprof_lite.render.page.memory_chart import MEMORY_COLUMNS, own_bytes
from dlprof_lite.report.model import Report
from dlprof_lite.report.summary_types import Summary, number
from dlprof_lite.report.units import bytes_text, flops
from dlprof_lite.report.units import duration as _t
from dlprof_lite.report.units import percent as _pct
from dlprof_lite.rules.collectives import FAMILY
from dlprof_lite.rules.payloads import display_name
from dlprof_lite.safe_text import printable

SEVERITY_STYLE = {"high": "bold red", "warn": "yellow", "info": "cyan"}


def _table(
    title: str, frame: pd.DataFrame, columns: dict[str, str], width: int, top: int = TOP
) -> RichTable | None:
    """A small rich table of ``frame``'s first rows; ``columns`` maps column -> heading.

    The first (name) column is cut with an ellipsis so the numbers always fit in ``width``.
    """
    if frame.empty:
        return None
    table = RichTable(title=title, title_justify="left", show_edge=False, pad_edge=False)
    name_width = max(16, width - 12 * (len(columns) - 1))
    frame = frame.head(top)
    first = next(iter(columns))
    names = [str(v) for v in frame[first].tolist()]
    frame = frame.assign(**{first: distinct_short(names, name_width)})
    for i, heading in enumerate(columns.values()):
        if i == 0:
            table.add_column(heading, overflow="ellipsis", no_wrap=True, max_width=name_width)
        else:
            table.add_column(heading, justify="right", no_wrap=True)
    for values in frame.to_dict("records"):
        cells = []
        for col in columns:
            v = values[col]
            if col.endswith("_ns"):
                cells.append(_t(v))
            elif col in ("tc_share",):
                cells.append(_pct(v))
            elif col.startswith("pct"):
                cells.append(_pct(v, 1))
            elif isinstance(v, float):
                cells.append("-" if v != v else f"{v:.3g}")  # NaN: unknown
            else:
                cells.append("-" if v is None or v is pd.NA else str(v))
        table.add_row(*(line_text(c) for c in cells))  # names as Text: never markup
    return table


def _shown_paths(ranges: pd.DataFrame) -> pd.DataFrame:
    """Range paths as people read them: a PyProf/DLProf payload (a dict's text) by the layer
    or op it names (rules/payloads.py), its parents elided."""
    paths = ranges["path"].astype(str)
    payload = paths.str.contains("{", regex=False)
    if not payload.any():
        return ranges
    shown = [("…/" if depth else "") + display_name(name) if is_payload else path
             for path, name, depth, is_payload in zip(paths, ranges["name"].astype(str),
                                                      ranges["depth"], payload, strict=True)]
    return ranges.assign(path=shown)


def _layers_table(layers: pd.DataFrame, width: int, top: int = TOP) -> RichTable | None:
    """The layers with the most self time (their own work, not their children's: leaves
    first among equals), per step when the report has steps. By GPU time; by host wall
    time when the profile has no GPU work (a CPU run), whose GPU columns are left out."""
    if layers.empty:
        return None
    per_step = layers["step_self_wall_ns"].notna().any()
    cpu = int(pd.to_numeric(layers["gpu_ns"]).sum()) == 0
    if per_step:
        self_col = "step_self_wall_ns" if cpu else "step_self_gpu_ns"
        fwd, bwd = ("step_forward_wall_ns", "step_backward_wall_ns") if cpu else (
            "step_forward_gpu_ns", "step_backward_gpu_ns")  # fmt: skip
        ranked = layers.assign(_self=pd.to_numeric(layers[self_col]))
    else:
        fwd, bwd = ("forward_wall_ns", "backward_wall_ns") if cpu else (
            "forward_gpu_ns", "backward_gpu_ns")  # fmt: skip
        own = ("self_forward_wall_ns", "self_backward_wall_ns") if cpu else ("gpu_ns",)
        ranked = layers.assign(_self=layers[list(own)].sum(axis=1))
    parents = set(layers["parent"].dropna().astype(str))
    ranked = ranked.assign(_leaf=~layers["layer"].astype(str).isin(parents))
    ranked = ranked.sort_values(["_self", "_leaf", "order"], ascending=[False, False, True],
                                kind="stable")  # fmt: skip
    scope = "per step" if per_step else "whole run"
    if cpu:
        title = f"Top layers by self host time, {scope} (no GPU work in this profile)"
        cols = {"layer": "layer", "type": "type", "_self": "self", fwd: "forward",
                bwd: "backward", "calls_per_step" if per_step else "calls": "calls"}  # fmt: skip
    else:
        title = f"Top layers by self GPU time, {scope}"
        cols = {"layer": "layer", "type": "type", "_self": "self", fwd: "forward",
                bwd: "backward", "tc_share": "TC"}  # fmt: skip
    return _table(title, ranked.rename(columns={"_self": "_self_ns"}),
                  {("_self_ns" if k == "_self" else k): v for k, v in cols.items()},
                  width, top)  # fmt: skip


def _cost_table(layers: pd.DataFrame, s: Summary, width: int, top: int) -> RichTable | None:
    """Cost per layer: the layers that take the most time per step (inclusive, roots apart:
    the title gives the model's) with their FLOPs, achieved rate and MFU (layers/flops.py);
    layers with FLOPs but no time (folded) are left out."""
    if layers.empty or not layers["step_flops"].notna().any():
        return None
    shown, gpu = cost_layers(layers, unknown=True, cap=top)
    shown = shown.rename(columns={"_time": "_time_ns"}).assign(
        flop=[flops(v) for v in shown["step_flops"]],
        rate=[flops(v, "FLOP/s") for v in shown["achieved_flops_per_s"]],
        share=[_pct(v) for v in shown["mfu"]],
    )
    c = s.cost
    model = [f"model {flops(c.model_flops_per_step)} per step",
             f"{flops(c.model_flops_per_s, 'FLOP/s')} over the median step"]  # fmt: skip
    if number(c.mfu) is not None:
        model.append(f"MFU {_pct(c.mfu)} of {c.mfu_gpu}'s dense peak")
    elif gpu:
        model.append("no MFU: the GPU or a dtype has no peak in the table")
    title = ("Cost per layer, per step (" + ("GPU" if gpu else "wall, CPU-only: no MFU")
             + " time, inclusive)\n" + " · ".join(model))  # fmt: skip
    columns = {"layer": "layer", "_time_ns": "time", "flop": "FLOPs",
               "rate": "FLOP/s", "flops_dtype": "dtype"}  # fmt: skip
    if gpu:
        columns["share"] = "MFU"
    return _table(title, shown, columns, width, top)


def _memory_table(layers: pd.DataFrame, s: Summary, width: int, top: int) -> RichTable | None:
    """Memory per layer: the layers holding the most bytes of their own (parameters,
    gradients, optimizer state, activations saved in the first analysed step;
    report/layers/memory.py), the totals and the GPU peak in the title."""
    if layers.empty or not layers[list(MEMORY_COLUMNS)].notna().any().any():
        return None
    own = own_bytes(layers)
    shown = layers.assign(_own=own)[(own > 0).to_numpy(bool)]
    shown = shown.sort_values("_own", ascending=False, kind="stable")
    shown = shown.assign(**{f"_{c}": [bytes_text(v) for v in shown[c]] for c in MEMORY_COLUMNS})
    m = s.memory
    totals = [f"{label} {bytes_text(getattr(m, f'memory_{c}'))}" for label, c in (
        ("params", "param_bytes"), ("grads", "gradient_bytes"), ("optimizer", "optimizer_bytes"),
        ("saved", "saved_bytes"))]  # fmt: skip
    if number(m.memory_gpu_peak_bytes) is not None:
        totals.append(f"GPU peak {bytes_text(m.memory_gpu_peak_bytes)} "
                      f"({bytes_text(m.memory_gpu_unexplained_bytes)} not in these)")  # fmt: skip
    title = ("Memory per layer (its own tensors; saved: activations kept for backward in the "
             "first analysed step)\n" + " · ".join(totals))  # fmt: skip
    columns = {"layer": "layer", "_param_bytes": "params", "_gradient_bytes": "grads",
               "_optimizer_bytes": "optimizer", "_saved_bytes": "saved"}  # fmt: skip
    return _table(title, shown, columns, width, top)


def _ranges_table(ranges: pd.DataFrame, width: int) -> RichTable | None:
    """Ranges by GPU time; by wall time, without the empty GPU columns, on a CPU run."""
    ranges = _shown_paths(ranges)
    if len(ranges) and int(pd.to_numeric(ranges["gpu_ns"]).sum()) == 0:
        walls = ranges.sort_values("wall_ns", ascending=False, kind="stable")
        columns = {"path": "range", "instances": "calls", "wall_ns": "wall"}
        return _table("Top NVTX ranges (wall time: no GPU work in this profile)", walls,
                      columns, width)  # fmt: skip
    return _table("Top NVTX ranges (GPU time)", ranges,
                  {"path": "range", "instances": "calls", "gpu_ns": "GPU", "wall_ns": "wall",
                   "tc_share": "TC"}, width)  # fmt: skip


def render(report: Report, out_dir: Path | None, console: Console, *, top: int = TOP) -> None:
    """Print the summary of one report (``top``: rows of each top list: layers, cost, memory,
    the idle causes)."""
    for line in header_lines(report.summary):
        console.print(line if isinstance(line, Text) else line_text(line), highlight=False)
    for block in (idle_lines(report, top),
                  critical_lines(report, printable(str(out_dir)) if out_dir else None)):
        if block:
            console.print()
            for line in block:
                console.print(line, highlight=False)
    tables = (
        _layers_table(report.layers, console.width, top),
        _table(
            "Top kernels",
            report.kernels,
            {"short_name": "kernel", "instances": "calls", "total_ns": "total",
             "pct_kernel_time": "share", "tc_class": "TC"},
            console.width,
        ),
        _cost_table(report.layers, report.summary, console.width, top),
        _memory_table(report.layers, report.summary, console.width, top),
        _ranges_table(report.ranges, console.width),
        _ranks_table(report.ranks, console.width,
                     report.summary.communication.pipeline_bubble_pct is not None),
        _collectives_table(report.collective_ops, console.width),
        _collective_layers_table(report.collective_layers, console.width),
        _grad_sync_table(report.layers, console.width),
    )  # fmt: skip
    for table in tables:
        if table is not None:
            console.print()
            console.print(table)
    _advice(report.advice, console)
    for warning in report.summary.warnings:
        console.print(line_text(("warning:", "yellow"), f" {warning}"), highlight=False)
    if out_dir is not None:
        console.print(line_text(f"report: {out_dir}"), highlight=False)


_RANK_COLUMNS = {
    "rank": "rank", "device": "device", "steps": "steps", "step_median_ns": "median step",
    "step_compute_ns": "compute/step", "step_comm_ns": "comm/step",
    "step_exposed_comm_ns": "exposed/step", "overlap": "overlap", "step_data_ns": "data/step",
}  # fmt: skip


def _ranks_table(ranks: pd.DataFrame, width: int, pipeline: bool = False) -> RichTable | None:
    """Several ranks: each timeline's compute, communication and data per step, the straggler
    marked (report/ranks/table.py)."""
    if len(ranks) < 2:
        return None
    straggler = ranks["straggler"].fillna(False).astype(bool).to_numpy()
    shown = ranks.assign(
        rank=[f"{r}{' (straggler)' if s else ''}" for r, s in zip(ranks["rank"], straggler)],
        device=[_count(d) for d in ranks["device_id"]],
        overlap=[_pct(v, 1) for v in ranks["overlap_pct"]],
        bubble=[_pct(v, 1) for v in ranks["bubble_pct"]] if "bubble_pct" in ranks else None,
    )
    columns = dict(_RANK_COLUMNS)
    if pipeline:  # the stages' time without compute (report/ranks/table.py)
        columns.pop("overlap", None)  # the bubble says more there, and the table must fit
        columns |= {"bubble": "bubble"}
    if not (pd.to_numeric(ranks["step_data_ns"]).fillna(0) > 0).any():
        columns.pop("step_data_ns")  # no data phase recorded: a column of zeros
    if ranks["device_id"].isna().all():  # CPU ranks (gloo): no GPU figures to show
        for gone in ("device", "step_compute_ns", "step_comm_ns", "step_exposed_comm_ns",
                     "overlap"):  # fmt: skip
            columns.pop(gone, None)
    if "step_waited_for_ns" in ranks and ranks["step_waited_for_ns"].notna().any():
        # measured in the recorded collectives (report/collectives/)
        columns |= {"step_coll_wait_ns": "waits/step", "step_waited_for_ns": "waited for/step"}
    return _table("Ranks", shown, columns, width, top=len(shown))


_COLLECTIVE_COLUMNS = {
    "op": "collective", "size": "size", "instances": "calls", "transfer_median_ns": "transfer",
    "wait_mean_ns": "wait", "wait": "waiting", "busbw": "GB/s bus",
}  # fmt: skip


def _collectives_table(ops: pd.DataFrame, width: int) -> RichTable | None:
    """Recorded collectives per group, op and size: their median transfer, the mean wait per
    rank and call, the share of the calls' time spent waiting and the bus bandwidth
    (report/collectives/)."""
    if ops.empty:
        return None
    ordered = ops.sort_values("wait_mean_ns", ascending=False, kind="stable")
    shown = ordered.assign(  # each cell from the row it stands in
        size=[bytes_text(b) for b in ordered["bytes_mean"]],
        wait=[_pct(v) for v in ordered["wait_share"]],
        busbw=["-" if v != v else f"{v:.3g}" for v in ordered["busbw_gbps"]],
    )  # fmt: skip
    return _table("Collectives (matched across ranks)", shown, _COLLECTIVE_COLUMNS, width)


_COLLECTIVE_LAYER_COLUMNS = {
    "where": "layer (pass)", "collective": "collective", "size": "size", "time_ns": "time/step",
    "wait_ns": "wait", "exposed_ns": "exposed",
}  # fmt: skip


_PASS = {"forward": "fwd", "backward": "bwd", "optimizer": "opt"}


def _collective_layers_table(rows: pd.DataFrame, width: int) -> RichTable | None:
    """Collectives per layer and pass (FSDP units, tensor-parallel layers), most exposed
    first: their time per rank and step, of which waiting and of which exposed
    (report/collectives/layers.py)."""
    if rows.empty or not (rows["layer"].fillna("").astype(str) != "").any():
        return None
    layers = [str(v) if isinstance(v, str) and v else "(outside layers)" for v in rows["layer"]]
    shown = rows.assign(
        where=[f"{layer} ({_PASS.get(str(p), p)})" if isinstance(p, str) and p else layer
               for layer, p in zip(layers, rows["pass"], strict=True)],
        collective=[FAMILY.get(str(op), str(op)).replace("_", "-") for op in rows["op"]],
        size=[bytes_text(b) if b == b and b > 0 else "-" for b in rows["bytes_mean"]],
    )  # fmt: skip
    return _table("Collectives by layer, per step and rank", shown, _COLLECTIVE_LAYER_COLUMNS,
                  width)


def _grad_sync_table(layers: pd.DataFrame, width: int) -> RichTable | None:
    """DDP runs: the layers whose gradients' all-reduce takes the most GPU time (each DDP
    bucket's time shared among its layers by bytes, report/layers/buckets.py)."""
    sync = pd.to_numeric(layers["grad_sync_ns"]).fillna(0) if len(layers) else pd.Series()
    if not (sync > 0).any():
        return None
    per_step = layers["step_grad_sync_ns"].notna().any()
    col = "step_grad_sync_ns" if per_step else "grad_sync_ns"
    shown = layers[(sync > 0).to_numpy()].assign(
        _sync=lambda f: pd.to_numeric(f[col]),
        grad=lambda f: [bytes_text(v) for v in f["grad_bytes"]],
    ).sort_values("_sync", ascending=False, kind="stable")
    title = f"Gradient all-reduce by layer (DDP buckets), {'per step' if per_step else 'whole run'}"
    return _table(title, shown.rename(columns={"_sync": "_sync_ns"}),
                  {"layer": "layer", "grad_buckets": "buckets", "grad": "gradients",
                   "_sync_ns": "all-reduce"}, width)  # fmt: skip


def _count(value: object) -> str:
    return "-" if value is None or value is pd.NA or value != value else str(value)


def _advice(advice: pd.DataFrame, console: Console) -> None:
    console.print()
    if advice.empty:
        console.print(line_text("advice: nothing stands out"), highlight=False)
        return
    console.print(line_text(("advice", "bold")))
    for a in advice.to_dict("records"):
        style = SEVERITY_STYLE.get(str(a["severity"]), "")
        # One Text per line: the line break is ours, any in the evidence is made visible.
        console.print(
            line_text(" ", (str(a["severity"]), style), f" {a['problem']}: {a['evidence']}"),
            highlight=False,
        )
        console.print(line_text(f"     -> {a['recommendation']}"), highlight=False)


def render_many(rows: Sequence[Mapping[str, object]], console: Console) -> None:
    """One line per input when several were analysed: file and report folder by name (their
    full paths are in the combined summary), so that the table stays readable."""
    table = RichTable(title="dlprof-lite", title_justify="left", show_edge=False)
    for heading in ("input", "kernels", "busy", "launch", "iteration", "advice", "report"):
        table.add_column(heading, overflow="fold")
    for r in rows:
        cells = (
            Path(str(r.get("source"))).name,
            _t(r.get("kernel_ns")),
            _pct(r.get("gpu_utilization")),
            _pct(r.get("launch_overhead_pct"), 1),
            _t(r.get("iterations_mean_ns")),
            str(r.get("advice_count", "-")),
            Path(str(r["report_dir"])).name if r.get("report_dir") else str(r.get("error") or "-"),
        )
        table.add_row(*(line_text(c) for c in cells))
    console.print(table)
