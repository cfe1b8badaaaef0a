"""Layers, directions and training phases of every kernel and memop, from NVTX ranges.

Place in the pipeline: an analysis step of ``ingest`` (see :mod:`dlprof_lite.ingest.load`),
run after ``correlate.attribute_ranges`` has given each GPU op the innermost NVTX range its
launch call started in (``range_id``). It adds ``layer``, ``layer_type``, ``direction`` and
``phase``. Each distinct range name is parsed once; ops only index per-range arrays.

Layer names come from three kinds of NVTX range, in this order of priority:

a. our annotation layer's module ranges ``fwd:<qualname>:<Type>`` / ``bwd:...`` / ``rec:...``
   (:func:`dlprof_lite.rules.names.parse_module_range`): the innermost one enclosing the op.
   A ``rec:`` range, and a ``fwd:`` range nested in a ``bwd:``/``rec:`` range on its thread
   (what profiles made before ``rec:`` show for activation checkpointing), is a recompute:
   its ops get direction ``recompute`` and phase ``backward``, the layer recomputed.
b. ``torch.autograd.profiler.emit_nvtx``: a forward op is ``aten::addmm, seq = 8`` (then
   ``, op_id = ...``/``, sizes = [...]`` in newer PyTorch) and the backward node it creates
   ``AddmmBackward0, seq = 8`` (``getNvtxStr`` in ``torch/csrc/profiler``, PyTorch >= 1.5) or
   ``AddmmBackward, stashed seq=8`` (older). An op inside a backward node gets the layer of
   the forward op with that ``seq`` in its process (the latest one started before the node),
   direction ``backward``. The forward op is the outermost of nested ranges sharing a ``seq``
   (``aten::conv2d``, not the ``aten::cudnn_convolution`` inside); its layer is its enclosing
   module (a or c), else its own name.
c. PyProf/DLProf payloads ``{'traceMarker': [...], 'funcStack': '/<module>/Net::_call_impl/
   Net::forward/Conv2d::_call_impl(2)/Conv2d::forward/...'}`` (a parent of the op's
   ``{'mod': ..., 'op': ...}`` range): the layer is the chain of module ``forward`` frames,
   each named by its class and the ``(n)`` that DLProf appends to the n-th distinct call site
   of a frame (``Net/Conv2d(2)``); the type is the innermost class. Payloads are read with a
   regular expression, never evaluated. DLProf caches these names by call site, so two
   modules called on one source line share the first one's name (real exports show a
   MaxPool2d under ``Conv2d::forward``); we keep its names as they are.

Phase: the innermost enclosing phase range (``data``, ``forward``, ``backward``,
``optimizer`` in domain ``dlprof-lite``) on the launching thread; else ``backward`` for an op
in a backward module range or backward node (autograd runs backward on its own thread, where
only ``bwd:`` ranges are pushed) and ``forward`` for an op in a module's forward (a or c; a
bare emit_nvtx op name may as well be the optimizer's); else the phase range of the same
process whose time span holds the launch (the latest one started before it); else ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.ingest.columns import categorical_from_codes, used_categorical
from dlprof_lite.numeric import range_positions
from dlprof_lite.rules.names import DDP_BUCKET_RE, DIRECTIONS, DOMAIN, PHASES, parse_module_range
from dlprof_lite.rules.payloads import payload_layer

PHASE_VALUES = (*PHASES, "other")


# "aten::addmm, seq = 8, op_id = 3", "AddmmBackward0, seq = 8", "AddBackward, stashed seq=3"
_SEQ_RE = re.compile(r"^(?P<op>[^,]+), (?P<stashed>stashed )?seq ?= ?(?P<seq>\d+)")
_BACKWARD_NODE_RE = re.compile(r"Backward\d*$")
_NAME_COLUMNS = (
    "module_direction", "module_layer", "module_type",
    "seq_kind", "seq", "op_name", "pyprof_layer", "pyprof_type",
)  # fmt: skip


def classify_range_names(names: Sequence[str]) -> pd.DataFrame:
    """One row per distinct range name: what each layer source reads from it.

    ``seq_kind`` is ``op`` (an emit_nvtx forward op), ``backward`` (a backward node) or None.
    """
    rows = []
    for name in names:
        text = str(name)
        module = parse_module_range(text)
        seq = _SEQ_RE.match(text)
        kind = None
        if seq is not None:
            backward = seq["stashed"] is not None or _BACKWARD_NODE_RE.search(seq["op"])
            kind = "backward" if backward else "op"
        pyprof = payload_layer(text)
        rows.append(
            (
                *(module if module else (None, None, None)),
                kind,
                int(seq["seq"]) if seq else -1,
                seq["op"] if seq else None,
                *(pyprof if pyprof else (None, None)),
            )
        )
    return pd.DataFrame(rows, columns=list(_NAME_COLUMNS), index=pd.Index(names, name="name"))


def _nearest(own: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Position of the nearest ``own`` range among each range and its ancestors (-1: none).

    Pointer jumping: each round looks twice as far up every unresolved chain, so a nesting
    depth d costs log2(d) vectorised rounds, never a loop per range. The general case;
    :func:`_nearest_many` walks consistent nesting levels for several masks in one pass.
    """
    near = np.where(own, np.arange(len(own)), -1)
    jump = parent.copy()
    todo = np.flatnonzero((near < 0) & (jump >= 0))
    for _ in range(64):  # 2**64 levels: a guard against a malformed cyclic parent chain
        if todo.size == 0:
            break
        up = jump[todo]
        near[todo] = near[up]
        jump[todo] = jump[up]
        todo = todo[(near[todo] < 0) & (jump[todo] >= 0)]
    return near


def _levels(parent: np.ndarray, depth: np.ndarray) -> list[np.ndarray] | None:
    """Positions that have a parent, grouped by depth, shallowest first; None where some
    parent is not shallower than its child (then :func:`_nearest` walks the chains)."""
    has = np.flatnonzero(parent >= 0)
    d = depth[has]
    if has.size == 0 or not (depth[parent[has]] < d).all() or d.max() >= 2**15:
        return None
    order = np.argsort(d.astype(np.int16), kind="stable")  # a radix sort on 16-bit keys
    rows, d = has[order], d[order]
    return np.split(rows, np.flatnonzero(np.diff(d)) + 1)


def _nearest_many(
    owns: Sequence[np.ndarray], parent: np.ndarray, levels: list[np.ndarray] | None
) -> list[np.ndarray]:
    """:func:`_nearest` for several ``own`` masks at once, one nesting level at a time.

    Parents are resolved before their children, so each level needs one gather from its
    parents' rows; all masks travel side by side, so a gather fetches one short row.
    """
    if levels is None:
        return [_nearest(own, parent) for own in owns]
    near = np.where(np.column_stack(owns), np.arange(parent.size, dtype=parent.dtype)[:, None], -1)
    for rows in levels:
        mine = near[rows]
        np.copyto(mine, near[parent[rows]], where=mine < 0)
        near[rows] = mine
    return [np.ascontiguousarray(column) for column in near.T]


def _take(codes: npt.NDArray[np.integer], at: np.ndarray) -> npt.NDArray[np.integer]:
    """``codes[at]``, and -1 (none) where ``at`` is -1."""
    if codes.size == 0:
        return np.full(np.shape(at), -1, dtype=np.int64)
    out: npt.NDArray[np.integer] = codes[at]  # at -1 reads the last element: overwritten next
    out[at < 0] = -1
    return out


def _first(*choices: np.ndarray) -> np.ndarray:
    """Element-wise the first code that is not -1."""
    out = choices[0].copy()
    for choice in choices[1:]:
        missing = out < 0
        out[missing] = choice[missing]
    return out


def _encode(info: pd.DataFrame, columns: list[str]) -> tuple[pd.Index, dict[str, np.ndarray]]:
    """One vocabulary for several string columns of ``info``; each column as codes (-1: none).

    Labels travel as integer codes from names to ranges to ops, and become categoricals
    only at the end: no per-op strings.
    """
    codes, vocabulary = pd.factorize(pd.concat([info[c] for c in columns], ignore_index=True))
    codes = codes.astype(np.int32)  # per-range copies of these: half the memory of int64
    n = len(info)
    return pd.Index(vocabulary), {c: codes[i * n : (i + 1) * n] for i, c in enumerate(columns)}


@dataclass(frozen=True)
class RangeLabels:
    """Per range (row order of ``ranges``): codes into ``layers``/``types``, direction codes
    into :data:`DIRECTIONS`, phase codes into :data:`PHASE_VALUES` (-1: none); int32, as
    a profile with a range per kernel holds millions of them.

    What an op launched directly inside the range gets (``layer`` ... ``bucket``), the
    range's own phase (a phase range of ours) and its module direction. Computed once per
    profile (:func:`label_ranges`) for the ops (:func:`assign_layers`) and the ranges'
    own columns (``range_columns.enrich_ranges``)."""

    layers: pd.Index
    types: pd.Index
    layer: np.ndarray
    layer_type: np.ndarray
    direction: np.ndarray
    thread_phase: np.ndarray
    implied_phase: np.ndarray
    bucket: np.ndarray  # id of the enclosing DDP bucket range nearer than any module range
    own_phase: np.ndarray
    module_direction: np.ndarray  # the range's own, recomputes included

    @property
    def phase(self) -> np.ndarray:
        """The phase code an op launched directly inside the range gets from its ranges."""
        return _first(self.thread_phase, self.implied_phase)


def label_ranges(ranges: pd.DataFrame) -> RangeLabels:
    """Every range's :class:`RangeLabels`, one pass over the distinct names and the nesting."""
    if ranges.empty:
        none = np.empty(0, dtype=np.int32)
        return RangeLabels(pd.Index([]), pd.Index([]), *([none] * 8))
    return _range_labels(ranges, _phase_codes(ranges))


def _range_labels(ranges: pd.DataFrame, own_phase: np.ndarray) -> RangeLabels:
    """``own_phase``: each range's own phase code (:func:`_phase_codes`)."""
    names = ranges["name"].astype("category")
    info = classify_range_names(list(names.cat.categories))
    codes = names.cat.codes.to_numpy()
    layers, lcode = _encode(info, ["module_layer", "pyprof_layer", "op_name"])
    types, tcode = _encode(info, ["module_type", "pyprof_type", "op_name"])
    per_range = {f"layer:{c}": _take(v, codes) for c, v in lcode.items()}
    per_range |= {f"type:{c}": _take(v, codes) for c, v in tcode.items()}
    direction_of = info["module_direction"].map(_DIRECTION_CODE).fillna(-1)
    own_direction = _take(direction_of.to_numpy(dtype=np.int32), codes)
    per_range["seq"] = _take(info["seq"].to_numpy(dtype=np.int64), codes)
    kind = info["seq_kind"].map({"op": 0, "backward": 1}).fillna(-1).to_numpy(dtype=np.int32)
    per_range["kind"] = _take(kind, codes)
    parent = _parents(ranges)
    levels = _levels(parent, ranges["depth"].to_numpy(dtype=np.int64))
    owns = {
        "in_bwd": own_direction >= 1,  # bwd: or rec: ranges: a fwd: below is a recompute
        "mod": per_range["layer:module_layer"] >= 0,
        "bwd": per_range["kind"] == 1,
        "pyprof": per_range["layer:pyprof_layer"] >= 0,
        "op": per_range["kind"] == 0,
        "phase": own_phase >= 0,
    }
    bucket_ids = _take(_bucket_ids(names.cat.categories), codes)
    if (bucket_ids >= 0).any():  # a DDP run's gradient all-reduce (annotate/ddp.py)
        owns["bucket"] = bucket_ids >= 0
    near = dict(zip(owns, _nearest_many(list(owns.values()), parent, levels)))
    per_range["module_direction"] = _recompute(own_direction, near["in_bwd"])
    root = _op_roots(owns["op"], near["op"], per_range["seq"], parent)
    near["root"] = _nearest_many([root], parent, levels)[0]
    fwd_layer = _first(*(_take(per_range[f"layer:{c}"], near[k]) for c, _, k in _SOURCES))
    fwd_type = _first(*(_take(per_range[f"type:{t}"], near[k]) for _, t, k in _SOURCES))
    matched = _match_backward(
        ranges, per_range["kind"] == 1, root & (near["bwd"] < 0), per_range["seq"]
    )
    # Inside a backward node (and no module range of ours nearer): the forward op's layer.
    backward = (near["mod"] < 0) & (near["bwd"] >= 0)
    source = _take(matched, near["bwd"])
    direction = np.where(backward, 1, np.where(fwd_layer >= 0, 0, -1))
    direction = np.where(
        near["mod"] >= 0, _take(per_range["module_direction"], near["mod"]), direction
    )
    # Phase implied by the direction: backward always (autograd's thread), forward only inside
    # a module's forward, as a bare op name (aten::add_) may as well be an optimizer's op.
    implied = (direction == 1) | (near["mod"] >= 0) | (near["pyprof"] >= 0)
    implied_phase = np.where(implied & (direction >= 0), _DIRECTION_PHASE[direction], -1)
    layer = np.where(backward, _take(fwd_layer, source), fwd_layer)
    layer_type = np.where(backward, _take(fwd_type, source), fwd_type)
    bucket = np.full(len(parent), -1, dtype=np.int32)
    if "bucket" in near:
        # A bucket's all-reduce runs inside the backward range of whichever layer made its
        # last gradient ready: it is the bucket's work, not that layer's.
        mine = near["bucket"] > near["mod"]  # positions are in start order: nearer is later
        bucket[mine] = bucket_ids[near["bucket"][mine]]
        layer[mine] = layer_type[mine] = direction[mine] = -1
        implied_phase[mine] = PHASE_VALUES.index("backward")
    return RangeLabels(
        layers=layers,
        types=types,
        layer=layer,
        layer_type=layer_type,
        direction=direction.astype(np.int32, copy=False),
        thread_phase=_take(own_phase, near["phase"]),
        implied_phase=implied_phase.astype(np.int32, copy=False),
        bucket=bucket,
        own_phase=own_phase,
        module_direction=per_range["module_direction"],
    )


def _parents(ranges: pd.DataFrame) -> np.ndarray:
    """Each range's parent's row position (-1: top level), as int32 positions."""
    parent = range_positions(
        ranges["range_id"].to_numpy(dtype=np.int64), ranges["parent_id"].to_numpy(dtype=np.int64)
    )
    return parent.astype(np.int32) if len(ranges) < 2**31 else parent


def _bucket_ids(names: pd.Index) -> np.ndarray:
    """Per distinct range name: the id of a ``ddp:bucket:<id>`` range, else -1."""
    found = (DDP_BUCKET_RE.match(str(name)) for name in names)
    return np.array([int(m["id"]) if m else -1 for m in found], dtype=np.int32)


# Forward-side layer sources in priority order: (layer column, type column, nearest key).
_SOURCES = (
    ("module_layer", "module_type", "mod"),
    ("pyprof_layer", "pyprof_type", "pyprof"),
    ("op_name", "op_name", "root"),
)
# Phase code of each direction code (forward -> "forward", backward and recompute ->
# "backward": a recompute runs inside the backward pass); the trailing entry serves
# direction -1 and is masked out.
_DIRECTION_PHASE = np.array(
    [PHASE_VALUES.index(d if d != "recompute" else "backward") for d in DIRECTIONS] + [-1]
)
_DIRECTION_CODE = {d: i for i, d in enumerate(DIRECTIONS)}


def _recompute(own: np.ndarray, near_backward: np.ndarray) -> np.ndarray:
    """Module direction codes with a ``fwd:`` range that has a ``bwd:``/``rec:`` range among
    its ancestors (``near_backward`` >= 0; ancestors share its thread) made a recompute:
    autograd only runs a module's forward inside a backward to recompute a checkpoint."""
    return np.where((own == 0) & (near_backward >= 0), _DIRECTION_CODE["recompute"], own)


def range_layers(labels: RangeLabels) -> tuple[pd.Categorical, pd.Categorical]:
    """Per range (row order): the layer and the phase an op launched directly inside it gets
    (``ranges.layer``/``ranges.phase``; <NA> where an op's phase would come from the time of
    its launch alone: the phase range of the process that holds it)."""
    return (used_categorical(labels.layer, labels.layers),
            categorical_from_codes(labels.phase, list(PHASE_VALUES)))  # fmt: skip


def _op_roots(
    is_op: npt.NDArray[np.bool_], near_op: np.ndarray, seq: np.ndarray, parent: np.ndarray
) -> npt.NDArray[np.bool_]:
    """emit_nvtx forward ops that own their seq: no enclosing op carries the same seq
    (``near_op``: the nearest op among each range and its ancestors)."""
    above = np.where(parent >= 0, near_op[np.maximum(parent, 0)], -1)
    owned: npt.NDArray[np.bool_] = (above >= 0) & (seq[np.maximum(above, 0)] == seq)
    return is_op & ~owned


def _phase_codes(ranges: pd.DataFrame) -> np.ndarray:
    names = ranges["name"].astype("category")
    per_name = [PHASE_VALUES.index(n) if n in PHASES else -1 for n in names.cat.categories]
    codes = _take(np.asarray(per_name, dtype=np.int32), names.cat.codes.to_numpy())
    return np.where((ranges["domain"] == DOMAIN).to_numpy(dtype=bool), codes, -1)


def _match_backward(
    ranges: pd.DataFrame, is_node: np.ndarray, is_root: np.ndarray, seq: np.ndarray
) -> np.ndarray:
    """Per range: position of the forward root op a backward node came from (-1: none)."""
    out = np.full(len(ranges), -1, dtype=np.int32)
    nodes, roots = np.flatnonzero(is_node), np.flatnonzero(is_root)
    if nodes.size == 0 or roots.size == 0:
        return out

    pid, start = ranges["pid"].to_numpy(dtype=np.int64), ranges["start_ns"].to_numpy(dtype=np.int64)

    def keyed(at: np.ndarray) -> pd.DataFrame:
        frame = pd.DataFrame({"pos": at, "pid": pid[at], "seq": seq[at], "start": start[at]})
        return frame.sort_values("start", kind="stable")

    # seq numbers restart per thread and per process; the latest forward op with the node's
    # seq that started before the node in its process is the one that created it.
    pairs = pd.merge_asof(
        keyed(nodes), keyed(roots), on="start", by=["pid", "seq"],
        direction="backward", suffixes=("_node", "_root"),
    )  # fmt: skip
    found = pairs["pos_root"].notna().to_numpy()
    out[pairs["pos_node"].to_numpy()[found]] = pairs["pos_root"].to_numpy()[found].astype(np.int32)
    return out


def assign_layers(
    kernels: pd.DataFrame,
    memops: pd.DataFrame,
    ranges: pd.DataFrame,
    labels: RangeLabels | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Copies of ``kernels`` and ``memops`` with ``layer``, ``layer_type``, ``direction`` and
    ``phase`` (see the module docstring for the rules); ``labels``: :func:`label_ranges` of
    ``ranges``, computed here when not given."""
    labels = label_ranges(ranges) if labels is None else labels
    ids = ranges["range_id"].to_numpy(dtype=np.int64)
    spans = _phase_spans(ranges, labels.own_phase)
    return _label(kernels, ids, labels, spans), _label(memops, ids, labels, spans)


def _phase_spans(ranges: pd.DataFrame, code: np.ndarray) -> pd.DataFrame:
    mine = code >= 0
    spans = pd.DataFrame(
        {
            "pid": ranges["pid"].to_numpy(dtype=np.int64)[mine],
            "start": ranges["start_ns"].to_numpy(dtype=np.int64)[mine],
            "end": ranges["end_ns"].to_numpy(dtype=np.int64)[mine],
            "phase": code[mine],
        }
    )
    return spans.sort_values(["pid", "start"], kind="stable")


def _label(
    ops: pd.DataFrame, ids: np.ndarray, labels: RangeLabels, spans: pd.DataFrame
) -> pd.DataFrame:
    at = range_positions(ids, ops["range_id"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64))
    phase = _first(_take(labels.thread_phase, at), _take(labels.implied_phase, at))
    missing = np.flatnonzero(phase < 0)
    phase[missing] = _span_phase(ops.iloc[missing], spans)
    phase[phase < 0] = PHASE_VALUES.index("other")
    out = ops.copy(deep=False)  # new columns only: the input is never touched
    out["layer"] = used_categorical(_take(labels.layer, at), labels.layers)
    out["layer_type"] = used_categorical(_take(labels.layer_type, at), labels.types)
    out["direction"] = categorical_from_codes(_take(labels.direction, at), list(DIRECTIONS))
    out["phase"] = categorical_from_codes(phase, list(PHASE_VALUES))
    ids = np.unique(labels.bucket[labels.bucket >= 0])  # per range: no pass over the ops
    if ids.size:
        bucket = _take(labels.bucket, at)
        codes = np.where(bucket >= 0, np.searchsorted(ids, bucket), -1)
    else:  # no DDP bucket ranges (nearly every profile)
        codes = np.full(len(at), -1, dtype=np.int8)
    out["ddp_bucket"] = categorical_from_codes(codes, pd.Index(ids, dtype=np.int64))
    return out


def _span_phase(ops: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """Code of the phase range of the op's process whose span holds its launch (-1: none).

    The latest phase range that started at or before the launch is taken; one sorted search
    per process (a handful of ranks), not per op.
    """
    result = np.full(len(ops), -1, dtype=np.int64)
    if spans.empty or ops.empty:
        return result
    launch = ops["api_start_ns"].astype("Int64").fillna(ops["start_ns"].astype("Int64"))
    t = launch.to_numpy(dtype=np.int64)
    pid = ops["pid"].to_numpy(dtype=np.int64)
    for p, mine in spans.groupby("pid", sort=False):
        rows = np.flatnonzero(pid == p)
        starts = mine["start"].to_numpy()
        i = np.searchsorted(starts, t[rows], side="right") - 1
        ok = (i >= 0) & (t[rows] < mine["end"].to_numpy()[np.maximum(i, 0)])
        result[rows[ok]] = mine["phase"].to_numpy()[i[ok]]
    return result
