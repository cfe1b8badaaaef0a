"""Synthetic runs and sides for the compare tests, shaped like the report's tables.

A :class:`~dlprof_lite.store.record.RunRecord` here is what the store would give back: an
iterations frame with the report's columns (ITERATION_REPORT), layers and kernels frames
with the report's columns (LAYER_REPORT, KERNEL_REPORT) where a test needs them, and a typed
Summary. Step times are drawn from distributions the tests know (the oracle), or given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dlprof_lite.compare.side import Side
from dlprof_lite.report.metrics import PHASE_COLUMNS, column_names
from dlprof_lite.report.summary_types import build_summary
from dlprof_lite.store.record import RunContext, RunRecord

MS = 1_000_000


def normal_steps(mean_ms: float, std_ms: float, n: int, seed: int) -> np.ndarray:
    """``n`` step times, ns, from N(mean, std) (ms), reproducible by ``seed``."""
    return np.random.default_rng(seed).normal(mean_ms * MS, std_ms * MS, n)


def iterations(
    steps_ns: Sequence[float],
    *,
    warmup: int = 0,
    phases: Mapping[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """The iterations table: ``warmup`` warm-up rows (10 ms each, not analysed) then one row
    per step; ``phases``: {phase: (gpu_ns, wall_ns)} every analysed step has."""
    walls = [10 * MS] * warmup + [float(s) for s in steps_ns]
    rows = []
    start = 0
    for i, wall in enumerate(walls):
        row: dict[str, object] = dict.fromkeys(column_names("iterations"), 0)
        row.update(
            iteration=i, start_ns=start, end_ns=start + int(wall), wall_ns=round(wall),
            warmup=i < warmup, in_window=True, tc_share=None,
        )  # fmt: skip
        for phase, (gpu, wall_in) in (phases or {}).items():
            row[f"phase_{phase}_ns"] = gpu
            if phase != "other":
                row[f"{phase}_wall_ns"] = wall_in
            else:
                row["other_wall_ns"] = wall_in
        rows.append(row)
        start += int(wall)
    return pd.DataFrame(rows, columns=column_names("iterations"))


SELF_MEDIANS = {
    f"step_self_{d}_{kind}_median_ns": f"self_{d}_{kind}_ns"
    for d in ("forward", "backward") for kind in ("wall", "gpu")
}


def layers(rows: Sequence[Mapping[str, object]], steps: int = 1) -> pd.DataFrame:
    """A layers table: each row names ``layer`` and the columns the test sets (others empty,
    numbers 0). The self medians per step the test does not set are the self totals over
    ``steps`` (the same time every step: median = mean)."""
    names = column_names("layers")
    full = []
    for spec in rows:
        row: dict[str, object] = {n: 0.0 for n in names}
        row.update(parent="", type="Linear", device="cpu", top_kernels="", in_shape="")
        row.update(spec)
        for median, total in SELF_MEDIANS.items():
            if median not in spec:
                row[median] = float(row[total]) / max(steps, 1)  # type: ignore[arg-type]
        full.append(row)
    return pd.DataFrame(full, columns=names)


def kernels(rows: Sequence[tuple[str, int, int]]) -> pd.DataFrame:
    """A kernels table from (name, instances, total_ns) rows."""
    names = column_names("kernels")
    full = []
    for name, instances, total in rows:
        row: dict[str, object] = dict.fromkeys(names, 0)
        row.update(name=name, short_name=name, instances=instances, total_ns=total)
        full.append(row)
    return pd.DataFrame(full, columns=names)


def run(
    steps_ns: Sequence[float],
    *,
    summary: Mapping[str, object] | None = None,
    layer_rows: Sequence[Mapping[str, object]] = (),
    kernel_rows: Sequence[tuple[str, int, int]] = (),
    phases: Mapping[str, tuple[float, float]] | None = None,
    warmup: int = 0,
    context: RunContext | None = None,
) -> RunRecord:
    """A run of the given analysed step times; the summary's window covers those steps and
    its kernel count is the kernels' (0 without them)."""
    flat: dict[str, object] = {
        "window_steps": len(steps_ns),
        "iterations_analysed": len(steps_ns),
        "kernel_count": sum(k[1] for k in kernel_rows),
        "kernel_ns": sum(k[2] for k in kernel_rows),
    }
    flat.update(summary or {})
    return RunRecord(
        context or RunContext(),
        build_summary(flat),
        iterations(steps_ns, warmup=warmup, phases=phases),
        layers(layer_rows, int(str(flat["window_steps"]))),
        kernels(kernel_rows),
    )


def side(label: str, *runs: RunRecord) -> Side:
    return Side(label, tuple(runs))


def normal_side(label: str, mean_ms: float, std_ms: float, n: int, seed: int) -> Side:
    """A one-run side of ``n`` steps from N(mean, std) ms."""
    return side(label, run(normal_steps(mean_ms, std_ms, n, seed)))


def phase_names() -> tuple[str, ...]:
    return PHASE_COLUMNS
