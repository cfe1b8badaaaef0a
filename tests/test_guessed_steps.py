"""Guessed step ranges must be steps (issue 26, item 2): the step test of ingest/step_guess.py.

Without the annotation's steps and without ``--key-range``, a guessed key (numbered ranges,
root-model calls, the most-repeated range) is accepted only when its iterations after the
first hold >= 50 % of the GPU busy time (CPU-only: of the main thread's annotated time), have
a median >= 100 µs and a CV <= 1, and are no library's own ranges. Real cases: cuDF's
``null_count`` (libcudf), nvFuser's compile-time ``FusionCache::get``, cuBLAS's
``cublasSgemmEx``, TensorRT's ``ExecutionContext::enqueue``. A user's own numbered ranges
still count, whatever their timing (only a library's are refused): edited copies of the
TensorRT export (in ``tmp_path``) add ``iteration N`` ranges around its whole run, ``step N``
ranges around its first moments, and the same in TensorRT's own domain (refused).
Oracles: our own SQL on the exports and plain Python arithmetic, never the code under test.
"""

from __future__ import annotations

import shutil
import sqlite3
import statistics
from contextlib import closing
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.ingest.iterations import choose_iterations
from dlprof_lite.ingest.step_guess import Verdict, Work, union
from dlprof_lite.rules.libraries import LIBRARY_DOMAINS, library_of

CUDF = CORPUS / "quasiben__nvtx-examples__cudf.sqlite"
FUSER = CORPUS / "NVIDIA__Fuser__report1.sqlite"
CUBLAS = CORPUS / "VerticalResearchGroup__casio__nerf_output-file.sqlite"
TRT = CORPUS / (
    "NVIDIA__trt-samples-for-hackathon-cn__cookbook_09-Advance_MultiStream_calculation-bound"
    ".qdrep.sqlite"
)
CENTERFORMER = CORPUS / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET")  # fmt: skip


def query(path: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return con.execute(sql, args).fetchall()


def rejected(path: Path) -> dict[str, Verdict]:
    profile = dlprof_lite.load(path)
    work = Work(profile.kernels, profile.memops, profile.ranges)
    found = choose_iterations(profile.ranges, profile.marks, work=work)
    return {v.name: v for v in found.rejected}


def key_node_walls(path: Path, name: str) -> list[int]:
    """Iteration walls of the key-node rule for the top-level ranges ``name`` of its busiest
    thread, by SQL and the obvious loops: the differences of consecutive instance ends (the
    first instance is its own iteration); top-level: no other range of its thread holds it."""
    rows = query(path, "SELECT n.globalTid, n.start, n.end, COALESCE(n.text, s.value) "
                       "FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                       "WHERE n.eventType = 59 AND n.end IS NOT NULL")  # fmt: skip
    threads: dict[int, list[int]] = {}
    for i, (tid, a, b, text) in enumerate(rows):
        held = any(t == tid and c <= a and b <= d and j != i
                   for j, (t, c, d, _) in enumerate(rows))  # fmt: skip
        if text == name and not held:
            threads.setdefault(tid, []).append(b)
    ends = sorted(max(threads.values(), key=len))
    return [b - a for a, b in pairwise(ends)]


def one_warning(report: dlprof_lite.Report) -> str:
    """The one line about iterations: the candidates, never a second 'no iterations' line."""
    lines = [w for w in report.summary.warnings if w.startswith("no iterations")]
    assert len(lines) == 1, lines
    return lines[0]


# -- the corpus: library ranges are no steps --------------------------------------------------


@pytest.mark.corpus
def test_cudf_null_count_is_no_step(corpus_dir: Path) -> None:
    walls = key_node_walls(CUDF, "null_count")
    median, cv = statistics.median(walls), statistics.stdev(walls) / statistics.mean(walls)
    assert median < 100_000 and cv > 1  # the oracle: 1.5 µs, CV 557 %
    verdict = rejected(CUDF)["null_count"]
    assert (verdict.median_ns, verdict.cv) == (pytest.approx(median), pytest.approx(cv))
    assert verdict.library == "cuDF" and not verdict.accepted
    report = dlprof_lite.analyze(CUDF)
    assert report.iterations.empty and report.summary["key_range_source"] == "none"
    assert report.summary["window_scope"] == "no-iterations"
    line = one_warning(report)
    assert "candidates:" in line and "--key-range '^DATAFRAME_COPY$'" in line
    # The top kernels are the whole run's now, not one 1.5 µs iteration's.
    assert report.kernels["instances"].sum() == len(dlprof_lite.load(CUDF).kernels)
    # --key-range still chooses any range, a library's included (at any depth: more).
    chosen = dlprof_lite.load(CUDF, key_range="^null_count$")
    assert chosen.meta.key_range_source == "key-range"
    assert len(chosen.iterations) > len(walls) + 1


@pytest.mark.corpus
def test_nvfuser_compile_ranges_are_no_step(corpus_dir: Path) -> None:
    found = rejected(FUSER)
    verdict = found["FusionCache::get"]
    assert verdict.library == "nvFuser" and not verdict.accepted
    assert verdict.coverage < 0.5  # compile time: the GPU is idle in it
    report = dlprof_lite.analyze(FUSER)
    assert report.iterations.empty
    assert "'FusionCache::get' (nvFuser's own range;" in one_warning(report)


@pytest.mark.corpus
def test_cublas_api_ranges_are_no_step(corpus_dir: Path) -> None:
    verdict = rejected(CUBLAS)["cublasSgemmEx"]
    assert verdict.library == "cuBLAS" and verdict.cv is not None and verdict.cv > 1
    walls = key_node_walls(CUBLAS, "cublasSgemmEx")
    assert verdict.median_ns == pytest.approx(statistics.median(walls))
    report = dlprof_lite.analyze(CUBLAS)
    assert report.iterations.empty
    assert "--key-range '^cublasSgemmEx$'" in one_warning(report)


@pytest.mark.corpus
def test_a_cpu_only_profile_is_judged_on_its_main_thread(corpus_dir: Path) -> None:
    """No GPU work: the share is of the main thread's annotated time (top-level ranges)."""
    profile = dlprof_lite.load(CENTERFORMER)
    assert profile.kernels.empty and profile.meta.key_range_source == "most-repeated"
    table = profile.iterations
    rows = query(CENTERFORMER, "SELECT globalTid, start, end FROM NVTX_EVENTS "
                               "WHERE eventType = 59 AND end IS NOT NULL")  # fmt: skip
    # Top-level ranges of the thread with the most: those no other range of it holds.
    by_thread: dict[int, list[tuple[int, int]]] = {}
    for tid, a, b in rows:
        by_thread.setdefault(tid, []).append((a, b))
    spans = max(by_thread.values(), key=lambda r: sum(b - a for a, b in _merged(r)))
    merged = _merged(spans)
    t0, t1 = int(table["start_ns"].iloc[1]), int(table["end_ns"].iloc[-1])
    inside = sum(max(0, min(b, t1) - max(a, t0)) for a, b in merged)
    assert inside / sum(b - a for a, b in merged) >= 0.5


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of intervals, the obvious way (the oracle of step_guess.union)."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def test_union_is_the_obvious_union() -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 10_000, 300)
    ends = starts + rng.integers(0, 200, 300)
    s, e = union(starts, ends)
    assert list(zip(s.tolist(), e.tolist())) == [(a, b) for a, b in _merged(
        [(int(a), int(b)) for a, b in zip(starts, ends) if b > a])]  # fmt: skip


# -- a user's own numbered ranges, added to a copy of the TensorRT export ---------------------


def _thread_ranges(path: Path) -> tuple[int, list[tuple[int, int]]]:
    """The TensorRT thread and its ranges (start, end)."""
    rows = query(path, "SELECT globalTid, start, end FROM NVTX_EVENTS "
                       "WHERE eventType = 59 AND end IS NOT NULL")  # fmt: skip
    return int(rows[0][0]), [(int(a), int(b)) for _, a, b in rows]


def _outside(t: int, ranges: list[tuple[int, int]]) -> int:
    """``t``, moved before any range it would cut (so nesting stays as it was)."""
    for a, b in ranges:
        if a < t < b:
            t = a - 1
    return t


def _gpu_span(path: Path) -> tuple[int, int]:
    lo, hi = [], []
    for table in GPU_TABLES:
        [(a, b)] = query(path, f"SELECT MIN(start), MAX(end) FROM {table}")
        lo.append(a)
        hi.append(b)
    return min(lo), max(hi)


def _with_numbered(
    tmp_path: Path, word: str, lo: int, hi: int, count: int, domain: int = 0
) -> Path:
    """A copy of the TensorRT export with ``count`` ranges ``<word> N`` tiling [lo, hi] on
    its TensorRT thread, in the default domain (``domain`` 1: TensorRT's own)."""
    path = tmp_path / f"{word}-{domain}.sqlite"
    shutil.copyfile(TRT, path)
    tid, ranges = _thread_ranges(TRT)
    bounds = [_outside(int(t), ranges) for t in np.linspace(lo, hi, count + 1)]
    rows = [(a, b - 1, 59, f"{word} {i + 17}", tid, domain)
            for i, (a, b) in enumerate(pairwise(bounds))]  # fmt: skip
    with closing(sqlite3.connect(path)) as con:
        con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                        "domainId) VALUES (?, ?, ?, ?, ?, ?)", rows)  # fmt: skip
        con.commit()
    return path


def _busy_share(path: Path, t0: int, t1: int) -> float:
    """GPU busy time (union per process and device) inside [t0, t1], over all of it: SQL
    rows and the obvious union."""
    per: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for table in GPU_TABLES:
        for pid, dev, a, b in query(path, f"SELECT globalPid, deviceId, start, end FROM {table}"):
            per.setdefault((pid, dev), []).append((a, b))
    merged = [s for spans in per.values() for s in _merged(spans) if s[1] > s[0]]
    inside = sum(max(0, min(b, t1) - max(a, t0)) for a, b in merged)
    return inside / sum(b - a for a, b in merged)


@pytest.mark.corpus
def test_a_users_numbered_steps_still_count(corpus_dir: Path, tmp_path: Path) -> None:
    lo, hi = _gpu_span(TRT)
    path = _with_numbered(tmp_path, "iteration", lo - 1000, hi + 1000, 10)
    report = dlprof_lite.analyze(path)
    s = report.summary
    assert (s["key_range"], s["key_range_source"]) == ("iteration #", "numbered-ranges")
    assert s["iterations_count"] == 10
    table = report.iterations
    assert _busy_share(path, int(table["start_ns"].iloc[1]), int(table["end_ns"].iloc[-1])) >= 0.5
    assert not any(w.startswith("no iterations") for w in s.warnings)


@pytest.mark.corpus
def test_numbered_ranges_count_whatever_their_timing(corpus_dir: Path, tmp_path: Path) -> None:
    """Five steps over the first 2 % of the GPU's span: they hold little of its time, but the
    user named them steps, so they are the steps (the timing test is for unnamed guesses)."""
    lo, hi = _gpu_span(TRT)
    path = _with_numbered(tmp_path, "step", lo - 1000, lo + (hi - lo) // 50, 5)
    profile = dlprof_lite.load(path)
    meta = profile.meta
    assert (meta.key_range, meta.key_range_source) == ("step #", "numbered-ranges")
    table = profile.iterations
    t0, t1 = int(table["start_ns"].iloc[1]), int(table["end_ns"].iloc[-1])
    assert _busy_share(path, t0, t1) < 0.5


@pytest.mark.corpus
def test_a_librarys_numbered_ranges_are_refused(corpus_dir: Path, tmp_path: Path) -> None:
    """The same numbered ranges in TensorRT's own domain (around the whole run, so they hold
    its enqueue ranges): a library's, refused; the candidates are named in one warning."""
    lo, hi = _gpu_span(TRT)
    path = _with_numbered(tmp_path, "step", lo - 1000, hi + 1000, 10, domain=1)
    verdicts = rejected(path)
    assert verdicts["step #"].library == "TensorRT" and not verdicts["step #"].accepted
    assert verdicts["step #"].coverage >= 0.5  # timing alone would take them
    report = dlprof_lite.analyze(path)
    assert report.iterations.empty
    line = one_warning(report)
    assert "'step #' (TensorRT's own range;" in line and "--key-range '^step\\ \\d+$'" in line


# -- the library list: every entry on a real name ---------------------------------------------

LIBRARY_EXAMPLES = [
    ("cublasSgemmEx", "cuBLAS", "cuBLAS"),  # corpus: casio nerf
    ("cudnnConvolutionForward", "cuDNN", "cuDNN"),  # nsys --trace=cudnn
    ("ncclAllReduce", "NCCL", "NCCL"),  # NCCL src/include/nvtx.h
    ("MPI_Send", "MPI", "MPI"),  # corpus: pipit saxpy
    ("ExecutionContext::enqueue", "TensorRT", "TensorRT"),  # corpus: trt-samples
    ("null_count", "libcudf", "cuDF"),  # corpus: quasiben cudf
    ("DATAFRAME_COPY", "cudf_python", "cuDF"),  # corpus: quasiben cudf
    ("allocate", "librmm", "RMM"),  # rmm include/rmm/detail/nvtx/ranges.hpp
    ("cublasLtMatmul", "", "cuBLAS"),
    ("cudnnBatchNormalizationForwardTraining", "", "cuDNN"),
    ("ncclGroupEnd", "", "NCCL"),  # corpus: nsys-ai (its NCCL domain lost in the slice)
    ("FusionCache::get", "", "nvFuser"),  # corpus: NVIDIA Fuser, FUSER_PERF_SCOPE
    ("FusionKernelRuntime::compileFusionParallel", "", "nvFuser"),
    ("FusionExecutorCache::runFusionWithInputs", "", "nvFuser"),
    ("FusionDefinition Definition", "", "nvFuser"),  # nvFuser's Python frontend
    ("Operators.broadcast_in_dim", "", "nvFuser"),
    ("KernelExecutor::runFusion", "", "nvFuser"),
]


@pytest.mark.parametrize(("name", "domain", "library"), LIBRARY_EXAMPLES)
def test_library_ranges(name: str, domain: str, library: str) -> None:
    assert library_of(name, domain) == library


def test_every_library_domain_has_an_example() -> None:
    assert {d for _, d, _ in LIBRARY_EXAMPLES if d} == set(LIBRARY_DOMAINS)


@pytest.mark.parametrize(
    "name",
    ["iteration 17", "train_step", "Fusion", "LRScheduler.step", "forward", "epoch 3",
     "nccl", "cublas", "saxpy", "bbox_head"],
)  # fmt: skip
def test_a_users_ranges_are_no_librarys(name: str) -> None:
    assert library_of(name, "") is None
