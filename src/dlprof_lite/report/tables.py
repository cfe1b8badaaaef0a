"""Per-kernel and per-NVTX-range tables: pure functions from Profile frames.

Each function returns the columns declared in :mod:`dlprof_lite.report.metrics`, in order,
one row per kernel name / range path. Aggregation is vectorised group-bys; the only Python
loops run once per output row or per distinct name. The layers table, one row per module,
is :mod:`dlprof_lite.report.layers.table`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import SchemaError
from dlprof_lite.report.frames import ordered, share
from dlprof_lite.report.model import empty_report
from dlprof_lite.report.overhead import overhead_summary
from dlprof_lite.report.ranks.table import collectives


def kernels_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel name: call statistics, Tensor Core class, launch statistics."""
    if kernels.empty:
        return empty_report("kernels")
    dur = pd.DataFrame({"name": kernels["name"], "dur": kernels["dur_ns"].to_numpy(dtype="int64")})
    g = dur.groupby("name", observed=True, sort=False)["dur"]
    first = kernels.groupby("name", observed=True, sort=False)[
        ["short_name", "tc_class", "uses_tensor_cores", "tc_rule"]
    ].first()
    launch = overhead_summary(kernels, ["name"]).set_index("name")
    out = pd.DataFrame(
        {
            "instances": g.size(),
            "total_ns": g.sum(),
            "avg_ns": g.mean(),
            "median_ns": g.median(),
            "min_ns": g.min(),
            "max_ns": g.max(),
            # nsys gpukernsum's StdDev is the sample standard deviation, 0 for one instance.
            "std_ns": g.std(ddof=1).fillna(0.0),
        }
    ).join(first)
    out["avg_api_ns"] = launch["api_ns_mean"]
    out["avg_queue_ns"] = launch["queue_ns_mean"]
    out["short_launches"] = launch["short_kernels"]
    out["host_gap_ns"] = launch["host_gap_ns"]
    out["pct_kernel_time"] = out["total_ns"] / out["total_ns"].sum() * 100.0
    out["api_name"] = _most_frequent_api(kernels).reindex(out.index)
    out = out.reset_index().sort_values(["total_ns", "name"], ascending=[False, True])
    out["comm"] = collectives(out["name"])
    return ordered(out, "kernels")


def _most_frequent_api(kernels: pd.DataFrame) -> pd.Series:
    counts = (
        kernels.groupby(["name", "api_name"], observed=True, sort=False)
        .size()
        .sort_values(ascending=False, kind="stable")
        .reset_index()
    )
    top = counts.drop_duplicates("name")
    return pd.Series(top["api_name"].astype(object).to_numpy(), index=top["name"].to_numpy())


_RANGE_SUMS = ("gpu_ns", "self_gpu_ns", "projected_ns", "kernels", "memops", "memop_ns",
               "tc_gpu_ns")  # fmt: skip


def ranges_table(kernels: pd.DataFrame, memops: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per NVTX range path (chain of names and domains): wall time, GPU time,
    Tensor Core share, and ``path_id``/``parent_path_id`` to rebuild any elided path.

    Ingest writes each range instance's chain ids and GPU work (nsys's ``nvtx_kern_sum``
    rule) as columns of ``Profile.ranges``; this function sums instances. Rows group by
    chain id, not by the ``path`` label: a deep label is elided, so two chains may share
    one. ``kernels``/``memops`` only vouch for a ranges table built without the GPU
    columns (straight from ``build_ranges``): with no ops there is no GPU work to count.
    """
    if ranges.empty:
        return empty_report("ranges")
    _require(ranges, ("path_id", "parent_path_id", "depth"))
    per = pd.DataFrame(
        {
            "path_id": ranges["path_id"].to_numpy(dtype="int64"),
            "wall_ns": (ranges["end_ns"] - ranges["start_ns"]).to_numpy(dtype="int64"),
            **_gpu_work(ranges, ops=not (kernels.empty and memops.empty)),
        },
        copy=False,
    )
    g = per.groupby("path_id", sort=True)
    out = g[["wall_ns", *_RANGE_SUMS]].sum()
    out["instances"] = g.size()
    out = out.reset_index()
    # Instances of a chain share path, name, domain, parent chain and depth; style is the
    # first instance's (a start/end and a push/pop range of one name share a top level row).
    first = np.unique(per["path_id"].to_numpy(), return_index=True)[1]  # path_id order
    for c in ("path", "domain", "style"):
        out[c] = ranges[c].iloc[first].to_numpy(dtype=object)
    # a chain's name: its path name (a counter's template, ingest/templates.py)
    out["name"] = ranges["path_name" if "path_name" in ranges else "name"].iloc[first].to_numpy(
        dtype=object)  # fmt: skip
    for c in ("parent_path_id", "depth"):
        out[c] = ranges[c].to_numpy(dtype="int64")[first]
    out["tc_share"] = share(out["tc_gpu_ns"], out["gpu_ns"])
    out = out.sort_values(
        ["gpu_ns", "wall_ns", "path", "path_id"], ascending=[False, False, True, True]
    )
    return ordered(out, "ranges")


def _gpu_work(ranges: pd.DataFrame, *, ops: bool) -> dict[str, np.ndarray]:
    """Per range instance, the GPU work columns ingest wrote; zeros for a ranges table
    without any of them when there are no ops (nothing ran, nothing to attribute)."""
    if ops or any(c in ranges.columns for c in _RANGE_SUMS):
        _require(ranges, _RANGE_SUMS)
        return {c: ranges[c].to_numpy(dtype="int64") for c in _RANGE_SUMS}
    zero = np.zeros(len(ranges), dtype=np.int64)
    return dict.fromkeys(_RANGE_SUMS, zero)


def _require(ranges: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """A missing per-range column is an input that did not go through ingest: say which."""
    for c in columns:
        if c not in ranges.columns:
            raise SchemaError(f"ranges: missing column {c!r} (written by dlprof_lite's ingest)")
