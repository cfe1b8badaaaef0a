"""Cost per layer: FLOPs per step, achieved FLOP/s and MFU, from the ``flops`` facts.

Place in the pipeline: report (merged into the layers table, :mod:`.table`). The profiled
process counted each layer's FLOPs per root call of each input-shape signature
(:mod:`dlprof_lite.annotate.flops`) and marked the signature of every root call
(``flops_shape``). Here each root forward range of the window's steps gets its signature (the
last mark of its root and process at or before its end), and a layer's FLOPs per step are
the sum over those root calls of its FLOPs for their signature, over the window's steps:

- ``step_flops`` = forward + backward, inclusive (its own and its children's, as the GPU
  columns); ``step_self_flops`` the part no annotated child call holds; per call = per step
  / forward calls per step.
- achieved FLOP/s = FLOPs per step / the layer's GPU time per step (forward and backward
  inclusive GPU time; recomputation not counted); on a CPU-only layer, over its wall time.
- MFU = the time the layer's FLOPs take at the GPU's dense peak for each compute dtype
  (:mod:`dlprof_lite.rules.peaks`), over its GPU time: Σ_dtype FLOPs / peak, / time. Above
  100 % is an attribution error (a kernel booked to another layer, an op counted that ran
  elsewhere): the figure stays, with a note.

A root call whose signature was past the counted ones (``shape`` -1) has no count: the
layer's figures are then estimated from the counted calls' mean and the note says so. A layer
with an op no formula covers is unknown (empty, with the reason), never 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import LAYER_FLOPS_REPORT
from dlprof_lite.report.steps.window import StepWindow, step_of
from dlprof_lite.rules.names import ROOT_MODULE, parse_module_range
from dlprof_lite.rules.peaks import peak_for, peak_tflops

FLOPS_COLUMNS = tuple(c.name for c in LAYER_FLOPS_REPORT)
_TEXT = frozenset(c.name for c in LAYER_FLOPS_REPORT if not c.unit and c.name != "mfu")
MFU_ATTRIBUTION = 1.0  # above this MFU a layer's kernels or FLOPs are misattributed


@dataclass
class _Layer:
    """A layer's FLOPs summed over the window's root calls (None: unknown)."""

    forward: float | None = 0.0
    backward: float | None = 0.0
    self_flops: float | None = 0.0
    by_dtype: dict[str, float] = field(default_factory=dict)
    reason: str | None = None


def counted(facts: pd.DataFrame | None) -> pd.DataFrame:
    """The ``flops`` facts as rows: pid, root, shape, layer and the counts."""
    rows = []
    if facts is not None and len(facts):
        for pid, key, value in zip(facts["pid"], facts["key"], facts["value"], strict=True):
            if key == "flops" and isinstance(value, dict):
                rows.append((int(pid), _name(value.get("root")), _int(value.get("shape")),
                             _name(value.get("layer")), value))  # fmt: skip
    return pd.DataFrame(rows, columns=["pid", "root", "shape", "layer", "value"])


def _name(value: object) -> str:
    return str(value) if value else ROOT_MODULE


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else -1


def root_calls(
    ranges: pd.DataFrame, iterations: pd.DataFrame, window: StepWindow, facts: pd.DataFrame,
    roots: set[str],
) -> pd.DataFrame:  # fmt: skip
    """The window's root forward calls: pid, root, step and the signature (shape) each had."""
    columns = ["pid", "root", "step", "shape"]
    if ranges.empty or not roots or not window.steps:
        return pd.DataFrame(columns=columns)
    names = ranges["name"].astype("category")
    parsed = {n: parse_module_range(str(n)) for n in names.cat.categories}
    root_of = {n: m.qualname for n, m in parsed.items()
               if m is not None and m.direction == "forward" and m.qualname in roots}  # fmt: skip
    mine = ranges[names.isin(list(root_of)).to_numpy(dtype=bool)]
    if "module_direction" in mine.columns:  # ingest's: a fwd: range inside a backward recomputes
        mine = mine[(mine["module_direction"].astype(object) == "forward").to_numpy(dtype=bool)]
    calls = pd.DataFrame({
        "pid": mine["pid"].to_numpy(dtype=np.int64),
        "root": mine["name"].astype(object).map(root_of).to_numpy(dtype=object),
        "end_ns": mine["end_ns"].to_numpy(dtype=np.int64),
        "step": step_of(mine["start_ns"].to_numpy(dtype=np.int64), iterations),
    })  # fmt: skip
    calls = calls[calls["step"].isin(window.steps)]
    marks = [(int(pid), int(start), _name(v.get("root")), _int(v.get("shape")))
             for pid, start, key, v in zip(facts["pid"], facts["start_ns"], facts["key"],
                                           facts["value"], strict=True)
             if key == "flops_shape" and isinstance(v, dict)]  # fmt: skip
    shapes = pd.DataFrame(marks, columns=["pid", "end_ns", "root", "shape"])
    if calls.empty:
        return pd.DataFrame(columns=columns)
    calls = pd.merge_asof(
        calls.sort_values("end_ns"), shapes.sort_values("end_ns").astype({"end_ns": "int64"}),
        on="end_ns", by=["pid", "root"], direction="backward",
    )  # fmt: skip
    calls["shape"] = calls["shape"].fillna(-1).astype("int64")
    return calls[columns]


def layer_flops(
    ranges: pd.DataFrame, iterations: pd.DataFrame, window: StepWindow,
    facts: pd.DataFrame | None, layers: pd.DataFrame, gpu_name: str | None,
) -> pd.DataFrame:  # fmt: skip
    """:data:`FLOPS_COLUMNS` per layer of ``layers`` (the table so far: per-step times)."""
    out = pd.DataFrame(index=pd.Index(layers["layer"].astype(str), name="layer"))
    for column in FLOPS_COLUMNS:
        out[column] = None if column in _TEXT else np.nan
    found = counted(facts)
    if found.empty or facts is None or not window.steps:
        return out
    calls = root_calls(ranges, iterations, window, facts, set(found["root"]))
    if calls.empty:
        return out
    per_shape: dict[tuple[int, str], Counter[int]] = {}
    for pid, root, shape in zip(calls["pid"], calls["root"], calls["shape"], strict=True):
        per_shape.setdefault((int(pid), str(root)), Counter())[int(shape)] += 1
    sums: dict[str, _Layer] = {}
    estimated: set[str] = set()
    for (pid, root), shapes in per_shape.items():
        missing = shapes.pop(-1, 0)
        known = sum(shapes.values())
        mine = found[(found["pid"] == pid) & (found["root"] == root)]
        scale = (missing + known) / known if known else 0.0
        for shape, n in shapes.items():
            of_shape = mine[mine["shape"] == shape]
            for layer, value in zip(of_shape["layer"], of_shape["value"], strict=True):
                _add(sums.setdefault(layer, _Layer()), value, n * scale)
                if missing:
                    estimated.add(layer)
    steps = len(window.steps)
    for layer, total in sums.items():
        if layer not in out.index:
            continue
        if total.forward is None or total.backward is None:
            out.loc[layer, "flops_note"] = f"unknown: {total.reason}"
            continue
        out.loc[layer, "step_forward_flops"] = total.forward / steps
        out.loc[layer, "step_backward_flops"] = total.backward / steps
        out.loc[layer, "step_flops"] = (total.forward + total.backward) / steps
        if total.self_flops is not None:
            out.loc[layer, "step_self_flops"] = total.self_flops / steps
        out.loc[layer, "flops_dtype"] = _dtypes(total.by_dtype)
        if layer in estimated:
            out.loc[layer, "flops_note"] = ("estimated: some root calls had an input shape past "
                                            "the counted ones")  # fmt: skip
        out.loc[layer, "_ideal_ns"] = _ideal_ns(total.by_dtype, gpu_name, steps)
    return _rates(out, layers.set_index(layers["layer"].astype(str)), gpu_name)


def gpu_of(kernels: pd.DataFrame, gpus: pd.DataFrame | None) -> str | None:
    """The name of the GPU that ran the most kernel time (the MFU's peak); None without."""
    if gpus is None or gpus.empty or kernels.empty or "device_id" not in kernels.columns:
        return None
    time = kernels.groupby("device_id", observed=True)["dur_ns"].sum()
    if time.empty:
        return None
    names = dict(zip(gpus["device_id"].astype("int64"), gpus["name"], strict=True))
    name = names.get(int(time.index.to_numpy()[time.to_numpy().argmax()]))
    return str(name) if isinstance(name, str) and name else None


def cost_warnings(layers: pd.DataFrame, facts: pd.DataFrame) -> list[str]:
    """Summary warnings: layers whose FLOPs are unknown (counted, the first few named with
    their reason), and a process that marked input shapes but never wrote its count (it
    ended before the annotation's exit: killed, ``os._exit``)."""
    out = []
    if len(facts):
        keys = facts["key"].to_numpy(dtype=object)
        pids = facts["pid"].to_numpy()
        marked = set(pids[keys == "flops_shape"].tolist())
        missing = sorted(marked - set(pids[keys == "flops"].tolist()))
        if missing:
            out.append(
                f"no FLOP count from process {', '.join(map(str, missing))}: it ended before "
                "the annotation's exit (killed, os._exit), so its FLOPs, FLOP/s and MFU are "
                "empty")  # fmt: skip
    if len(layers) and "flops_note" in layers.columns:
        notes = layers["flops_note"].astype(object)
        unknown = layers[notes.str.startswith("unknown:", na=False).to_numpy(dtype=bool)]
        if len(unknown):
            named = "; ".join(f"{r['layer']} ({str(r['flops_note']).removeprefix('unknown: ')})"
                              for r in unknown.head(3).to_dict("records"))  # fmt: skip
            more = f" (+{len(unknown) - 3} more)" if len(unknown) > 3 else ""
            out.append(f"FLOPs unknown for {len(unknown)} layer(s), left empty: {named}{more}")
    return out


def model_cost(layers: pd.DataFrame, step_ns: float | None, gpu: str | None) -> dict[str, object]:
    """The summary's cost fields: the root layers' FLOPs per step, over the median step, and
    the step's MFU (the roots' time at peak, from each root's MFU and GPU time)."""
    if layers.empty or "step_flops" not in layers.columns:
        return {}
    roots = layers[layers["parent"].isna().to_numpy(dtype=bool)]
    flops = pd.to_numeric(roots["step_flops"], errors="coerce")
    if roots.empty or flops.isna().any():
        return {}
    total = float(flops.sum())
    gpu_ns = pd.to_numeric(roots["step_forward_gpu_ns"], errors="coerce").fillna(0)
    gpu_ns = gpu_ns + pd.to_numeric(roots["step_backward_gpu_ns"], errors="coerce").fillna(0)
    mfu = pd.to_numeric(roots["mfu"], errors="coerce")
    worked = (flops > 0).to_numpy(dtype=bool)
    ideal = float((mfu * gpu_ns)[worked].sum()) if not mfu[worked].isna().any() else None
    peak = peak_for(gpu) if gpu else None
    on_gpu = bool(worked.any()) and bool((gpu_ns[worked] > 0).all())
    return {
        "model_flops_per_step": total,
        "model_flops_per_s": total / (step_ns / 1e9) if step_ns else None,
        "mfu": ideal / step_ns if ideal is not None and step_ns and on_gpu else None,
        "mfu_gpu": peak.gpu if peak is not None and on_gpu and ideal is not None else None,
    }


def _add(total: _Layer, value: dict[str, Any], weight: float) -> None:
    numbers = [value.get(k) for k in ("fwd", "bwd", "self_fwd", "self_bwd")]
    if not all(isinstance(n, (int, float)) for n in numbers[:2]):
        total.forward = total.backward = total.self_flops = None
        total.reason = total.reason or str(value.get("unknown") or "not counted")
        return
    if total.forward is None or total.backward is None:
        return
    total.forward += float(numbers[0]) * weight  # type: ignore[arg-type]
    total.backward += float(numbers[1]) * weight  # type: ignore[arg-type]
    if total.self_flops is not None and all(isinstance(n, (int, float)) for n in numbers[2:]):
        total.self_flops += (float(numbers[2]) + float(numbers[3])) * weight  # type: ignore[arg-type]
    else:
        total.self_flops = None
    by_dtype = value.get("by_dtype")
    if isinstance(by_dtype, dict):
        for dtype, flops in by_dtype.items():
            if isinstance(flops, (int, float)):
                key = str(dtype)
                total.by_dtype[key] = total.by_dtype.get(key, 0.0) + float(flops) * weight


def _dtypes(by_dtype: dict[str, float]) -> str | None:
    """``bf16`` or ``fp32 80%, tf32 20%``: the counted ops' compute dtypes by FLOPs."""
    total = sum(by_dtype.values())
    if total <= 0:
        return None
    ranked = sorted(((d, f) for d, f in by_dtype.items() if f > 0), key=lambda p: -p[1])
    if len(ranked) == 1:
        return ranked[0][0]
    return ", ".join(f"{d} {f / total:.0%}" for d, f in ranked)


def _ideal_ns(by_dtype: dict[str, float], gpu_name: str | None, steps: int) -> float:
    """Per step, ns the FLOPs take at the GPU's dense peak of each dtype (NaN: a dtype
    without a peak, or no known GPU)."""
    if gpu_name is None:
        return np.nan
    ideal: float = 0.0
    for dtype, flops in by_dtype.items():
        if flops <= 0:
            continue
        peak = peak_tflops(gpu_name, dtype)
        if peak is None:
            return np.nan
        ideal += flops / steps / (peak * 1e12) * 1e9
    return ideal


def _rates(out: pd.DataFrame, times: pd.DataFrame, gpu_name: str | None) -> pd.DataFrame:
    """Achieved FLOP/s (GPU time; wall time on CPU-only layers) and MFU."""
    if "_ideal_ns" not in out.columns:
        return out
    times = times.reindex(out.index)
    fwd_gpu = pd.to_numeric(times["step_forward_gpu_ns"], errors="coerce").to_numpy(float)
    bwd_gpu = pd.to_numeric(times["step_backward_gpu_ns"], errors="coerce").to_numpy(float)
    fwd_wall = pd.to_numeric(times["step_forward_wall_ns"], errors="coerce").to_numpy(float)
    bwd_wall = pd.to_numeric(times["step_backward_wall_ns"], errors="coerce").to_numpy(float)
    on_gpu = np.nan_to_num(fwd_gpu + bwd_gpu) > 0
    fwd = np.where(on_gpu, fwd_gpu, fwd_wall)
    bwd = np.where(on_gpu, bwd_gpu, bwd_wall)
    flops = out["step_flops"].to_numpy(float)
    calls = pd.to_numeric(times["calls_per_step"], errors="coerce").to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["flops_per_call"] = np.where(calls > 0, flops / calls, np.nan)
        out["achieved_flops_per_s"] = _rate(flops, fwd + bwd)
        out["achieved_forward_flops_per_s"] = _rate(out["step_forward_flops"].to_numpy(float), fwd)
        out["achieved_backward_flops_per_s"] = _rate(
            out["step_backward_flops"].to_numpy(float), bwd)  # fmt: skip
        mfu = np.where(on_gpu, out["_ideal_ns"].to_numpy(float) / (fwd + bwd), np.nan)
    has = ~np.isnan(flops)
    basis = np.where(on_gpu, "gpu", "wall").astype(object)
    basis[~has] = None
    out["flops_rate_basis"] = basis
    out["mfu"] = np.where(np.isfinite(mfu) & (flops > 0), mfu, np.nan)
    over = out["mfu"].to_numpy(float) > MFU_ATTRIBUTION
    for layer in out.index[over]:
        note = f"MFU above 100 % ({out.loc[layer, 'mfu']:.0%}): an attribution error, not a speed"
        old = out.loc[layer, "flops_note"]
        out.loc[layer, "flops_note"] = f"{old}; {note}" if old else note
    return out.drop(columns="_ideal_ns")


def _rate(flops: np.ndarray, ns: np.ndarray) -> np.ndarray:
    rate = flops / (ns / 1e9)
    return np.where(np.isfinite(rate) & (ns > 0), rate, np.nan)
