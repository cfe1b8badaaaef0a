"""The column contract of every DataFrame in a :class:`~dlprof_lite.ingest.profile.Profile`.

Each table's columns are declared once here, with dtype, unit and meaning. The reader must
produce every *base* column; the analysis steps add the *derived* ones. ``check_frame`` is
called when a ``Profile`` is built, so a missing or mistyped column fails early with an
error that names it. Tests and docs/reference/report.md read these declarations too.

Dtypes: ``int64`` (never null), ``int32`` (never null, for values that fit by construction),
``Int64`` (nullable integer, ``<NA>`` where unknown), ``float64``, ``bool``, ``category``
(repeated strings), ``string`` (free text).
Times are nanoseconds on the nsys session clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.errors import SchemaError


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    unit: str
    doc: str
    derived: bool = False


def _c(name: str, dtype: str, unit: str, doc: str) -> Column:
    return Column(name, dtype, unit, doc)


def _d(name: str, dtype: str, unit: str, doc: str) -> Column:
    return Column(name, dtype, unit, doc, derived=True)


# Launch columns shared by kernels and memops: the GPU activity joined to the CUDA API
# call that launched it (correlation id and process; docs/design.md "Kernel ↔ API call").
_GPU_OP_BASE = (
    _c("start_ns", "int64", "ns", "GPU start time"),
    _c("end_ns", "int64", "ns", "GPU end time"),
    _c("dur_ns", "int64", "ns", "GPU duration, end - start"),
    # CUPTI's ids are small counters: 32 bits (the reader refuses wider), 11 MB less at 1M.
    _c("device_id", "int32", "", "CUDA device id"),
    _c("context_id", "int32", "", "CUDA context id"),
    _c("stream_id", "int32", "", "CUDA stream id"),
    _c("pid", "int32", "", "process id (decoded from globalPid: 24 bits)"),
    _c("correlation_id", "int64", "", "CUPTI correlation id, unique within a process"),
    _c("graph_node_id", "Int64", "", "CUDA graph node id when launched from a graph"),
    _c("tid", "Int32", "", "launching thread id (from the launch API call)"),
    _c("api_name", "category", "", "launch API call name, e.g. cudaLaunchKernel_v7000"),
    _c("api_start_ns", "Int64", "ns", "launch API call start"),
    _c("api_end_ns", "Int64", "ns", "launch API call end"),
)

# Columns every analysis step adds to kernels and memops.
_GPU_OP_DERIVED = (
    _d("range_id", "Int32", "", "innermost enclosing NVTX range (ranges.range_id)"),
    _d("range_path", "category", "", "path of the innermost enclosing NVTX range"),
    _d("layer", "category", "", "module (layer) the op belongs to, if any"),
    _d("layer_type", "category", "", "the layer's module type (Conv2d) or op name"),
    _d("direction", "category", "", "forward, backward or recompute for layer ops, else <NA>"),
    _d("phase", "category", "", "data, forward, backward, optimizer, compile or other"),
    _d(
        "ddp_bucket",
        "category",
        "",
        "DDP gradient bucket (the id of its ddp:bucket range) whose "
        "all-reduce launched the op, <NA> otherwise; such an op belongs to no layer (a "
        "category of ids: a byte per op, as most ops have none)",
    ),
    _d("iteration", "Int32", "", "iteration index (0-based), <NA> outside iterations"),
    _d("host_gap_ns", "int64", "ns", "idle GPU time before this op that the CPU caused"),
)

KERNEL_COLUMNS: tuple[Column, ...] = (
    *_GPU_OP_BASE,
    _c("name", "category", "", "demangled kernel name (short name when absent)"),
    _c("short_name", "category", "", "bare kernel name"),
    # The launch configuration (grid, block, registers, shared memory) is not read: no
    # table, page or advice uses it, and its nine columns were 36 MB at 1M kernels.
    *_GPU_OP_DERIVED,
    _d("tc_class", "category", "", "tc, no_tc or unknown (Tensor Core rule table)"),
    _d("uses_tensor_cores", "bool", "", "tc_class == 'tc'"),
    _d("tc_rule", "category", "", "id of the rule that classified the name"),
)

MEMOP_COLUMNS: tuple[Column, ...] = (
    *_GPU_OP_BASE,
    _c("kind", "category", "", "memcpy or memset"),
    _c("copy_kind", "category", "", "HtoD, DtoH, DtoD, HtoH, PtoP, ... (memset: <NA>)"),
    _c("bytes", "int64", "B", "bytes copied or set"),
    _c("src_mem", "category", "", "source memory kind: pageable, pinned, device, ..."),
    _c("dst_mem", "category", "", "destination memory kind (memset: the memory set)"),
    *_GPU_OP_DERIVED,
)

API_COLUMNS: tuple[Column, ...] = (
    _c("start_ns", "int64", "ns", "call start"),
    _c("end_ns", "int64", "ns", "call end"),
    _c("dur_ns", "int64", "ns", "call duration"),
    _c("pid", "int32", "", "process id (24 bits, as every decoded id)"),
    _c("tid", "int32", "", "thread id (24 bits)"),
    _c("correlation_id", "int64", "", "CUPTI correlation id"),
    _c("name", "category", "", "API function name as nsys stores it"),
    _c("source", "category", "", "runtime or driver"),
    # From CUPTI_ACTIVITY_KIND_SYNCHRONIZATION where the export has it (the reader joins it
    # on the call's process and correlation id); missing where it has not.
    _d("sync_stream", "Int32", "", "the stream the call synchronised (cudaStreamSynchronize) "
       "or made wait for an event (cudaStreamWaitEvent); <NA>: none recorded"),
)

RANGE_COLUMNS: tuple[Column, ...] = (
    _c("range_id", "int32", "", "0-based id, in order of start time"),
    _c("name", "category", "", "range text (inline or registered string)"),
    _c("domain", "category", "", "NVTX domain name ('' for the default domain)"),
    _c("style", "category", "", "push_pop or start_end"),
    _c("pid", "int32", "", "process id"),
    _c("tid", "int32", "", "thread that opened the range"),
    _c("start_ns", "int64", "ns", "range start"),
    _c("end_ns", "int64", "ns", "range end (session end when never closed)"),
    _c("closed", "bool", "", "False for a push without a pop"),
    _c("depth", "int32", "", "nesting depth on its thread (0 = top level)"),
    _c("parent_id", "int32", "", "range_id of the enclosing range, -1 at top level"),
    _c(
        "path",
        "category",
        "",
        "names from the top-level range down, joined by '/'; a deep chain's middle is elided "
        "(ingest/paths.py), the whole chain follows parent_id",
    ),
    # Written by nvtx.build_ranges with the nesting (ingest/paths.py, ingest/templates.py).
    _d("path_name", "category", "", "the name its path uses: its own, or its template (digits "
       "as '#') when its siblings' numbers are a counter (rules/templates.py)"),
    _d("path_id", "int32", "", "id of the chain of (path_name, domain) pairs down to this "
       "range"),
    _d("parent_path_id", "int32", "", "path_id of the enclosing range, -1 at top level"),
    # Written by range_columns.enrich_ranges once ops are correlated and classified.
    _d("module_direction", "category", "", "forward, backward or recompute for a module range"),
    _d("layer", "category", "", "layer an op launched directly inside the range gets, if any"),
    _d("phase", "category", "", "phase such an op gets from its ranges; <NA>: from the time alone"),
    _d("gpu_ns", "int64", "ns", "kernel time launched inside the range (nested ranges too)"),
    _d("self_gpu_ns", "int64", "ns", "kernel time whose innermost range is this one"),
    _d("kernels", "int32", "", "kernels launched inside the range (nested ranges too)"),
    _d("memops", "int32", "", "memcpys and memsets launched inside the range"),
    _d("memop_ns", "int64", "ns", "GPU time of those memops"),
    _d("projected_ns", "int64", "ns", "last GPU end - first GPU start of that work, 0 without "
       "GPU work (the span's ends are correlate.range_gpu_totals', not kept: 24 MB a "
       "million ranges that nothing read)"),
    _d("tc_gpu_ns", "int64", "ns", "gpu_ns of kernels that use Tensor Cores"),
)

# NVTX ranges as the reader hands them to ``nvtx.build_ranges`` (no nesting yet).
NVTX_EVENT_COLUMNS: tuple[Column, ...] = (
    _c("start_ns", "int64", "ns", "range start"),
    _c("end_ns", "Int64", "ns", "range end, <NA> when never closed"),
    _c("name", "category", "", "range text (inline or registered string)"),
    _c("domain", "category", "", "NVTX domain name ('' for the default domain)"),
    _c("style", "category", "", "push_pop or start_end"),
    _c("pid", "int32", "", "process id"),
    _c("tid", "int32", "", "thread that opened the range"),
)

MARK_COLUMNS: tuple[Column, ...] = (
    _c("start_ns", "int64", "ns", "mark time"),
    _c("name", "category", "", "mark text"),
    _c("domain", "category", "", "NVTX domain name"),
    _c("pid", "int64", "", "process id"),
    _c("tid", "int64", "", "thread id"),
)

GPU_COLUMNS: tuple[Column, ...] = (
    _c("device_id", "int64", "", "CUDA device id as kernels name it"),
    _c("name", "string", "", "GPU product name"),
    _c("sm_count", "Int64", "", "number of SMs"),
    _c("cc_major", "Int64", "", "compute capability, major"),
    _c("cc_minor", "Int64", "", "compute capability, minor"),
)

ITERATION_COLUMNS: tuple[Column, ...] = (
    _c("iteration", "int64", "", "0-based iteration index in the whole profile"),
    _c("start_ns", "int64", "ns", "step start: its data wait or first forward (annotation); "
       "else the end of the previous key range"),
    _c("end_ns", "int64", "ns", "step end: its last optimizer update's end (annotation); else "
       "the end of this key range"),
    _c("wall_ns", "int64", "ns", "end - start"),
    _c("between_before_ns", "int64", "ns", "previous step's end to this step's start: time "
       "between steps (evaluation, logging, checkpoints); 0 for the first"),
    _c("warmup", "bool", "", "before --iter-start (or the default warm-up)"),
    _c("in_window", "bool", "", "inside the --iter-start/--iter-stop window"),
)

TABLES: dict[str, tuple[Column, ...]] = {
    "kernels": KERNEL_COLUMNS,
    "memops": MEMOP_COLUMNS,
    "api": API_COLUMNS,
    "nvtx_events": NVTX_EVENT_COLUMNS,
    "ranges": RANGE_COLUMNS,
    "marks": MARK_COLUMNS,
    "gpus": GPU_COLUMNS,
    "iterations": ITERATION_COLUMNS,
}


def base_columns(table: str) -> tuple[Column, ...]:
    return tuple(c for c in TABLES[table] if not c.derived)


def _dtype_ok(series: pd.Series, dtype: str) -> bool:
    actual = series.dtype
    if dtype in ("int64", "int32"):
        return actual == dtype
    if dtype in ("Int64", "Int32"):
        return str(actual) == dtype
    if dtype == "float64":
        return actual == "float64"
    if dtype == "bool":
        return actual == "bool"
    if dtype == "category":
        return isinstance(actual, pd.CategoricalDtype)
    if dtype == "string":
        return pd.api.types.is_string_dtype(actual) or pd.api.types.is_object_dtype(actual)
    raise ValueError(f"unknown contract dtype {dtype!r}")


def empty_frame(table: str, *, derived: bool = False) -> pd.DataFrame:
    """An empty frame with the table's columns and dtypes (base only unless ``derived``):
    a copy of one built once (building one costs ~1.5 ms, a copy ~0.03 ms)."""
    return _empty_template(table, derived).copy()


@cache
def _empty_template(table: str, derived: bool) -> pd.DataFrame:
    cols = TABLES[table] if derived else base_columns(table)
    return pd.DataFrame({c.name: pd.Series(dtype=_pandas_dtype(c.dtype)) for c in cols})


# The contract's dtypes as pandas names them (free text is stored as ``object``), typed as
# the literals pandas-stubs accept in ``astype``.
PandasDtype = Literal["int64", "int32", "Int64", "Int32", "float64", "bool", "category", "object"]
_PANDAS_DTYPES: dict[str, PandasDtype] = {
    "int64": "int64", "int32": "int32", "Int64": "Int64", "Int32": "Int32", "float64": "float64",
    "bool": "bool", "category": "category", "string": "object",
}  # fmt: skip


def _pandas_dtype(dtype: str) -> PandasDtype:
    if dtype not in _PANDAS_DTYPES:
        raise ValueError(f"unknown contract dtype {dtype!r}")
    return _PANDAS_DTYPES[dtype]


def categorical_from_codes(
    codes: npt.NDArray[np.integer], categories: Sequence[str] | np.ndarray | pd.Index
) -> pd.Categorical:
    """``pd.Categorical.from_codes`` (-1: missing), typed: pandas-stubs accept the categories
    only as an ``Index``, and pandas turns any list-like into one the same way."""
    index: pd.Index = pd.Index(categories)
    return pd.Categorical.from_codes(codes, categories=index)


def used_categorical(codes: np.ndarray, categories: pd.Index) -> pd.Categorical:
    """A categorical of ``codes`` (-1: missing) keeping only the categories in use, in their
    order: what ``remove_unused_categories`` gives, by counting instead of sorting codes."""
    codes = np.asarray(codes)
    used = np.bincount(codes[codes >= 0], minlength=len(categories)) > 0
    new_code = np.append(np.cumsum(used) - 1, -1)  # old code -> new code; -1 stays -1
    return categorical_from_codes(new_code[codes].astype(np.int32), pd.Index(categories)[used])


def coerce(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Cast the contract's columns of ``frame`` to their declared dtypes (a new frame)."""
    out = frame.copy(deep=False)
    for col in TABLES[table]:
        if col.name in out.columns and not _dtype_ok(out[col.name], col.dtype):
            if col.dtype in ("int32", "Int32"):
                _check_fits_int32(out[col.name], f"{table}.{col.name}")
            out[col.name] = out[col.name].astype(_pandas_dtype(col.dtype))
    return out


def _check_fits_int32(series: pd.Series, name: str) -> None:
    """Refuse a cast that would wrap: numpy's int64 -> int32 keeps the low 32 bits."""
    if len(series) == 0 or not pd.api.types.is_integer_dtype(series.dtype):
        return
    info = np.iinfo(np.int32)
    low, high = series.min(), series.max()
    if (pd.notna(low) and low < info.min) or (pd.notna(high) and high > info.max):
        raise SchemaError(f"{name}: values {low}..{high} do not fit its int32 column")


def check_frame(frame: pd.DataFrame, table: str, *, derived: bool) -> None:
    """Raise :class:`SchemaError` naming the first missing or mistyped column."""
    for col in TABLES[table]:
        if col.derived and not derived:
            continue
        if col.name not in frame.columns:
            raise SchemaError(f"{table}: missing column {col.name!r} ({col.doc})")
        if not _dtype_ok(frame[col.name], col.dtype):
            raise SchemaError(
                f"{table}.{col.name}: dtype {frame[col.name].dtype} is not {col.dtype}"
            )
