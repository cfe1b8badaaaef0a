"""Collectives per layer: what each layer's all-gathers, reduce-scatters and all-reduces cost.

Place in the pipeline: report, from the matched instances (:mod:`.instances`). Each call
carries its layer and pass (:mod:`.calls`: an FSDP unit's from its fact, any other call from
the module range it ran in), so FSDP units, tensor-parallel layers and DDP's buckets alike
land on their modules. One row per (layer, pass, group, op): per rank and analysed step, the
calls' time split into transfer and wait (time = transfer + wait, call by call), the part no
compute overlapped (exposed) and the rest (hidden); the bytes per call (an FSDP unit's padded
size, by nccl-tests' convention).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LAYER_COLUMNS = ("layer", "pass", "group", "op", "fsdp", "ranks", "calls_per_step", "bytes_mean",
                 "time_ns", "transfer_ns", "wait_ns", "exposed_ns", "hidden_ns",
                 "exposed_step_ratio")  # fmt: skip
_KEYS = ["layer", "pass", "group", "op"]


def layer_table(instances: pd.DataFrame, steps: int, step_ns: float | None) -> pd.DataFrame:
    """Per (layer, pass, group, op) of :data:`LAYER_COLUMNS`, most exposed first; figures per
    rank and analysed step (``steps``; the whole window when 0); ``exposed_step_ratio`` is the
    exposed time over the mean step ``step_ns``."""
    if instances.empty:
        return pd.DataFrame(columns=list(LAYER_COLUMNS))
    i = instances.copy()
    i["layer"] = i["layer"].fillna("").astype(str)
    i["pass"] = i["pass"].fillna("").astype(str)
    per = float(max(steps, 1))
    rows = []
    for key, g in i.groupby(_KEYS, sort=False):
        ranks = int(g["rank"].nunique())
        scale = per * ranks
        exposed = g["exposed_ns"].to_numpy(dtype=np.float64)
        known = float(exposed.sum()) / scale if not np.isnan(exposed).any() else float("nan")
        time = float(g["duration_ns"].sum()) / scale
        rows.append({
            **dict(zip(_KEYS, key, strict=True)), "fsdp": bool(g["fsdp"].eq(True).any()),
            "ranks": ranks, "calls_per_step": len(g) / scale,
            "bytes_mean": float(g.drop_duplicates(["seq"])["bytes"].mean()), "time_ns": time,
            "transfer_ns": float(g["transfer_ns"].sum()) / scale,
            "wait_ns": float(g["wait_ns"].sum()) / scale, "exposed_ns": known,
            "hidden_ns": time - known,
            "exposed_step_ratio": known / step_ns if step_ns else float("nan"),
        })  # fmt: skip
    out = pd.DataFrame(rows, columns=list(LAYER_COLUMNS))
    order = np.lexsort((-out["time_ns"].to_numpy(), -out["exposed_ns"].fillna(-1).to_numpy()))
    return out.iloc[order].reset_index(drop=True)
