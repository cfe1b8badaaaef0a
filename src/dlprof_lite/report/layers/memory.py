"""Memory per layer: parameter, gradient, optimizer-state and saved-activation bytes, from the
``memory``, ``saved`` and ``saved_step`` facts (:mod:`dlprof_lite.annotate.tensor_bytes`).

Place in the pipeline: report (merged into the layers table, :mod:`.table`; the totals into
the summary's ``memory`` group). Each figure is the layer's own (the tensors it holds or
saved itself, not its children's), every storage counted once in the profiled process; a
profile of several processes sums each layer's over them (one rank each: per-rank reports).
``saved_inclusive_bytes`` adds the layer's children's saved bytes (what checkpointing the
layer would stop keeping, less its input, which a checkpoint keeps).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.report.frames import ancestors
from dlprof_lite.report.metrics import LAYER_MEMORY_REPORT
from dlprof_lite.report.summary_types import number

MEMORY_COLUMNS = tuple(c.name for c in LAYER_MEMORY_REPORT)
_SUMS = {"param_bytes": "param_bytes", "gradient_bytes": "grad_bytes",
         "optimizer_bytes": "optimizer_bytes"}  # fmt: skip
_DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
                "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
                "float8_e4m3fn": 1, "float8_e5m2": 1, "complex64": 8}  # fmt: skip


def layer_memory(facts: pd.DataFrame | None, layers: pd.DataFrame) -> pd.DataFrame:
    """:data:`MEMORY_COLUMNS` per layer of ``layers`` (NaN/None: not recorded)."""
    out = pd.DataFrame(index=pd.Index(layers["layer"].astype(str), name="layer"))
    for column in MEMORY_COLUMNS:
        out[column] = None if column == "memory_tied" else np.nan
    if facts is None or facts.empty:
        return out
    sums: dict[str, dict[str, float]] = {}
    tied: dict[str, str] = {}
    saved: dict[str, dict[str, float]] = {}
    for key, value in zip(facts["key"], facts["value"], strict=True):
        if not isinstance(value, dict) or not isinstance(value.get("layer"), str):
            continue
        layer = value["layer"]
        if key == "memory":
            row = sums.setdefault(layer, dict.fromkeys(_SUMS, 0.0))
            for column, field in _SUMS.items():
                row[column] += number(value.get(field)) or 0.0
            if isinstance(value.get("tied"), str):
                tied.setdefault(layer, value["tied"])
        elif key == "saved":
            row = saved.setdefault(layer, {"saved_bytes": 0.0})
            row["saved_bytes"] += number(value.get("saved_bytes")) or 0.0
            for field, column in (("cuda_in", "cuda_entry_bytes"), ("cuda_out", "cuda_exit_bytes")):
                found = number(value.get(field))
                if found is not None:
                    row[column] = row.get(column, 0.0) + found
    for layer, row in [*sums.items(), *saved.items()]:
        if layer in out.index:
            for column, amount in row.items():
                out.loc[layer, column] = amount
    for layer, owner in tied.items():
        if layer in out.index:
            out.loc[layer, "memory_tied"] = f"tied to {owner}"
    if saved:
        measured = out["saved_bytes"].notna() | out.index.isin(list(sums))
        out.loc[~out["saved_bytes"].notna() & measured, "saved_bytes"] = 0.0
        out["saved_inclusive_bytes"] = _inclusive(out["saved_bytes"], layers)
    return out


def _inclusive(own: pd.Series, layers: pd.DataFrame) -> pd.Series:
    """Each layer's own figure plus those of every layer below it (the parent links)."""
    parent = dict(zip(layers["layer"].astype(str), layers["parent"], strict=True))
    total = own.fillna(0.0).copy()
    for layer, value in own.fillna(0.0).items():
        for up in ancestors(parent, str(layer)):
            if up in total.index:
                total[up] += value
    return total.where(own.notna() | (total > 0))


def input_bytes(in_shape: object, in_dtype: object) -> float | None:
    """Bytes of a layer's first input from its module fact (``8x3x32x32``, ``float32``)."""
    size = _DTYPE_BYTES.get(str(in_dtype))
    if size is None or not isinstance(in_shape, str):
        return None
    first = in_shape.split(",")[0].strip()
    dims = first.split("x")
    if not all(d.isdigit() for d in dims):
        return None
    return float(np.prod([int(d) for d in dims])) * size


def memory_summary(layers: pd.DataFrame, facts: pd.DataFrame | None) -> dict[str, Any]:
    """The summary's ``memory`` fields: totals over the layers, the measured step's GPU
    allocator peak and what of it the categories do not explain."""
    out: dict[str, Any] = {}
    if layers.empty or "param_bytes" not in layers.columns:
        return out
    for column in ("param_bytes", "gradient_bytes", "optimizer_bytes", "saved_bytes"):
        values = pd.to_numeric(layers[column], errors="coerce")
        if values.notna().any():
            out[f"memory_{column}"] = float(values.sum())
    peak = None
    notes = []
    if facts is not None and len(facts):
        for key, value in zip(facts["key"], facts["value"], strict=True):
            if key == "saved_step" and isinstance(value, dict):
                peak = number(value.get("cuda_peak")) if peak is None else peak
                if isinstance(value.get("off"), str):
                    notes.append(value["off"])
    if peak is not None:
        known = sum(v for k, v in out.items() if isinstance(v, float))
        out["memory_gpu_peak_bytes"] = peak
        out["memory_gpu_unexplained_bytes"] = max(peak - known, 0.0)
    if notes:
        out["memory_note"] = "; ".join(dict.fromkeys(notes))
    return out
