"""Per-kernel, per-NVTX-range and per-layer tables: pure functions from Profile frames.

Each function returns the columns declared in :mod:`dlprof_lite.report.metrics`, in order,
one row per kernel name / range path / module. Aggregation is vectorised group-bys; the
only Python loops run once per output row or per distinct name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import SchemaError
from dlprof_lite.report.frames import empty_report, ordered, share
from dlprof_lite.report.overhead import overhead_summary
from dlprof_lite.rules.gemm import is_tc_eligible
from dlprof_lite.rules.names import DIRECTIONS, parse_module_range


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
    for c in ("path", "name", "domain", "style"):
        out[c] = ranges[c].iloc[first].to_numpy(dtype=object)
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


def _module_walls(ranges: pd.DataFrame) -> pd.DataFrame:
    """Forward/backward/recompute wall time and calls per module, from module range names
    and ingest's ``module_direction`` (a ``fwd:`` range inside a backward is a recompute,
    not a call)."""
    names = ranges["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    # Parse each distinct name once, then broadcast to rows through the category codes.
    parsed = [parse_module_range(n) for n in names.cat.categories.astype(str)]
    layer_of = np.array([m.qualname if m else None for m in parsed], dtype=object)
    type_of = np.array([m.type_name if m else None for m in parsed], dtype=object)
    codes = names.cat.codes.to_numpy()
    direction = _direction_codes(ranges)
    rows = np.flatnonzero(direction >= 0)
    if len(rows) == 0:
        return pd.DataFrame(columns=["layer", "type", *_WALL_SUMS])
    dur = (ranges["end_ns"] - ranges["start_ns"]).to_numpy(dtype="int64")[rows]
    fwd, rec = direction[rows] == 0, direction[rows] == DIRECTIONS.index("recompute")
    at = codes[rows]
    work = pd.DataFrame(
        {
            "layer": layer_of[at],
            "type": type_of[at],
            "forward_wall_ns": np.where(fwd, dur, 0),
            "backward_wall_ns": np.where(direction[rows] == 1, dur, 0),
            "recompute_wall_ns": np.where(rec, dur, 0),
            "calls": fwd.astype("int64"),
            "recompute_calls": rec.astype("int64"),
        }
    )
    return work.groupby(["layer", "type"], sort=False).sum().reset_index()


def _direction_codes(ranges: pd.DataFrame) -> np.ndarray:
    """Ingest's ``module_direction`` per range as codes into :data:`DIRECTIONS` (-1: not a
    module range), read by value: the column's categories may come in any order."""
    _require(ranges, ("module_direction",))
    column = pd.Categorical(ranges["module_direction"], categories=list(DIRECTIONS))
    return np.asarray(column.codes, dtype=np.int64)


_WALL_SUMS = ["forward_wall_ns", "backward_wall_ns", "recompute_wall_ns", "calls",
              "recompute_calls"]  # fmt: skip
_GPU_SUMS = ["forward_gpu_ns", "backward_gpu_ns", "recompute_gpu_ns", "gpu_ns", "kernels",
             "tc_gpu_ns", "host_gap_ns"]  # fmt: skip


def _layer_gpu(kernels: pd.DataFrame) -> pd.DataFrame:
    """GPU time per module from the kernels' ``layer``/``direction`` attribution.

    Summed with ``bincount`` over the layer's category codes: no copy of the kernel rows.
    """
    layer = kernels["layer"].astype("category")
    codes = layer.cat.codes.to_numpy()
    has = codes >= 0
    at = codes[has]
    n = len(layer.cat.categories)
    dur = kernels["dur_ns"].to_numpy(dtype="int64")[has]

    def total(weights: np.ndarray | None) -> np.ndarray:
        # float64 sums are exact for integers below 2**53 ns (104 days)
        return np.bincount(at, weights=weights, minlength=n).round().astype("int64")

    direction = kernels["direction"]  # compared as categorical codes, not as objects
    forward = (direction == "forward").to_numpy(dtype=bool)[has]
    backward = (direction == "backward").to_numpy(dtype=bool)[has]
    recompute = (direction == "recompute").to_numpy(dtype=bool)[has]
    sums = {
        "forward_gpu_ns": total(np.where(forward, dur, 0)),
        "backward_gpu_ns": total(np.where(backward, dur, 0)),
        "recompute_gpu_ns": total(np.where(recompute, dur, 0)),
        "gpu_ns": total(dur),
        "kernels": total(None),
        "tc_gpu_ns": total(np.where(kernels["uses_tensor_cores"].to_numpy(bool)[has], dur, 0)),
        "host_gap_ns": total(kernels["host_gap_ns"].to_numpy(dtype="int64")[has]),
    }
    # The analysis also names a type for layers found without module ranges (emit_nvtx
    # ops, DLProf payloads): the first kernel's, as for any other per-layer value.
    first = np.full(n, -1)
    seen, where = np.unique(at, return_index=True)
    first[seen] = np.flatnonzero(has)[where]
    types = kernels["layer_type"].to_numpy(dtype=object)
    out = pd.DataFrame({"layer": layer.cat.categories.astype(object), **sums})
    kernel_type: np.ndarray = types[np.maximum(first, 0)]  # a copy (fancy indexing)
    kernel_type[first < 0] = None
    out["kernel_type"] = kernel_type
    return out[out["kernels"] > 0].reset_index(drop=True)


def layers_table(kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per module: forward/backward wall and GPU time, kernels, Tensor Core share."""
    walls = _module_walls(ranges)
    gpu = _layer_gpu(kernels)
    if walls.empty and gpu.empty:
        return empty_report("layers")
    out = walls.merge(gpu, on="layer", how="outer", sort=False)
    out["type"] = out["type"].astype(object).fillna(out.pop("kernel_type"))
    sums = ["forward_wall_ns", "backward_wall_ns", "recompute_wall_ns", *_GPU_SUMS]
    out[sums] = out[sums].fillna(0).astype("int64")
    out[["calls", "recompute_calls"]] = out[["calls", "recompute_calls"]].astype("Int64")
    out["tc_share"] = share(out["tc_gpu_ns"], out["gpu_ns"])
    out["tc_eligible"] = _eligibility(out["type"])
    out = out.sort_values(
        ["gpu_ns", "forward_wall_ns", "layer"], ascending=[False, False, True], kind="stable"
    )
    return ordered(out, "layers")


def _eligibility(types: pd.Series) -> pd.Series:
    """Tensor Core eligibility per module type (one lookup per distinct type)."""
    known = {t: bool(is_tc_eligible(t)) for t in types.dropna().unique()}
    return types.map(known).astype("boolean")
