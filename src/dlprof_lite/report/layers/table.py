"""The layers table: one row per module, in network order, per step, inclusive and self.

Place in the pipeline: report. :func:`layers_table` reads the window's module ranges (the
annotation's ``fwd:``/``bwd:``/``rec:`` ranges with ingest's ``module_direction``) and the
window's kernels (ingest's ``layer``/``direction`` attribution: a kernel belongs to its
innermost module), and merges what each layer ran
(:func:`dlprof_lite.report.layers.kernels.layer_implementations`).

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
- Folded modules (too short to time, folded into their parent after the warm-up step):
  ``folded_call_ns`` marks them, and one without a range in the window gets a row after its
  parent's (:mod:`dlprof_lite.report.layers.folded`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from dlprof_lite.errors import SchemaError
from dlprof_lite.numeric import cat_mask, sum_by
from dlprof_lite.report.frames import groups, ordered, share
from dlprof_lite.report.layers.buckets import layer_grad_sync
from dlprof_lite.report.layers.flops import gpu_of, layer_flops
from dlprof_lite.report.layers.memory import layer_memory
from dlprof_lite.report.model import empty_report
from dlprof_lite.report.steps.window import NO_ITERATIONS, StepWindow, op_steps, step_of
from dlprof_lite.rules.gemm import is_matmul_kernel, is_tc_eligible
from dlprof_lite.rules.names import DIRECTIONS, parse_module_range

_FWD, _BWD, _REC = range(3)  # codes into DIRECTIONS
# Per layer and step, summed; the per-step statistics read these.
_STEP_SUMS = ("forward_wall_ns", "backward_wall_ns", "forward_gpu_ns", "backward_gpu_ns")
_STATS = (("", "mean"), ("_median", "median"), ("_p90", "p90"))
# Self time per step, as medians: robust to a few slow steps (compare ranks layers by them).
_SELF_MEDIANS = ("self_forward_wall_ns", "self_backward_wall_ns", "self_forward_gpu_ns",
                 "self_backward_gpu_ns")  # fmt: skip
NO_WINDOW = StepWindow(NO_ITERATIONS, (), (), (), None, None)
_NEVER = np.iinfo(np.int64).max  # no forward kernel: a start after every real one


def layers_table(
    kernels: pd.DataFrame,
    ranges: pd.DataFrame,
    iterations: pd.DataFrame | None = None,
    window: StepWindow = NO_WINDOW,
    *,
    facts: pd.DataFrame | None = None,
    gpus: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per module of ``kernels``/``ranges`` (the window's: the caller cuts them),
    per-step figures over ``window.steps`` (``iterations`` places each range in its step)."""
    steps = iterations if iterations is not None else pd.DataFrame()
    calls = _module_calls(ranges, steps)
    own = _kernel_rows(kernels)
    if calls.sums.empty and own.empty:
        return empty_report("layers")
    times = ["start_ns", "forward_start_ns"]
    rows = pd.concat([calls.sums.drop(columns=times), own.drop(columns=times)],
                     ignore_index=True).fillna(0)  # fmt: skip
    rows = _with_inclusive_gpu(rows, calls.parents)
    out = _totals(rows, calls, kernels)
    out["parent"] = out["layer"].map(calls.parents)
    out = out.join(_per_step(rows, window), on="layer")
    out["calls_per_step"] = out["calls_per_step"].where(out["calls"].notna().to_numpy())
    out["order"] = _network_order(calls.sums, own, window, out["layer"])
    out = out.sort_values(["order", "layer"], kind="stable")
    out = _with_folded(out, facts)
    out = out.merge(_implementations(kernels, facts, gpus, out["layer"]), on="layer", how="left")
    out = out.join(layer_grad_sync(kernels, facts, len(window.steps)), on="layer")
    out = out.join(layer_flops(ranges, steps, window, facts, out, gpu_of(kernels, gpus)),
                   on="layer")  # fmt: skip
    out = out.join(layer_memory(facts, out), on="layer")
    return ordered(out, "layers")



class _Calls(NamedTuple):
    """Module calls per layer and step (``sums``: one row per pair, not per range), and per
    layer its type and parent layer (of its first forward call, else its first call)."""

    sums: pd.DataFrame
    types: dict[str, str]
    parents: dict[str, str | None]


_CALL_SUMS = ["calls", "recompute_calls", "forward_wall_ns", "backward_wall_ns",
              "recompute_wall_ns", "self_forward_wall_ns", "self_backward_wall_ns"]  # fmt: skip


def _module_calls(ranges: pd.DataFrame, iterations: pd.DataFrame) -> _Calls:
    """The module ranges' calls, wall time and self wall time per layer and step."""
    columns = ["layer", "step", *_CALL_SUMS, "start_ns", "forward_start_ns"]
    if ranges.empty:
        return _Calls(pd.DataFrame(columns=columns), {}, {})
    direction = _direction_codes(ranges)
    names = ranges["name"].astype("category")
    parsed = [parse_module_range(str(n)) for n in names.cat.categories]
    layer_names = list(dict.fromkeys(m.qualname for m in parsed if m))
    code_of = {n: i for i, n in enumerate(layer_names)}
    # Per range: its layer as a code into layer_names (-1: not a module range).
    layer = np.array([code_of[m.qualname] if m else -1 for m in parsed] + [-1])[
        names.cat.codes.to_numpy()
    ]
    type_of = np.array([m.type_name if m else None for m in parsed] + [None], dtype=object)
    start = ranges["start_ns"].to_numpy(dtype=np.int64)
    dur = (ranges["end_ns"] - ranges["start_ns"]).to_numpy(dtype=np.int64)
    up = _module_ancestor(ranges, direction >= 0)
    # Self wall: a range's duration less its child module ranges of the same direction.
    same = (up >= 0) & (direction >= 0) & (direction == direction[np.maximum(up, 0)])
    covered = np.bincount(up[same], weights=dur[same], minlength=len(ranges))
    self_wall = np.maximum(dur - covered.round().astype(np.int64), 0)
    at = np.flatnonzero(direction >= 0)
    d = direction[at]

    def where(code: int, values: np.ndarray) -> np.ndarray:
        return np.where(d == code, values[at], 0)

    ones = np.ones(len(ranges), dtype=np.int64)
    calls = pd.DataFrame(
        {
            "layer": layer[at],
            "step": step_of(start[at], iterations),
            "calls": where(_FWD, ones),
            "recompute_calls": where(_REC, ones),
            "forward_wall_ns": where(_FWD, dur),
            "backward_wall_ns": where(_BWD, dur),
            "recompute_wall_ns": where(_REC, dur),
            "self_forward_wall_ns": where(_FWD, self_wall),
            "self_backward_wall_ns": where(_BWD, self_wall),
            "start_ns": start[at],
            "forward_start_ns": np.where(d == _FWD, start[at], _NEVER),
        }
    )
    g = calls.groupby(["layer", "step"], sort=False)
    sums = g[_CALL_SUMS].sum().join(g[["start_ns", "forward_start_ns"]].min()).reset_index()
    sums["layer"] = np.asarray(layer_names, dtype=object)[sums["layer"].to_numpy()]
    # Ranges come in start order: the first forward call of each layer is its first row.
    first = pd.DataFrame({"layer": layer[at], "late": d != _FWD, "row": at})
    first = first.sort_values(["late", "row"], kind="stable").drop_duplicates("layer")
    rows, parent_rows = first["row"].to_numpy(), up[first["row"].to_numpy()]
    name_code = names.cat.codes.to_numpy()
    types = dict(zip([layer_names[i] for i in layer[rows]], type_of[name_code[rows]], strict=True))
    parents = {
        layer_names[child]: (layer_names[layer[p]] if p >= 0 else None)
        for child, p in zip(layer[rows], parent_rows, strict=True)
    }
    return _Calls(sums, types, parents)


def _direction_codes(ranges: pd.DataFrame) -> np.ndarray:
    """Ingest's ``module_direction`` per range as codes into :data:`DIRECTIONS` (-1: not a
    module range), read by value: the column's categories may come in any order."""
    if "module_direction" not in ranges.columns:
        raise SchemaError("ranges: missing column 'module_direction' (written by ingest)")
    return _codes(ranges["module_direction"], DIRECTIONS)


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
    """Own-kernel sums per layer and step (one row per pair, not per kernel, in the order of
    their first kernel), with the first launch of any and of a forward kernel (the network
    order of kernel-only layers: launch time, as ingest places ops in steps).

    Column arrays and one number per (layer, step) pair: a frame of the kernels grouped by
    pandas cost 120 MB over the profile at 1M kernels."""
    has = kernels["layer"].notna().to_numpy(dtype=bool)
    # (layer, step) pairs numbered in order of first appearance (a kernel outside every
    # step: step -1); pd.factorize of one key per kernel sized its table for every kernel.
    pair, first = groups(kernels, ["layer", "iteration"], has)
    n = len(first)
    dur = kernels["dur_ns"].to_numpy(dtype=np.int64)[has]
    direction = _codes(kernels["direction"], DIRECTIONS)[has]
    launch_ns = kernels["api_start_ns"].to_numpy(dtype=np.int64, na_value=-1)[has]
    no_launch = kernels["api_start_ns"].isna().to_numpy(dtype=bool)[has]
    launch_ns[no_launch] = kernels["start_ns"].to_numpy(dtype=np.int64)[has][no_launch]
    out = {"layer": np.asarray(kernels["layer"].take(first), dtype=object),
           "step": op_steps(kernels.iloc[first])}  # fmt: skip
    for column, code in (("self_forward_gpu_ns", _FWD), ("self_backward_gpu_ns", _BWD),
                         ("self_recompute_gpu_ns", _REC)):  # fmt: skip
        out[column] = sum_by(pair[direction == code], dur[direction == code], n)
    out["start_ns"] = _min_by(pair, launch_ns, n)
    forward = direction == _FWD
    out["forward_start_ns"] = _min_by(pair[forward], launch_ns[forward], n)
    return pd.DataFrame(out)


def _min_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Least value per group, :data:`_NEVER` for a group without one."""
    out = np.full(n, _NEVER, dtype=np.int64)
    np.minimum.at(out, group, values)
    return out


def _codes(column: pd.Series, values: tuple[str, ...]) -> np.ndarray:
    """A categorical column's values as codes into ``values`` (-1: missing or other)."""
    return np.asarray(pd.Categorical(column, categories=list(values)).codes, dtype=np.int64)


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


def _totals(rows: pd.DataFrame, calls: _Calls, kernels: pd.DataFrame) -> pd.DataFrame:
    sums = rows.drop(columns=["step"])
    out = sums.groupby("layer", sort=False).sum().astype("int64").reset_index()
    own = _own_kernel_sums(kernels)
    out = out.merge(own, on="layer", how="left")
    counts = ["gpu_ns", "kernels", "tc_gpu_ns", "tc_miss_gpu_ns", "host_gap_ns"]
    out[counts] = out[counts].fillna(0).astype("int64")
    types = calls.types
    kernel_type = out.pop("kernel_type").astype(object)
    out["type"] = out["layer"].map(types).astype(object).where(lambda t: t.notna(), kernel_type)
    ranged = out["layer"].isin(set(calls.types)).to_numpy(dtype=bool)
    for c in ("calls", "recompute_calls"):  # empty for layers only known from kernels
        out[c] = pd.array(np.where(ranged, out[c], 0), dtype="Int64")
        out.loc[~ranged, c] = pd.NA
    out["tc_share"] = share(out["tc_gpu_ns"], out["gpu_ns"])
    known = {t: bool(is_tc_eligible(t)) for t in out["type"].dropna().unique()}
    out["tc_eligible"] = out["type"].map(known).astype("boolean")
    return out


def _own_kernel_sums(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per layer: own kernel time, count, Tensor Core time, GEMM/convolution time without
    Tensor Cores, host gaps, first kernel's type.

    Summed on the layer's category codes into arrays of one slot per layer: a frame of the
    layered kernels grouped by layer held six columns of a million rows (+45 MB at 1M)."""
    layer = kernels["layer"].astype("category")
    codes = layer.cat.codes.to_numpy()
    has = codes >= 0
    group = codes[has].astype(np.intp)
    n = len(layer.cat.categories)
    dur = kernels["dur_ns"].to_numpy(dtype=np.int64)[has]
    tc = kernels["uses_tensor_cores"].to_numpy(dtype=bool)[has]
    miss = cat_mask(kernels["name"], lambda names: names.map(is_matmul_kernel))[has] & ~tc
    count = np.bincount(group, minlength=n).astype(np.int64)
    # A layer found without module ranges (emit_nvtx ops, DLProf payloads) gets the type
    # of its first kernel that has one (in row order; none: missing).
    kind = kernels["layer_type"]
    typed = has & kind.notna().to_numpy(dtype=bool)
    first = _min_by(codes[typed].astype(np.intp), np.flatnonzero(typed), n)
    present = np.flatnonzero(count > 0)
    at = first[present]
    found = at != _NEVER
    types = np.full(len(present), None, dtype=object)
    types[found] = np.asarray(kind.array.take(at[found]), dtype=object)
    return pd.DataFrame(
        {
            "layer": np.asarray(layer.cat.categories[present], dtype=object),
            "gpu_ns": sum_by(group, dur, n)[present],
            "kernels": count[present],
            "tc_gpu_ns": sum_by(group[tc], dur[tc], n)[present],
            "tc_miss_gpu_ns": sum_by(group[miss], dur[miss], n)[present],
            "host_gap_ns": sum_by(
                group, kernels["host_gap_ns"].to_numpy(dtype=np.int64)[has], n
            )[present],
            "kernel_type": types,
        }
    )


def _per_step(rows: pd.DataFrame, window: StepWindow) -> pd.DataFrame:
    """Mean, median and p90 across the window's steps of each layer's per-step sums (0 in
    a step it did not run); calls and self time as means. Empty without steps."""
    names = [f"step_{c[:-3]}{suffix}_ns" for c in _STEP_SUMS for suffix, _ in _STATS]
    extra = ["calls_per_step", "step_self_wall_ns", "step_self_gpu_ns"]
    names += [f"step_{c[:-3]}_median_ns" for c in _SELF_MEDIANS]
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
    # Each column's (layer, step) sums as one array: a cell per layer and step, 0 where the
    # layer did not run (a groupby unstacked column by column took 0.15 s at 5000 steps).
    layer_at = np.asarray(layers.get_indexer(pd.Index(mine["layer"])), dtype=np.int64)
    step_at = np.asarray(pd.Index(steps).get_indexer(pd.Index(mine["step"])), dtype=np.int64)
    at = np.where(mine["layer"].notna().to_numpy(dtype=bool),
                  layer_at * len(steps) + step_at, -1)  # no layer: no row
    known = at >= 0
    out = pd.DataFrame(index=layers)
    for c in (*_STEP_SUMS, *extra, *_SELF_MEDIANS):
        values = _cells(mine[c], at, known, len(layers) * len(steps)).reshape(-1, len(steps))
        if c in extra:
            out[c] = values.mean(axis=1)
            continue
        if c in _SELF_MEDIANS:
            out[f"step_{c[:-3]}_median_ns"] = np.median(values, axis=1)
            continue
        stats = {"mean": values.mean(axis=1), "median": np.median(values, axis=1),
                 "p90": np.percentile(values, 90, axis=1)}  # fmt: skip
        for suffix, stat in _STATS:
            out[f"step_{c[:-3]}{suffix}_ns"] = stats[stat]
    return out


def _cells(column: pd.Series, at: np.ndarray, known: np.ndarray, n: int) -> np.ndarray:
    """``column`` summed into ``n`` cells by position ``at`` (rows not ``known`` left out),
    as float64: integers summed exactly first, floats with missing values as 0."""
    if pd.api.types.is_integer_dtype(column.dtype) and not column.hasnans:
        exact = sum_by(at[known], column.to_numpy(dtype=np.int64)[known], n)
        return exact.astype(np.float64)
    out = np.zeros(n, dtype=np.float64)
    np.add.at(out, at[known], np.nan_to_num(column.to_numpy(dtype=np.float64)[known]))
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
                      "step": calls["step"],
                      "start": calls["forward_start_ns"].where(calls["calls"] > 0,
                                                               calls["start_ns"])}),
        pd.DataFrame({"layer": own["layer"], "forward": own["forward_start_ns"] < _NEVER,
                      "step": own["step"],
                      "start": own["forward_start_ns"].where(own["forward_start_ns"] < _NEVER,
                                                             own["start_ns"])}),
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


def _with_folded(out: pd.DataFrame, facts: pd.DataFrame | None) -> pd.DataFrame:
    """Mark the modules the annotation folded after warm-up, and list those the window has no
    range of (report/layers/folded.py)."""
    from dlprof_lite.report.layers.folded import with_folded
    from dlprof_lite.report.run_facts import FOLDED_COLUMNS, folded_modules, module_facts

    if facts is None or facts.empty:
        return with_folded(out, pd.DataFrame(columns=list(FOLDED_COLUMNS)), {})
    described = module_facts(facts)
    types = dict(zip(described["layer"].astype(str), described["type"], strict=True))
    return with_folded(out, folded_modules(facts), types)


def _implementations(
    kernels: pd.DataFrame, facts: pd.DataFrame | None, gpus: pd.DataFrame | None,
    layers: pd.Series,
) -> pd.DataFrame:  # fmt: skip
    """What each layer ran (report/layers/kernels.py), one row per layer of the table."""
    from dlprof_lite.report.layers.kernels import layer_implementations

    no_gpus = pd.DataFrame(columns=["device_id", "cc_major", "cc_minor"])
    found = layer_implementations(
        kernels,
        facts,
        gpus if gpus is not None else no_gpus,
        layers=[str(x) for x in layers],
    )
    return found[found["layer"].isin(set(layers))]
