"""Iteration statistics and the iteration facts the summary reads: pure functions.

Place in the pipeline: report. Ingest found the iterations and labelled every GPU op with
one (:mod:`dlprof_lite.ingest.iterations`); this module aggregates: wall-time statistics
and a suggested steady window (:func:`iteration_stats`), which times fall in an iteration
(:func:`in_iterations`) and the compile phase ranges (:func:`compile_ranges`). Thresholds
are rules (:mod:`dlprof_lite.rules.iterations`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.model import analysed_mask
from dlprof_lite.rules.iterations import HIGH_VARIANCE_CV, STEADY_MIN_ITERATIONS, STEADY_TOLERANCE
from dlprof_lite.rules.names import COMPILE, DOMAIN


def compile_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """The annotation's ``compile`` phase ranges (one per Dynamo compilation)."""
    mine = (ranges["name"] == COMPILE).to_numpy(dtype=bool)
    return ranges[mine & (ranges["domain"] == DOMAIN).to_numpy(dtype=bool)]


def in_iterations(times: np.ndarray, table: pd.DataFrame) -> np.ndarray:
    """Whether each time falls in an iteration window (windows in order, never overlapping)."""
    t0 = table["start_ns"].to_numpy(dtype=np.int64)
    t1 = table["end_ns"].to_numpy(dtype=np.int64)
    at = np.searchsorted(t0, times, side="right") - 1
    found = at >= 0
    found[found] = times[found] <= t1[at[found]]
    return found


def iteration_stats(per_iter: pd.DataFrame) -> dict[str, float | int | bool | None]:
    """Wall-time statistics of the in-window, non-warm-up iterations of ``per_iter``.

    ``per_iter`` needs ``iteration``, ``wall_ns``, ``warmup`` and ``in_window``. Keys:
    ``count``; ``mean_ns``, ``median_ns``, ``std_ns`` (sample std, ddof=1; 0 for one
    iteration), ``p10_ns`` and ``p90_ns`` (linear interpolation, numpy's default: the spread
    shown beside a step time), ``cv`` (std / mean);
    ``high_variance`` (cv >= :data:`HIGH_VARIANCE_CV`); and, only when variance is high,
    ``steady_start``/``steady_stop`` (stop exclusive, as ``--iter-start/--iter-stop``): the
    longest run of consecutive iterations within ±:data:`STEADY_TOLERANCE` of the median, the
    earliest among equals, at least :data:`STEADY_MIN_ITERATIONS` long — else ``None``.
    """
    chosen = per_iter[analysed_mask(per_iter)].sort_values("iteration")
    stats: dict[str, float | int | bool | None] = dict.fromkeys(
        ("mean_ns", "median_ns", "std_ns", "p10_ns", "p90_ns", "cv", "steady_start",
         "steady_stop")
    )
    stats["count"] = len(chosen)
    stats["high_variance"] = False
    if chosen.empty:
        return stats
    wall = chosen["wall_ns"].to_numpy(dtype=np.float64)
    mean = float(wall.mean())
    median = float(np.median(wall))
    std = float(wall.std(ddof=1)) if len(wall) > 1 else 0.0
    stats.update(
        mean_ns=mean,
        median_ns=median,
        std_ns=std,
        p10_ns=float(np.percentile(wall, 10)),
        p90_ns=float(np.percentile(wall, 90)),
        cv=std / mean if mean > 0 else None,
    )
    if stats["cv"] is not None and stats["cv"] >= HIGH_VARIANCE_CV:
        stats["high_variance"] = True
        near = np.abs(wall - median) <= STEADY_TOLERANCE * median
        window = _longest_run(chosen["iteration"].to_numpy(dtype=np.int64), near)
        if window is not None:
            stats["steady_start"], stats["steady_stop"] = window
    return stats


def _longest_run(index: np.ndarray, ok: np.ndarray) -> tuple[int, int] | None:
    """Longest run of consecutive iteration numbers that are all ``ok``: (start, stop)."""
    # A run breaks where an iteration is not ok or where the numbering skips one.
    breaks = np.ones(len(index), dtype=bool)
    breaks[1:] = ~ok[1:] | ~ok[:-1] | (np.diff(index) != 1)
    run_id = np.cumsum(breaks)
    runs = (
        pd.DataFrame({"run": run_id[ok], "i": index[ok]})
        .groupby("run")["i"]
        .agg(["min", "max", "size"])
    )
    runs = runs[runs["size"] >= STEADY_MIN_ITERATIONS]
    if runs.empty:
        return None
    best = runs.sort_values(["size", "min"], ascending=[False, True], kind="stable").iloc[0]
    return int(best["min"]), int(best["max"]) + 1
