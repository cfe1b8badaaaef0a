"""The layers table: one row per module, in network order, per step, inclusive and self.

Place in the pipeline: report. :func:`layers_table` reads the window's module ranges (the
annotation's ``fwd:``/``bwd:``/``rec:`` ranges with ingest's ``module_direction``) and the
window's kernels (ingest's ``layer``/``direction`` attribution: a kernel belongs to its
innermost module), and merges what each layer ran
(:func:`dlprof_lite.report.layer_kernels.layer_implementations`).

- Inclusive and self. Wall columns without ``self_`` are range durations: a container's
  include its children's. ``self_*_wall_ns`` is the part no child module range of the same
  direction covers (children: module ranges whose nearest enclosing module range, on its
  thread, is this one). GPU columns without ``self_`` are inclusive too: the module's own
  kernels plus those of every module in its subtree (the ``parent`` links, read from range
  nesting); ``self_*_gpu_ns``, ``gpu_ns``, ``kernels``, ``tc_gpu_ns`` and ``host_gap_ns`` are
  its own kernels only, so that a container never counts a kernel twice.
- Per step: each layer's figure in each of the window's steps (0 in a step it did not run),
  then the mean, median and p90 across those steps. The totals are over the whole window;
  with ``--all-iterations`` events outside every iteration count in totals only.
- Network order: ``order`` ranks layers by where their first forward call starts within
  its step (the first window step that runs it); layers without a forward range follow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import SchemaError
from dlprof_lite.report.frames import empty_report, ordered, share
from dlprof_lite.report.window import NO_ITERATIONS, StepWindow, op_steps, step_of
from dlprof_lite.rules.gemm import is_tc_eligible
from dlprof_lite.rules.names import DIRECTIONS, parse_module_range

_FWD, _BWD, _REC = range(3)  # codes into DIRECTIONS
# Per layer and step, summed; the per-step statistics read these.
_STEP_SUMS = ("forward_wall_ns", "backward_wall_ns", "forward_gpu_ns", "backward_gpu_ns")
_STATS = (("", "mean"), ("_median", "median"), ("_p90", "p90"))
NO_WINDOW = StepWindow(NO_ITERATIONS, (), (), (), None, None)


def layers_table(
    kernels: pd.DataFrame,
    ranges: pd.DataFrame,
    iterations: pd.DataFrame | None = None,
    window: StepWindow = NO_WINDOW,
    *,
    marks: pd.DataFrame | None = None,
    gpus: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per module of ``kernels``/``ranges`` (the window's: the caller cuts them),
    per-step figures over ``window.steps`` (``iterations`` places each range in its step)."""
    steps = iterations if iterations is not None else pd.DataFrame()
    calls = _module_calls(ranges, steps)
    own = _kernel_rows(kernels)
    if calls.empty and own.empty:
        return empty_report("layers")
    parent = _parents(calls)
    drop = ["start_ns", "parent_row", "type", "parent_layer"]
    rows = pd.concat([calls.drop(columns=drop), own.drop(columns="start_ns")],
                     ignore_index=True).fillna(0)  # fmt: skip
    rows = _with_inclusive_gpu(rows, parent)
    out = _totals(rows, calls, kernels)
    out["parent"] = out["layer"].map(parent)
    out = out.join(_per_step(rows, window), on="layer")
    out["calls_per_step"] = out["calls_per_step"].where(out["calls"].notna().to_numpy())
    out["order"] = _network_order(calls, own, window, out["layer"])
    out = out.sort_values(["order", "layer"], kind="stable")
    out = out.merge(_implementations(kernels, marks, gpus, out["layer"]), on="layer", how="left")
    return ordered(out, "layers")


def _module_calls(ranges: pd.DataFrame, iterations: pd.DataFrame) -> pd.DataFrame:
    """One row per module range: layer, type, direction's sums, self wall time, step."""
    cols = ["layer", "type", "step", "start_ns", "parent_row", "calls", "recompute_calls",
            "forward_wall_ns", "backward_wall_ns", "recompute_wall_ns",
            "self_forward_wall_ns", "self_backward_wall_ns"]  # fmt: skip
    if ranges.empty:
        return pd.DataFrame(columns=[*cols, "parent_layer"])
    direction = _direction_codes(ranges)
    names = ranges["name"].astype("category")
    parsed = [parse_module_range(str(n)) for n in names.cat.categories]
    layer_of = np.array([m.qualname if m else None for m in parsed], dtype=object)
    type_of = np.array([m.type_name if m else None for m in parsed], dtype=object)
    codes = names.cat.codes.to_numpy()
    start = ranges["start_ns"].to_numpy(dtype=np.int64)
    dur = (ranges["end_ns"] - ranges["start_ns"]).to_numpy(dtype=np.int64)
    up = _module_ancestor(ranges, direction >= 0)
    # Self wall: a range's duration less its child module ranges of the same direction.
    same = (up >= 0) & (direction == direction[np.maximum(up, 0)]) & (direction >= 0)
    covered = np.bincount(up[same], weights=dur[same], minlength=len(ranges))
    self_wall = np.maximum(dur - covered.round().astype(np.int64), 0)
    at = np.flatnonzero(direction >= 0)
    d = direction[at]

    def where(code: int, values: np.ndarray) -> np.ndarray:
        return np.where(d == code, values[at], 0)

    ones = np.ones(len(ranges), dtype=np.int64)
    return pd.DataFrame(
        {
            "layer": layer_of[codes[at]],
            "type": type_of[codes[at]],
            "step": step_of(start[at], iterations),
            "start_ns": start[at],
            "parent_row": up[at],
            "calls": where(_FWD, ones),
            "recompute_calls": where(_REC, ones),
            "forward_wall_ns": where(_FWD, dur),
            "backward_wall_ns": where(_BWD, dur),
            "recompute_wall_ns": where(_REC, dur),
            "self_forward_wall_ns": where(_FWD, self_wall),
            "self_backward_wall_ns": where(_BWD, self_wall),
        },
        columns=cols,
    ).assign(parent_layer=lambda f: _layer_at(f, at))


def _layer_at(calls: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """The layer of each call's nearest enclosing module range (None at top level)."""
    layer_by_row = np.full(int(at.max()) + 1 if len(at) else 0, None, dtype=object)
    layer_by_row[at] = calls["layer"].to_numpy(dtype=object)
    up = calls["parent_row"].to_numpy(dtype=np.int64)
    out = np.full(len(calls), None, dtype=object)
    out[up >= 0] = layer_by_row[up[up >= 0]]
    return out


def _direction_codes(ranges: pd.DataFrame) -> np.ndarray:
    """Ingest's ``module_direction`` per range as codes into :data:`DIRECTIONS` (-1: not a
    module range), read by value: the column's categories may come in any order."""
    if "module_direction" not in ranges.columns:
        raise SchemaError("ranges: missing column 'module_direction' (written by ingest)")
    column = pd.Categorical(ranges["module_direction"], categories=list(DIRECTIONS))
    return np.asarray(column.codes, dtype=np.int64)


def _module_ancestor(ranges: pd.DataFrame, is_module: np.ndarray) -> np.ndarray:
    """Row of each range's nearest enclosing module range on its thread, -1 for none (its
    parent chain, walked one level at a time for every range at once)."""
    ids = ranges["range_id"].to_numpy(dtype=np.int64)
    row_of = np.full(int(ids.max()) + 2 if len(ids) else 1, -1, dtype=np.int64)
    row_of[ids] = np.arange(len(ids))
    parents = ranges["parent_id"].to_numpy(dtype=np.int64)
    parent_row = np.where(parents >= 0, row_of[np.clip(parents, 0, len(row_of) - 1)], -1)
    up = parent_row.copy()
    todo = (up >= 0) & ~is_module[np.maximum(up, 0)]
    while todo.any():  # one pass per level of non-module ranges between two modules
        up[todo] = parent_row[up[todo]]
        todo = (up >= 0) & ~is_module[np.maximum(up, 0)]
    return up


def _kernel_rows(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per attributed kernel: its layer, step and own-kernel sums."""
    has = kernels["layer"].notna().to_numpy(dtype=bool)
    k = kernels[has]
    dur = k["dur_ns"].to_numpy(dtype=np.int64)
    direction = k["direction"].astype(object).to_numpy()
    return pd.DataFrame(
        {
            "layer": k["layer"].astype(object).to_numpy(),
            "step": op_steps(k),
            # launch time, as ingest places ops in steps: the network order of kernel layers
            "start_ns": k["api_start_ns"].astype("Int64").fillna(k["start_ns"]).to_numpy(np.int64),
            "self_forward_gpu_ns": np.where(direction == "forward", dur, 0),
            "self_backward_gpu_ns": np.where(direction == "backward", dur, 0),
            "self_recompute_gpu_ns": np.where(direction == "recompute", dur, 0),
        }
    )


def _parents(calls: pd.DataFrame) -> dict[str, str | None]:
    """Each layer's parent layer: that of its first forward call (else its first call)."""
    if calls.empty:
        return {}
    first = calls.sort_values(["calls", "start_ns"], ascending=[False, True], kind="stable")
    first = first.drop_duplicates("layer")
    return {str(k): (None if pd.isna(v) else str(v))
            for k, v in zip(first["layer"], first["parent_layer"], strict=True)}  # fmt: skip


def _with_inclusive_gpu(rows: pd.DataFrame, parent: dict[str, str | None]) -> pd.DataFrame:
    """``forward/backward/recompute_gpu_ns``: each row's own kernels booked to its layer and
    to every ancestor layer (a loop per layer and ancestor, never per kernel)."""
    pairs = []
    for layer in pd.unique(rows["layer"]):
        seen: set[str] = set()
        up: str | None = str(layer)
        while up is not None and up not in seen:  # a module called inside itself: once
            pairs.append((up, str(layer)))
            seen.add(up)
            up = parent.get(up)
    links = pd.DataFrame(pairs, columns=["owner", "layer"])
    gpu = rows[["layer", "step", "self_forward_gpu_ns", "self_backward_gpu_ns",
                "self_recompute_gpu_ns"]]  # fmt: skip
    busy = np.asarray(gpu.iloc[:, 2:].to_numpy().any(axis=1), dtype=bool)
    gpu = gpu[busy]
    booked = links.merge(gpu, on="layer").drop(columns="layer")
    booked.columns = ["layer", "step", "forward_gpu_ns", "backward_gpu_ns", "recompute_gpu_ns"]
    return pd.concat([rows, booked], ignore_index=True).fillna(0)


def _totals(rows: pd.DataFrame, calls: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    sums = rows.drop(columns=["step"])
    out = sums.groupby("layer", sort=False).sum().astype("int64").reset_index()
    own = _own_kernel_sums(kernels)
    out = out.merge(own, on="layer", how="left")
    counts = ["gpu_ns", "kernels", "tc_gpu_ns", "host_gap_ns"]
    out[counts] = out[counts].fillna(0).astype("int64")
    types = dict(zip(calls["layer"], calls["type"], strict=True))
    kernel_type = out.pop("kernel_type").astype(object)
    out["type"] = out["layer"].map(types).astype(object).where(lambda t: t.notna(), kernel_type)
    ranged = out["layer"].isin(set(calls["layer"])).to_numpy(dtype=bool)
    for c in ("calls", "recompute_calls"):  # empty for layers only known from kernels
        out[c] = pd.array(np.where(ranged, out[c], 0), dtype="Int64")
        out.loc[~ranged, c] = pd.NA
    out["tc_share"] = share(out["tc_gpu_ns"], out["gpu_ns"])
    known = {t: bool(is_tc_eligible(t)) for t in out["type"].dropna().unique()}
    out["tc_eligible"] = out["type"].map(known).astype("boolean")
    return out


def _own_kernel_sums(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per layer: own kernel time, count, Tensor Core time, host gaps, first kernel's type."""
    k = kernels[kernels["layer"].notna().to_numpy(dtype=bool)]
    dur = k["dur_ns"].to_numpy(dtype=np.int64)
    frame = pd.DataFrame(
        {
            "layer": k["layer"].astype(object).to_numpy(),
            "gpu_ns": dur,
            "kernels": np.ones(len(k), dtype=np.int64),
            "tc_gpu_ns": np.where(k["uses_tensor_cores"].to_numpy(dtype=bool), dur, 0),
            "host_gap_ns": k["host_gap_ns"].to_numpy(dtype=np.int64),
        }
    )
    out = frame.groupby("layer", sort=False).sum()
    # A layer found without module ranges (emit_nvtx ops, DLProf payloads) gets the type
    # of its first kernel.
    out["kernel_type"] = (
        k.groupby(k["layer"].astype(object).to_numpy(), sort=False)["layer_type"]
        .first()
        .astype(object)
    )
    return out.reset_index()


def _per_step(rows: pd.DataFrame, window: StepWindow) -> pd.DataFrame:
    """Mean, median and p90 across the window's steps of each layer's per-step sums (0 in
    a step it did not run); calls and self time as means. Empty without steps."""
    names = [f"step_{c[:-3]}{suffix}_ns" for c in _STEP_SUMS for suffix, _ in _STATS]
    extra = ["calls_per_step", "step_self_wall_ns", "step_self_gpu_ns"]
    layers = pd.Index(pd.unique(rows["layer"]), name="layer")
    if not window.steps:
        return pd.DataFrame(np.nan, index=layers, columns=[*names, *extra])
    steps = list(window.steps)
    mine = rows[rows["step"].isin(steps)].assign(
        step_self_wall_ns=lambda f: f["self_forward_wall_ns"] + f["self_backward_wall_ns"],
        step_self_gpu_ns=lambda f: (
            f["self_forward_gpu_ns"] + f["self_backward_gpu_ns"] + f["self_recompute_gpu_ns"]
        ),
        calls_per_step=lambda f: f["calls"],
    )
    grid = mine.groupby(["layer", "step"])[[*_STEP_SUMS, *extra]].sum()
    out = pd.DataFrame(index=layers)
    for c in (*_STEP_SUMS, *extra):
        table = grid[c].unstack("step").reindex(index=layers, columns=steps).fillna(0)
        values = table.to_numpy(dtype=np.float64)
        if c in extra:
            out[c] = values.mean(axis=1)
            continue
        stats = {"mean": values.mean(axis=1), "median": np.median(values, axis=1),
                 "p90": np.percentile(values, 90, axis=1)}  # fmt: skip
        for suffix, stat in _STATS:
            out[f"step_{c[:-3]}{suffix}_ns"] = stats[stat]
    return out


def _network_order(
    calls: pd.DataFrame, own: pd.DataFrame, window: StepWindow, layers: pd.Series
) -> np.ndarray:
    """1-based rank of each layer by its first forward start within its step (the first
    window step that runs it; without steps, from the run's start): its forward range, else
    (a layer known from kernels only) its first forward kernel's launch; layers without a
    forward call follow, by their first module range or kernel."""
    key = pd.concat([
        pd.DataFrame({"layer": calls["layer"], "forward": calls["calls"] > 0,
                      "step": calls["step"], "start": calls["start_ns"]}),
        pd.DataFrame({"layer": own["layer"], "forward": own["self_forward_gpu_ns"] > 0,
                      "step": own["step"], "start": own["start_ns"]}),
    ], ignore_index=True)  # fmt: skip
    key["forward"] = key["forward"].astype(bool)
    if window.steps:
        begin = dict(zip(window.steps, window.starts, strict=True))
        key = key[key["step"].isin(begin)]
        key["start"] = key["start"] - key["step"].map(begin)
    key = key.sort_values(["forward", "step", "start"], ascending=[False, True, True])
    first = key.drop_duplicates("layer").set_index("layer")
    rank = pd.DataFrame({"layer": layers.to_numpy()})
    rank["forward"] = rank["layer"].isin(set(first.index[first["forward"].to_numpy(bool)]))
    rank["start"] = rank["layer"].map(first["start"])
    rank = rank.sort_values(["forward", "start", "layer"], ascending=[False, True, True],
                            na_position="last", kind="stable")  # fmt: skip
    order = pd.Series(np.arange(1, len(rank) + 1), index=rank.index)
    return order.sort_index().to_numpy(dtype=np.int64)


def _implementations(
    kernels: pd.DataFrame, marks: pd.DataFrame | None, gpus: pd.DataFrame | None,
    layers: pd.Series,
) -> pd.DataFrame:  # fmt: skip
    """What each layer ran (report/layer_kernels.py), one row per layer of the table."""
    from dlprof_lite.report.layer_kernels import layer_implementations

    no_marks = pd.DataFrame(columns=["start_ns", "name", "domain", "pid", "tid"])
    no_gpus = pd.DataFrame(columns=["device_id", "cc_major", "cc_minor"])
    found = layer_implementations(
        kernels,
        marks if marks is not None else no_marks,
        gpus if gpus is not None else no_gpus,
        layers=[str(x) for x in layers],
    )
    return found[found["layer"].isin(set(layers))]
