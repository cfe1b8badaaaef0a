"""Launch-overhead aggregations: short kernels and per-group overhead totals.

Place in the pipeline: report. Ingest labelled every kernel and memop with ``host_gap_ns``
(:mod:`dlprof_lite.ingest.overhead`, where the definitions are cited); :func:`launch_times`
gives ``api_ns`` and ``queue_ns`` from an op's launch times; these pure functions aggregate
them for the kernels table and the summary.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def launch_times(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``api_ns`` and ``queue_ns`` of each op, as floats: NaN where the op has no launch call,
    and ``queue_ns`` NaN where the op started before its call returned (no queue time)."""
    # Differences in integers first: an export on the epoch clock (~1.7e18 ns) is past
    # float64's exact integers.
    start, end = ops["api_start_ns"], ops["api_end_ns"]
    missing = (start.isna() | end.isna()).to_numpy(dtype=bool)
    a = start.to_numpy(dtype=np.int64, na_value=0)
    b = end.to_numpy(dtype=np.int64, na_value=0)
    api = (b - a).astype(np.float64)
    queue = (ops["start_ns"].to_numpy(dtype=np.int64) - b).astype(np.float64)
    api[missing] = np.nan
    queue[missing | (queue < 0)] = np.nan
    return api, queue


def is_short_kernel(ops: pd.DataFrame) -> pd.Series:
    """True for a kernel whose GPU duration is shorter than its launch call (HTA's short kernel).

    ``ops`` needs ``dur_ns`` and its launch times. False without an API row, and False for
    memop rows when ``ops`` mixes kernels and memops (memops carry a non-null ``kind``).
    """
    return pd.Series(_short(ops, launch_times(ops)[0]), index=ops.index, name="short_kernel")


def _short(ops: pd.DataFrame, api: np.ndarray) -> np.ndarray:
    short: np.ndarray = ops["dur_ns"].to_numpy(dtype=np.float64) < api  # NaN compares False
    if "kind" in ops.columns:
        short &= ops["kind"].isna().to_numpy()
    return short


def overhead_summary(ops: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Launch-overhead totals per group of ``by`` columns (an empty ``by``: one total row).

    Columns: the ``by`` columns, ``ops`` (row count), ``host_gap_ns`` (sum, int64),
    ``api_ns_mean`` and ``queue_ns_mean`` (float64, NaN where no op has the value) and
    ``short_kernels`` (int64, see :func:`is_short_kernel`). Null group keys form their own
    group (an op outside every iteration is still overhead). ``host_gap_ns`` sums whole gaps,
    wherever they began: a share of a time window needs the gaps clipped to the window, as the
    iterations table does (:func:`dlprof_lite.report.steps.table.iterations_table`).
    """
    api, queue = launch_times(ops)
    data = pd.DataFrame(
        {
            "host_gap_ns": ops["host_gap_ns"].to_numpy(dtype=np.int64),
            "api_ns": api,
            "queue_ns": queue,
            "short_kernels": _short(ops, api).astype(np.int64),
        },
        index=ops.index,
    )
    keys = list(by) if by else ["_all"]
    for col in by:
        data[col] = ops[col]
    if not by:
        data["_all"] = 0
    out = (
        data.groupby(keys, observed=True, dropna=False, sort=True)
        .agg(
            ops=("host_gap_ns", "size"),
            host_gap_ns=("host_gap_ns", "sum"),
            api_ns_mean=("api_ns", "mean"),
            queue_ns_mean=("queue_ns", "mean"),
            short_kernels=("short_kernels", "sum"),
        )
        .reset_index()
    )
    if not by:
        out = out.drop(columns="_all")
    return out.astype({"ops": "int64", "host_gap_ns": "int64", "short_kernels": "int64"})
