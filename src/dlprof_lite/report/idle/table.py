"""The idle partition's views: per-step cause columns, the ``idle`` table, summary figures.

Place in the pipeline: report, from :func:`dlprof_lite.report.idle.partition.idle_sums`.
Every figure is an integer sum of the partition's nanoseconds: a step's device causes add up
to its ``phase_idle_ns``, its host causes to its ``wall_ns``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import sum_by
from dlprof_lite.report.frames import ordered, share
from dlprof_lite.report.model import analysed, empty_report
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column

KIND_CAUSES = {DEVICE: DEVICE_CAUSES, HOST: HOST_CAUSES}
CAUSE_COLUMNS = tuple(cause_column(k, c) for k, causes in KIND_CAUSES.items() for c in causes)
_KEYS = ["kind", "cause", "layer", "phase"]


def cause_columns(sums: pd.DataFrame, iterations: pd.Series) -> pd.DataFrame:
    """Per iteration (``iterations``: their numbers, in the table's order), the nanoseconds of
    each cause: ``idle_<cause>_ns`` (devices) and ``host_<cause>_ns`` (the main thread)."""
    out = np.zeros((len(iterations), len(CAUSE_COLUMNS)), dtype=np.int64)
    if len(sums):
        # On the sums' category codes: naming each of a quarter of a million rows' column
        # took 0.4 s at a million kernels.
        kind = pd.Categorical(sums["kind"], categories=list(KIND_CAUSES))
        cause = pd.Categorical(sums["cause"], categories=list(DEVICE_CAUSES))
        column = np.full((len(KIND_CAUSES), len(DEVICE_CAUSES)), -1, dtype=np.int64)
        for k, (name, causes) in enumerate(KIND_CAUSES.items()):
            for c in causes:
                column[k, DEVICE_CAUSES.index(c)] = CAUSE_COLUMNS.index(cause_column(name, c))
        col = column[np.asarray(kind.codes), np.asarray(cause.codes)]
        row = pd.Index(iterations.to_numpy(dtype=np.int64)).get_indexer(
            sums["iteration"].to_numpy(dtype=np.int64))
        keep = (row >= 0) & (col >= 0)
        cells = sum_by(row[keep] * len(CAUSE_COLUMNS) + col[keep],
                       sums["ns"].to_numpy(dtype=np.int64)[keep], out.size)  # fmt: skip
        out = cells.reshape(out.shape)
    return pd.DataFrame(out, columns=list(CAUSE_COLUMNS))


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
    out, per_step = _per_step(mine, numbers)
    out["total_ns"] = per_step.sum(axis=1)
    out["step_mean_ns"] = per_step.mean(axis=1)
    out["step_median_ns"] = np.median(per_step, axis=1)
    wall = float(steps["wall_ns"].sum())
    whole = {DEVICE: float(steps["phase_idle_ns"].sum()), HOST: wall}
    step = {DEVICE: wall * devices, HOST: wall}
    kind = out["kind"].to_numpy(dtype=object)
    total = out["total_ns"].to_numpy(dtype=float)
    out["share_pct"] = share(total, np.array([whole[k] for k in kind])) * 100.0
    out["step_pct"] = share(total, np.array([step[k] for k in kind])) * 100.0
    out = out[out["total_ns"] > 0]
    rank = {(k, c): i for i, (k, c) in enumerate(
        (k, c) for k, causes in KIND_CAUSES.items() for c in causes)}  # fmt: skip
    out = out.assign(_rank=[rank[(k, c)] for k, c in zip(out["kind"], out["cause"], strict=True)])
    out = out.sort_values(["_rank", "total_ns", "layer", "phase"],
                          ascending=[True, False, True, True]).drop(columns="_rank")  # fmt: skip
    return ordered(out.reset_index(drop=True), "idle")


def _per_step(sums: pd.DataFrame, numbers: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The distinct (kind, cause, layer, phase) of ``sums`` (missing: ""), in order of
    appearance, and their nanoseconds per step of ``numbers``: one integer key per row, on
    the columns' codes (a groupby on their texts took 0.2 s for a profile with a range
    per kernel)."""
    found = [pd.factorize(sums[k], use_na_sentinel=False) for k in _KEYS]
    sizes = tuple(max(len(labels), 1) for _, labels in found)
    key = np.ravel_multi_index(tuple(np.asarray(codes) for codes, _ in found), sizes)
    group, distinct = pd.factorize(key)
    step = pd.Index(numbers).get_indexer(sums["iteration"].to_numpy(dtype=np.int64))
    cells = sum_by(group * len(numbers) + step, sums["ns"].to_numpy(dtype=np.int64),
                   len(distinct) * len(numbers))  # fmt: skip
    at = np.unravel_index(np.asarray(distinct), sizes)
    out = pd.DataFrame({k: pd.Series(np.asarray(labels, dtype=object)[i]).fillna("")
                        for k, (_, labels), i in zip(_KEYS, found, at, strict=True)})  # fmt: skip
    return out, cells.reshape(len(distinct), len(numbers))


def idle_summary(iterations: pd.DataFrame) -> dict[str, float | None]:
    """Each cause's mean per analysed step: ``idle_<cause>_ns`` and ``host_<cause>_ns``."""
    steps = analysed(iterations)
    if steps.empty or CAUSE_COLUMNS[0] not in steps.columns:
        return dict.fromkeys(CAUSE_COLUMNS)
    means = steps[list(CAUSE_COLUMNS)].astype(float).mean()
    return {c: float(means[c]) for c in CAUSE_COLUMNS}
