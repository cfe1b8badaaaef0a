"""The idle partition's views: per-step cause columns, the ``idle`` table, summary figures.

Place in the pipeline: report, from :func:`dlprof_lite.report.idle.partition.idle_sums`.
Every figure is an integer sum of the partition's nanoseconds: a step's device causes add up
to its ``phase_idle_ns``, its host causes to its ``wall_ns``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.frames import ordered
from dlprof_lite.report.model import analysed, empty_report
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column

KIND_CAUSES = {DEVICE: DEVICE_CAUSES, HOST: HOST_CAUSES}
CAUSE_COLUMNS = tuple(cause_column(k, c) for k, causes in KIND_CAUSES.items() for c in causes)
_KEYS = ["kind", "cause", "layer", "phase"]


def cause_columns(sums: pd.DataFrame, iterations: pd.Series) -> pd.DataFrame:
    """Per iteration (``iterations``: their numbers, in the table's order), the nanoseconds of
    each cause: ``idle_<cause>_ns`` (devices) and ``host_<cause>_ns`` (the main thread)."""
    out = pd.DataFrame(0, index=range(len(iterations)), columns=list(CAUSE_COLUMNS),
                       dtype=np.int64)  # fmt: skip
    if sums.empty:
        return out
    column = [cause_column(k, c) for k, c in zip(sums["kind"], sums["cause"], strict=True)]
    wide = (pd.DataFrame({"iteration": sums["iteration"].to_numpy(dtype=np.int64),
                          "column": column, "ns": sums["ns"].to_numpy(dtype=np.int64)})
            .groupby(["iteration", "column"])["ns"].sum().unstack(fill_value=0))  # fmt: skip
    found = wide.reindex(index=iterations.to_numpy(dtype=np.int64), columns=list(CAUSE_COLUMNS),
                         fill_value=0)  # fmt: skip
    out[:] = found.fillna(0).to_numpy(dtype=np.int64)
    return out


def idle_table(sums: pd.DataFrame, iterations: pd.DataFrame, devices: int) -> pd.DataFrame:
    """One row per (kind, cause, layer, phase) over the analysed steps: total, mean and
    median per step (a step without it counts 0), share of the kind's whole (the devices'
    idle time; the main thread's step time) and of the step (wall x devices; wall)."""
    steps = analysed(iterations)
    if sums.empty or steps.empty:
        return empty_report("idle")
    numbers = steps["iteration"].to_numpy(dtype=np.int64)
    mine = sums[np.isin(sums["iteration"].to_numpy(dtype=np.int64), numbers)]
    if mine.empty:
        return empty_report("idle")
    keyed = mine.assign(layer=mine["layer"].fillna(""), phase=mine["phase"].fillna(""))
    grid = (keyed.groupby([*_KEYS, "iteration"], sort=False)["ns"].sum()
            .unstack("iteration", fill_value=0)
            .reindex(columns=numbers, fill_value=0))  # fmt: skip
    per_step = grid.to_numpy(dtype=np.int64)
    out = grid.index.to_frame(index=False)
    out["total_ns"] = per_step.sum(axis=1)
    out["step_mean_ns"] = per_step.mean(axis=1)
    out["step_median_ns"] = np.median(per_step, axis=1)
    wall = float(steps["wall_ns"].sum())
    whole = {DEVICE: float(steps["phase_idle_ns"].sum()), HOST: wall}
    step = {DEVICE: wall * devices, HOST: wall}
    kind = out["kind"].to_numpy(dtype=object)
    total = out["total_ns"].to_numpy(dtype=float)
    out["share_pct"] = _pct(total, np.array([whole[k] for k in kind]))
    out["step_pct"] = _pct(total, np.array([step[k] for k in kind]))
    out = out[out["total_ns"] > 0]
    rank = {(k, c): i for i, (k, c) in enumerate(
        (k, c) for k, causes in KIND_CAUSES.items() for c in causes)}  # fmt: skip
    out = out.assign(_rank=[rank[(k, c)] for k, c in zip(out["kind"], out["cause"], strict=True)])
    out = out.sort_values(["_rank", "total_ns", "layer", "phase"],
                          ascending=[True, False, True, True]).drop(columns="_rank")  # fmt: skip
    return ordered(out.reset_index(drop=True), "idle")


def _pct(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(whole > 0, part / np.where(whole > 0, whole, 1) * 100.0, np.nan)
    return out


def idle_summary(iterations: pd.DataFrame) -> dict[str, float | None]:
    """Each cause's mean per analysed step: ``idle_<cause>_ns`` and ``host_<cause>_ns``."""
    steps = analysed(iterations)
    if steps.empty or CAUSE_COLUMNS[0] not in steps.columns:
        return dict.fromkeys(CAUSE_COLUMNS)
    means = steps[list(CAUSE_COLUMNS)].astype(float).mean()
    return {c: float(means[c]) for c in CAUSE_COLUMNS}
