"""Ingest step 3: GPU operations ↔ the CUDA API calls that launched them ↔ NVTX ranges.

Pipeline (:mod:`dlprof_lite.ingest.load`): ``read_export`` → ``nvtx.build_ranges`` →
**``attach_launches``** → **``attribute_ranges``** → analyses → ``Profile``.
``range_gpu_totals`` gives the per-range GPU columns that ``range_columns.enrich_ranges``
writes on ``ranges``; ``range_membership`` lists the (op, range) pairs they sum.

Rules (docs/design.md, "Definitions"):

* **Op ↔ API call**: same correlation id *and* same process, nsys' own join
  (``k.globalPid == (r.globalTid & 0xFFFFFFFFFF000000)`` in its ``nvtxkernsum`` and
  ``nvtxgpuproj`` reports); correlation ids repeat across processes. A kernel launched by
  a CUDA graph (``graph_node_id`` set) needs no special case: its correlation id is the one
  of the ``cudaGraphLaunch`` call that ran the graph. The nsys export schema documents
  ``KERNEL.correlationId`` as "ID used to identify the API call that launched the event"
  and ``graphNodeId`` as the node's *creation* id, found through ``CUDA_GRAPH_EVENTS``
  (Nsight Systems 2022.4 User Guide: export schema; example "Find CUDA API calls that
  resulted in original graph node creation"); CUPTI gives graph-node kernels their
  ``cudaGraphLaunch`` call's correlation id (CUPTI release notes, CUDA 13.1 Update 1, a fix
  to "correlation IDs for cudaGraphLaunch API calls and their associated kernel
  launches"). No corpus file has graph-launched kernels: tested on hand-built frames.
* **Duplicate API rows** for one ``(pid, correlation_id)`` (the pipit saxpy export has
  ``cudaLaunchKernel`` *and* ``cudaLaunchKernel_v7000``): keep, in order of preference, a
  name that looks like a launch (:data:`dlprof_lite.rules.apis.LAUNCH_API_PATTERN`), then a
  name with nsys' version suffix (``_v7000``: the record nsys itself writes; the bare twin
  in that file has an unusual ``eventClass`` 67 and wraps the real call), then the earliest
  start, then the longest call, then the first row.
* **Op ↔ NVTX range** (as ``nvtxkernsum``): an op belongs to a push/pop range when its
  launch call *starts* inside that range (closed interval) on the launching thread (nsys
  asks for the whole call inside: the same thing, as a thread cannot push or pop during
  its own call), and to a start/end range when it starts inside it in the same process
  (start/end ranges may end on another thread). The innermost range is the
  latest-starting one containing the launch start (ties: the later ``range_id``); in a
  valid trace, the deepest push/pop range. Push/pop wins over start/end. Inclusive
  membership: the innermost push/pop range's ancestor chain plus every start/end range of
  the process containing the launch start. Ops with no API row have no range.

All joins are sorted searches over int64 keys, never an interval cross join.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.ingest.columns import used_categorical
from dlprof_lite.ingest.levels import accumulate_up, by_level, consistent_depth
from dlprof_lite.ingest.nvtx import PUSH_POP, pair_key, value_offsets
from dlprof_lite.ingest.raw import LAUNCH_COLUMNS
from dlprof_lite.numeric import last_at_least, range_positions, sum_by
from dlprof_lite.rules.apis import LAUNCH_API_PATTERN, VERSION_SUFFIX_PATTERN


def attach_launches(ops: pd.DataFrame, api: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with :data:`~dlprof_lite.ingest.raw.LAUNCH_COLUMNS` from their API call.

    Launch columns are <NA> where the API call is missing (a windowed export, API tracing
    off). Existing launch columns are replaced; they go right after ``graph_node_id``.
    """
    op_key, api_key = _keys(
        (ops["pid"], ops["correlation_id"]), (api["pid"], api["correlation_id"])
    )
    rows = _one_api_row_per_launch(api, api_key)  # sorted by key, keys unique
    match = np.full(op_key.size, -1, dtype=np.int64)
    if rows.size:
        at = np.minimum(np.searchsorted(api_key[rows], op_key), rows.size - 1)
        match = np.where(api_key[rows[at]] == op_key, rows[at], -1)
    miss = match < 0
    safe = np.maximum(match, 0)  # any row where missing: masked below

    def gather(col: str) -> np.ndarray:
        values = api[col].to_numpy() if col != "name" else np.asarray(api[col].array.codes)
        return values[safe] if values.size else np.zeros(safe.size, dtype=values.dtype)

    names = api["name"].array
    launch = {
        "tid": pd.arrays.IntegerArray(gather("tid").astype(np.int32), miss),
        "api_name": used_categorical(np.where(miss, -1, gather("name")), names.categories),
        "api_start_ns": pd.arrays.IntegerArray(gather("start_ns").astype(np.int64), miss),
        "api_end_ns": pd.arrays.IntegerArray(gather("end_ns").astype(np.int64), miss),
    }
    base = ops.drop(columns=[c for c in LAUNCH_COLUMNS if c in ops.columns])
    # Column labels are unique, so get_loc gives an int (a slice or mask only for duplicates).
    gap = base.shape[1]
    if "graph_node_id" in base:
        gap = cast(int, base.columns.get_loc("graph_node_id")) + 1
    cols = [*base.columns[:gap], *LAUNCH_COLUMNS, *base.columns[gap:]]
    # Column by column into a new frame without copying the kept ones (assign and [cols]
    # each copied every column of the ops: +77 MB at 1M kernels).
    return pd.DataFrame({c: launch[c] if c in launch else base[c] for c in cols},
                        index=base.index, copy=False)


def _one_api_row_per_launch(api: pd.DataFrame, key: np.ndarray) -> np.ndarray:
    """Positions of ``api`` rows in ``key`` order, one per key (preference: module doc)."""
    order = np.argsort(key)
    sorted_key = key[order]
    same = sorted_key[1:] == sorted_key[:-1]
    dup = np.r_[same, False] | np.r_[False, same]
    if not dup.any():
        return order
    at = np.flatnonzero(dup)  # duplicate groups, as positions in key order
    cand = order[at]
    names = api["name"].array
    cats, codes = names.categories.astype(str), np.asarray(names.codes)[cand]
    launch = _take(np.asarray(cats.str.contains(LAUNCH_API_PATTERN)), codes, False)
    versioned = _take(np.asarray(cats.str.contains(VERSION_SUFFIX_PATTERN)), codes, False)
    start = api["start_ns"].to_numpy(dtype=np.int64)[cand]
    end = api["end_ns"].to_numpy(dtype=np.int64)[cand]
    # lexsort's last key is primary; the row position breaks the last ties.
    best = at[np.lexsort((cand, -end, start, ~versioned, ~launch, key[cand]))]
    keep: npt.NDArray[np.bool_] = ~dup
    keep[best[np.r_[True, sorted_key[best][1:] != sorted_key[best][:-1]]]] = True
    return order[keep]


def attribute_ranges(ops: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """``ops`` with ``range_id`` (Int64) and ``range_path`` (category) of the innermost range.

    Both are <NA> for an op launched outside every range or with no launch call.
    """
    table = _RangeTable.of(ranges)
    inner = _innermost(*_innermost_by_style(_Launches.of(ops), table, len(ops)))
    paths = ranges["path"].array
    path_codes = _take(np.asarray(paths.codes, dtype=np.int64), inner, -1)
    found = {
        "range_id": pd.arrays.IntegerArray(_take(table.ids, inner, 0).astype(np.int32), inner < 0),
        "range_path": pd.Categorical.from_codes(path_codes, dtype=paths.dtype),
    }
    out = ops.drop(columns=[c for c in found if c in ops.columns])
    return out.assign(**{c: pd.Series(v, index=out.index) for c, v in found.items()})


def range_membership(ops: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """Every ``(op_index, range_id)`` an op counts in inclusively; op_index is positional.

    Sorted by ``op_index``, then ``range_id``.
    """
    table = _RangeTable.of(ranges)
    op_index, pos = _membership(ops, _innermost_positions(ops, table)[0], table)
    rank = np.empty(table.size, dtype=np.int64)
    rank[table.order] = np.arange(table.size)
    # Pairs arrive as a few runs already ascending by op: a stable sort merges them fast.
    order = np.argsort(op_index * max(table.size, 1) + rank[pos], kind="stable")
    return pd.DataFrame({"op_index": op_index[order], "range_id": table.ids[pos[order]]})


def range_gpu_totals(
    kernels: pd.DataFrame, memops: pd.DataFrame, ranges: pd.DataFrame
) -> pd.DataFrame:
    """GPU work per range, one row per row of ``ranges`` in its order: inclusive and self
    kernel time, counts, projected span, and inclusive Tensor Core kernel time.

    ``gpu_start_ns``/``gpu_end_ns`` are <NA> and ``projected_ns`` is 0 for a range with
    no GPU work. ``self_gpu_ns`` counts kernels whose innermost range is this one;
    ``tc_gpu_ns`` the kernels flagged ``uses_tensor_cores`` (0 where the flag is absent).

    Inclusive totals are :func:`range_membership` summed, without listing its pairs: each
    op is added to its innermost push/pop range, sums are passed up the nesting one level
    at a time, then the start/end pairs are added. Ops x depth pairs would not fit in
    memory for a trace nested thousands deep.
    """
    table = _RangeTable.of(ranges)
    n = table.size
    k_pp, k_se = _innermost_positions(kernels, table)
    m_pp = _innermost_positions(memops, table)[0]
    k_dur, m_dur = (f["dur_ns"].to_numpy(dtype=np.int64) for f in (kernels, memops))
    tc = (
        kernels["uses_tensor_cores"].to_numpy(dtype=bool, na_value=False)
        if "uses_tensor_cores" in kernels.columns
        else np.zeros(len(kernels), dtype=bool)
    )
    # Per column of _INCLUSIVE (gpu_ns, kernels, memops, memop_ns, tc_gpu_ns): a value per
    # op, _COUNT (one each) or None (nothing); no ops x columns matrix (80 MB at 1M kernels).
    k_val = (k_dur, _COUNT, None, None, np.where(tc, k_dur, 0))
    m_val = (None, None, _COUNT, m_dur, None)
    sums = np.zeros((len(_INCLUSIVE), n), dtype=np.int64)  # one contiguous row per column
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    ops = ((kernels, k_val, k_pp), (memops, m_val, m_pp))
    for frame, val, pp in ops:
        op = np.flatnonzero(pp >= 0)
        _add_ops(sums, first, last, pp[op], val, frame, op)
        del op
    # Before the sums go up: kernel time whose innermost range is this push/pop range.
    own = sums[_INCLUSIVE.index("gpu_ns")].copy()
    se_own = np.flatnonzero((k_se >= 0) & (k_pp < 0))  # innermost: a start/end range
    own += sum_by(k_se[se_own], k_dur[se_own], n)
    depth = consistent_depth(table.parent, ranges["depth"].to_numpy(dtype=np.int64))
    accumulate_up(table.parent, by_level(depth), sums, first, last)
    for frame, val, _ in ops:  # start/end ranges parent nothing: added after the pass
        op, pos = _start_end_pairs(frame, table)
        _add_ops(sums, first, last, pos, val, frame, op)
    busy = last >= first  # any GPU work at all
    total = dict(zip(_INCLUSIVE, sums, strict=True))
    return pd.DataFrame(
        {
            "range_id": table.ids,
            "gpu_ns": total["gpu_ns"],
            "self_gpu_ns": own,
            "kernels": total["kernels"],
            "memops": total["memops"],
            "memop_ns": total["memop_ns"],
            "gpu_start_ns": pd.arrays.IntegerArray(np.where(busy, first, 0), ~busy),
            "gpu_end_ns": pd.arrays.IntegerArray(np.where(busy, last, 0), ~busy),
            "projected_ns": np.where(busy, last - first, 0),
            "tc_gpu_ns": total["tc_gpu_ns"],
        },
        copy=False,
    )


_INCLUSIVE = ("gpu_ns", "kernels", "memops", "memop_ns", "tc_gpu_ns")
_COUNT = "count"  # a column that counts the ops
_Values = tuple[np.ndarray | str | None, ...]


def _add_ops(
    sums: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    pos: np.ndarray,
    values: _Values,
    ops: pd.DataFrame,
    op: np.ndarray,
) -> None:
    """Add ops (rows ``op`` of ``ops``; ``values``: per column, its value per row of
    ``ops``, _COUNT or None) to the ranges at ``pos``."""
    for column, value in zip(sums, values, strict=True):
        if isinstance(value, np.ndarray):  # 1-D exact int64 sums: the fast path of ufunc.at
            column += sum_by(pos, value[op], column.size)
        elif value == _COUNT:
            column += np.bincount(pos, minlength=column.size)
    np.minimum.at(first, pos, ops["start_ns"].to_numpy(dtype=np.int64)[op])
    np.maximum.at(last, pos, ops["end_ns"].to_numpy(dtype=np.int64)[op])


# --- ranges as arrays -------------------------------------------------------------------


@dataclass(frozen=True)
class _RangeTable:
    """The columns of ``ranges`` the searches need, by position; parents as positions."""

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    parent: np.ndarray
    push_pop: np.ndarray
    order: np.ndarray  # positions sorted by range_id (= start order)

    @property
    def size(self) -> int:
        return self.ids.size

    @classmethod
    def of(cls, ranges: pd.DataFrame) -> _RangeTable:
        ids = ranges["range_id"].to_numpy(dtype=np.int64)
        parent = range_positions(ids, ranges["parent_id"].to_numpy(dtype=np.int64))
        return cls(
            ids=ids,
            start=ranges["start_ns"].to_numpy(dtype=np.int64),
            end=ranges["end_ns"].to_numpy(dtype=np.int64),
            pid=ranges["pid"].to_numpy(dtype=np.int64),
            tid=ranges["tid"].to_numpy(dtype=np.int64),
            parent=parent.astype(np.int64),
            push_pop=(ranges["style"] == PUSH_POP).to_numpy(dtype=bool),
            order=np.argsort(ids, kind="stable"),
        )


def _innermost_positions(ops: pd.DataFrame, table: _RangeTable) -> tuple[np.ndarray, np.ndarray]:
    """Innermost push/pop and start/end range positions per op, from the ``range_id`` that
    :func:`attribute_ranges` already set when there is one (no second search)."""
    if "range_id" not in ops.columns:
        return _innermost_by_style(_Launches.of(ops), table, len(ops))
    inner = range_positions(table.ids, ops["range_id"].to_numpy(dtype=np.int64, na_value=-1))
    is_pp = np.zeros(inner.size, dtype=bool)
    has = np.flatnonzero(inner >= 0)
    is_pp[has] = table.push_pop[inner[has]]
    del has
    # A start/end innermost means no push/pop range held the launch.
    start_end = np.where(is_pp, -1, inner)
    inner[~is_pp] = -1  # our own array (range_positions' result): no second copy
    return inner, start_end


@dataclass(frozen=True)
class _Launches:
    """Ops that have a launch call: their positions, process, thread and call start."""

    rows: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    t: np.ndarray

    @classmethod
    def of(cls, ops: pd.DataFrame) -> _Launches:
        ok = (ops["tid"].notna() & ops["api_start_ns"].notna()).to_numpy(dtype=bool)
        rows = np.flatnonzero(ok)
        return cls(
            rows=rows,
            pid=ops["pid"].to_numpy(dtype=np.int64)[rows],
            tid=ops["tid"].to_numpy(dtype=np.int64, na_value=0)[rows],
            t=ops["api_start_ns"].to_numpy(dtype=np.int64, na_value=0)[rows],
        )


def _innermost(push_pop: np.ndarray, start_end: np.ndarray) -> np.ndarray:
    """Per op, the position of its innermost range (push/pop first), or -1."""
    return np.where(push_pop >= 0, push_pop, start_end)


def _innermost_by_style(
    q: _Launches, table: _RangeTable, n_ops: int
) -> tuple[np.ndarray, np.ndarray]:
    """Innermost push/pop range on the launching thread, start/end range in the process."""
    sorted_pos = table.order
    pp = sorted_pos[table.push_pop[sorted_pos]]
    se = sorted_pos[~table.push_pop[sorted_pos]]
    range_thread, op_thread = _keys((table.pid[pp], table.tid[pp]), (q.pid, q.tid))
    out_pp = np.full(n_ops, -1, dtype=np.int64)
    out_se = np.full(n_ops, -1, dtype=np.int64)
    out_pp[q.rows] = _latest_containing(pp, range_thread, table, op_thread, q.t)
    out_se[q.rows] = _latest_containing(se, table.pid[se], table, q.pid, q.t)
    return out_pp, out_se


def _latest_containing(
    pos: np.ndarray, key: np.ndarray, table: _RangeTable, q_key: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """For each query, the last range of ``pos`` (in range order) with the query's key and
    ``start <= t <= end``, as a position into ``table``; -1 when there is none."""
    if pos.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    by_key = np.argsort(key, kind="stable")  # pos is in range order: keep it inside a key
    pos, key = pos[by_key], key[by_key]
    (r_comp, q_comp), scale = _encode((key, table.start[pos]), (q_key, t))
    if (np.diff(r_comp) < 0).any():  # ids not in start order (not from build_ranges)
        again = np.lexsort((table.ids[pos], r_comp))
        pos, r_comp = pos[again], r_comp[again]
    hi = np.searchsorted(r_comp, q_comp, side="right")  # ranges of the key starting <= t
    first = np.searchsorted(r_comp, np.arange(int(r_comp[-1] // scale) + 2) * scale)
    lo = first[np.minimum(q_comp // scale, first.size - 1)]  # the key's first range
    j = last_at_least(table.end[pos], lo, hi, t)
    return np.where(j >= 0, pos[np.maximum(j, 0)], -1)


def _membership(
    ops: pd.DataFrame, push_pop: np.ndarray, table: _RangeTable
) -> tuple[np.ndarray, np.ndarray]:
    """``(op_index, range position)`` pairs: the ancestor chain of each op's innermost
    push/pop range (``push_pop``, from :func:`_innermost_by_style`) + start/end ranges."""
    op_parts, pos_parts = [], []
    op = np.flatnonzero(push_pop >= 0)
    cur = push_pop[op]
    for _ in range(table.size):  # walk up one level per pass; bounded even for bad parents
        if cur.size == 0:
            break
        op_parts.append(op)
        pos_parts.append(cur)
        up = table.parent[cur]
        op, cur = op[up >= 0], up[up >= 0]
    se_op, se_pos = _start_end_pairs(ops, table)
    return np.concatenate([*op_parts, se_op]), np.concatenate([*pos_parts, se_pos])


def _start_end_pairs(ops: pd.DataFrame, table: _RangeTable) -> tuple[np.ndarray, np.ndarray]:
    """Every (op, start/end range of its process containing its launch start), by op.

    Start/end ranges overlap arbitrarily, so each range collects the ops in its interval
    from its process's ops sorted by launch start: two searches per range. One process at
    a time, and launch starts are usually in order already (no sort): an epoch range over
    1M kernels cost +138 MB of temporaries as one joint sort of (pid, start) codes.
    """
    se = np.flatnonzero(~table.push_pop)
    if se.size == 0 or len(ops) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    launched = (ops["tid"].notna() & ops["api_start_ns"].notna()).to_numpy(dtype=bool)
    pid = ops["pid"].to_numpy(dtype=np.int64)
    start = ops["api_start_ns"].to_numpy(dtype=np.int64, na_value=0)
    op_parts, pos_parts = [], []
    for process in np.unique(table.pid[se]):
        mine = se[table.pid[se] == process]
        rows = np.flatnonzero(launched & (pid == process))
        t = start[rows]
        if not bool((t[1:] >= t[:-1]).all()):
            by_time = np.argsort(t, kind="stable")
            rows, t = rows[by_time], t[by_time]
        lo = np.searchsorted(t, table.start[mine], side="left")
        count = np.maximum(np.searchsorted(t, table.end[mine], side="right") - lo, 0)
        op_parts.append(rows[_spans(lo, count)])
        pos_parts.append(np.repeat(mine, count))
    op, pos = np.concatenate(op_parts), np.concatenate(pos_parts)
    if not bool((op[1:] >= op[:-1]).all()):
        by_op = np.argsort(op, kind="stable")  # one more ascending run for range_membership
        op, pos = op[by_op], pos[by_op]
    return op, pos


def _spans(lo: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The positions ``lo[i] .. lo[i] + count[i] - 1`` of every span, concatenated."""
    first = np.repeat(lo - (np.cumsum(count) - count), count)
    first += np.arange(first.size, dtype=np.int64)
    return first


# --- sorted-search helpers --------------------------------------------------------------


def _keys(*pairs: tuple[object, object]) -> list[np.ndarray]:
    """:func:`~dlprof_lite.ingest.nvtx.pair_key` over several frames, encoded jointly."""
    firsts = [np.asarray(a, dtype=np.int64) for a, _ in pairs]
    seconds = [np.asarray(b, dtype=np.int64) for _, b in pairs]
    joint = pair_key(np.concatenate(firsts), np.concatenate(seconds))
    return np.split(joint, np.cumsum([a.size for a in firsts])[:-1])


def _encode(*pairs: tuple[np.ndarray, np.ndarray]) -> tuple[list[np.ndarray], int]:
    """``(key, value)`` pairs → int64 ``code(key) * scale + offset(value)``, jointly.

    Sorting by the composite sorts by key, then value, so one ``searchsorted`` answers
    "within this key" questions for every key at once.
    """
    codes, uniq = pd.factorize(np.concatenate([k for k, _ in pairs]), sort=True)
    offset, scale = value_offsets(np.concatenate([v for _, v in pairs]), len(uniq))
    joint = codes.astype(np.int64) * scale + offset
    return np.split(joint, np.cumsum([k.size for k, _ in pairs])[:-1]), scale


def _take(values: np.ndarray, index: np.ndarray, fill: int) -> np.ndarray:
    """``values[index]`` with ``fill`` where ``index`` is -1 (works on empty ``values``)."""
    if values.size == 0:
        return np.full(index.shape, fill, dtype=values.dtype)
    taken: np.ndarray = values[np.maximum(index, 0)]
    return np.where(index >= 0, taken, fill)

