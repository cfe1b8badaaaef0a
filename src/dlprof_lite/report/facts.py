"""Summary metrics the advice rules test: copies, synchronizations, kernel size, TC misses.

Each rule of nsys's expert system that we follow is applied here with the same selection
(see the citations in :data:`dlprof_lite.report.metrics.THRESHOLDS`); the advice module then
only compares these numbers with thresholds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.intervals import covered_between, merge, total
from dlprof_lite.report.model import analysed
from dlprof_lite.report.overhead import is_short_kernel
from dlprof_lite.rules.advice import threshold
from dlprof_lite.rules.apis import SYNC_APIS
from dlprof_lite.rules.gemm import is_fp32_gemm


def memcpy_facts(memops: pd.DataFrame) -> dict[str, int]:
    """Synchronous copies (nsys cuda-sync-memcpy) and async copies on pageable memory
    (nsys cuda-async-memcpy)."""
    api = memops["api_name"]
    memcpy_api = cat_mask(api, lambda s: s.str.startswith("cudaMemcpy"))
    async_api = cat_mask(api, lambda s: s.str.contains("Async", regex=False))
    kind = memops["copy_kind"]
    small = threshold("sync_memcpy_small_htod_bytes")
    exempt = ((kind == "HtoD") & (memops["bytes"] <= small)) | (kind == "DtoD")
    sync = memcpy_api & ~exempt.to_numpy(dtype=bool) & ~async_api
    pageable = (memops["src_mem"] == "pageable") | (memops["dst_mem"] == "pageable")
    pageable_async = memcpy_api & async_api & pageable.to_numpy(dtype=bool)
    dur = memops["dur_ns"]
    return {
        "sync_memcpy_count": int(sync.sum()),
        "sync_memcpy_ns": int(dur[sync].sum()),
        "pageable_async_count": int(pageable_async.sum()),
        "pageable_async_ns": int(dur[pageable_async].sum()),
    }


def sync_api_facts(
    api: pd.DataFrame,
    iterations: pd.DataFrame,
    session: tuple[int, int],
    session_scope: str = "session",
) -> dict[str, object]:
    """cudaDeviceSynchronize/cudaStreamSynchronize calls (nsys cuda-sync-api): how many, the
    time threads spent in them, and the share of the analysed steps (without iterations, of
    ``session``: the session, or the events' span named by ``session_scope``) during which
    some thread was inside one (``sync_api_scope`` names which).

    Time is a union of intervals, never a sum of durations: duplicated rows or calls that
    overlap (several threads, nested driver calls) count each instant once, so the share
    stays within 0-100 %. ``sync_api_ns`` unites per thread and sums over threads.
    """
    mask = cat_mask(api["name"], lambda s: s.str.startswith(SYNC_APIS))
    calls = api[mask]
    starts = calls["start_ns"].to_numpy(dtype=np.int64)
    ends = calls["end_ns"].to_numpy(dtype=np.int64)
    threads = (calls["pid"].to_numpy(dtype=np.int64) << 32) ^ calls["tid"].to_numpy(np.int64)
    per_thread = sum(
        total(merge(starts[threads == t], ends[threads == t])) for t in np.unique(threads)
    )
    union = merge(starts, ends)
    window = analysed(iterations)
    if len(window):
        t0, t1 = window["start_ns"].to_numpy(np.int64), window["end_ns"].to_numpy(np.int64)
        scope = "iterations"
    else:
        t0, t1 = np.array([session[0]], np.int64), np.array([session[1]], np.int64)
        scope = session_scope
    part, whole = int(covered_between(union, t0, t1).sum()), int(np.maximum(t1 - t0, 0).sum())
    return {
        "sync_api_calls": len(calls),
        "sync_api_ns": int(per_thread),
        "sync_api_pct": part / whole * 100.0 if whole else None,
        "sync_api_scope": scope if whole else None,
    }


def kernel_facts(kernels: pd.DataFrame) -> dict[str, object]:
    dur = kernels["dur_ns"].to_numpy(dtype="int64")
    return {
        "kernel_median_ns": float(np.median(dur)) if len(dur) else None,
        "short_launches": int(is_short_kernel(kernels).sum()),
    }


def tc_miss_facts(layers: pd.DataFrame, kernel_ns: int) -> dict[str, object]:
    """GPU time of Tensor-Core-eligible layers spent in GEMM and convolution kernels that use
    no Tensor Cores (``tc_miss_gpu_ns``: not the layout, cast and copy kernels around them)."""
    eligible = layers[layers["tc_eligible"].fillna(False).to_numpy(dtype=bool)]
    miss = int(eligible["tc_miss_gpu_ns"].sum())
    return {
        "eligible_non_tc_ns": miss,
        "eligible_non_tc_share": miss / kernel_ns if kernel_ns else None,
    }


def fp32_gemm_facts(kernels: pd.DataFrame, kernel_ns: int) -> dict[str, object]:
    """GPU time of FP32 GEMM/conv kernels on CUDA cores, by kernel name (one rule lookup per
    distinct name), and the three largest such kernels for the advice's evidence."""
    fp32 = cat_mask(kernels["name"], lambda s: s.map(is_fp32_gemm)) & ~kernels[
        "uses_tensor_cores"
    ].to_numpy(dtype=bool)
    dur = kernels["dur_ns"][fp32]
    total = int(dur.sum())
    top = dur.groupby(kernels["short_name"][fp32], observed=True).sum().nlargest(3)
    return {
        "fp32_gemm_ns": total,
        "fp32_gemm_share": total / kernel_ns if kernel_ns else None,
        "fp32_gemm_kernels": [{"name": str(n), "gpu_ns": int(v)} for n, v in top.items()],
    }
