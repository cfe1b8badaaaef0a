"""Gradient all-reduce per layer: the GPU time of DDP's gradient buckets, split over the
layers whose gradients each carries.

Place in the pipeline: report, read by the layers table. The annotation tags each DDP bucket's
all-reduce with a ``ddp:bucket:<id>`` range and a ``ddp_bucket`` fact (its layers and their
gradient bytes, :mod:`dlprof_lite.annotate.ddp`); ingest gives every op launched inside
such a range its ``ddp_bucket`` and no layer. Here a bucket's op time is shared among its
layers in proportion to their bytes in it: a bucket of 3 MB of ``fc1`` and 1 MB of ``fc2``
gradients whose all-reduce took 400 µs books 300 µs to ``fc1`` and 100 µs to ``fc2``.
Bucket ids are per process (each rank's annotation numbers its own).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import LAYER_GRAD_SYNC_REPORT
from dlprof_lite.rules.names import DDP_BUCKET

# Per layer (index), what the layers table adds.
GRAD_COLUMNS = tuple(c.name for c in LAYER_GRAD_SYNC_REPORT)


def bucket_layers(facts: pd.DataFrame) -> pd.DataFrame:
    """One row per ``ddp_bucket`` fact and layer in it: process, bucket id, model, DDP's
    bucket ``index``, ``generation``, the layer's gradient ``bytes`` in the bucket and its
    ``share`` of the bucket's bytes. A bucket's facts repeat in every generation it is in."""
    rows = []
    for pid, key, value in zip(facts["pid"].to_numpy(), facts["key"], facts["value"],
                               strict=True):  # fmt: skip
        if key != DDP_BUCKET:
            continue
        layers = value.get("layers")
        if not isinstance(layers, dict) or not isinstance(value.get("id"), int):
            continue
        sizes = {str(k): int(v) for k, v in layers.items() if isinstance(v, int) and v >= 0}
        total = sum(sizes.values())
        for layer, size in sizes.items():
            rows.append((int(pid), value["id"], str(value.get("model")), value.get("index"),
                         value.get("generation"), layer, size,
                         size / total if total else 1 / len(sizes)))  # fmt: skip
    columns = ["pid", "bucket", "model", "index", "generation", "layer", "bytes", "share"]
    return pd.DataFrame(rows, columns=columns)


def layer_grad_sync(kernels: pd.DataFrame, facts: pd.DataFrame | None, steps: int) -> pd.DataFrame:
    """Per layer (index ``layer``) :data:`GRAD_COLUMNS`: its gradient bytes per step (in the
    buckets of its process's last composition), DDP bucket indices, and the bucket op time
    booked to it over ``kernels`` (the window's) and per step over ``steps`` steps."""
    parts = bucket_layers(facts) if facts is not None else pd.DataFrame()
    if parts.empty:
        return _typed(pd.DataFrame(columns=list(GRAD_COLUMNS), index=pd.Index([], name="layer")))
    column = kernels["ddp_bucket"].astype("category")  # ids as categories (ingest)
    codes = column.cat.codes.to_numpy()
    has = codes >= 0
    ids = column.cat.categories.to_numpy(dtype=np.int64)
    ops = pd.DataFrame({
        "pid": kernels["pid"].to_numpy(dtype=np.int64)[has],
        "bucket": ids[codes[has]] if len(ids) else np.zeros(0, dtype=np.int64),
        "dur_ns": kernels["dur_ns"].to_numpy(dtype=np.int64)[has],
    }).groupby(["pid", "bucket"], as_index=False)["dur_ns"].sum()  # fmt: skip
    shares = parts.drop_duplicates(["pid", "bucket", "layer"])
    booked = shares.merge(ops, on=["pid", "bucket"], how="left").fillna({"dur_ns": 0})
    booked["grad_sync_ns"] = booked["dur_ns"] * booked["share"]
    # Each model's current buckets: its newest generation (DDP rebuilds after the first step).
    newest = parts.groupby(["pid", "model"])["generation"].transform("max")
    current = parts[(parts["generation"] == newest).to_numpy(dtype=bool)]
    out = pd.DataFrame(index=pd.Index(pd.unique(parts["layer"]), name="layer"))
    # Per process (one rank's gradients; ranks of one run carry the same).
    out["grad_bytes"] = current.groupby(["layer", "pid"])["bytes"].sum().groupby("layer").max()
    out["grad_buckets"] = current.groupby("layer")["index"].agg(
        lambda s: " ".join(str(i) for i in sorted(set(s)))
    )
    out["grad_sync_ns"] = booked.groupby("layer")["grad_sync_ns"].sum().round()
    out["step_grad_sync_ns"] = out["grad_sync_ns"] / steps if steps else np.nan
    return _typed(out)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({"grad_bytes": "Int64", "grad_buckets": object, "grad_sync_ns": "Int64",
                         "step_grad_sync_ns": "float64"})  # fmt: skip
