"""The ingest pipeline, in order: read → ranges → launches → attribution → analyses → Profile.

The analyses label every op (Tensor Cores, launch overhead, layer, phase, iteration) and
then every range (module direction, GPU work inside it): the ``Profile`` leaves ingest with
every derived column, and the report only aggregates them.

Each step is a pure function in its own module; this file only strings them together, so
the order in which columns appear is visible in one place.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dlprof_lite.ingest.columns import coerce, empty_frame
from dlprof_lite.ingest.correlate import attach_launches, attribute_ranges
from dlprof_lite.ingest.iterations import assign_iterations, choose_iterations
from dlprof_lite.ingest.layers import assign_layers, label_ranges
from dlprof_lite.ingest.nvtx import build_ranges
from dlprof_lite.ingest.overhead import launch_overhead
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.ingest.range_columns import enrich_ranges
from dlprof_lite.ingest.raw import RawExport
from dlprof_lite.ingest.reader import read_export
from dlprof_lite.ingest.selection import EVERY_STEP_BY_RULE, StepSelection
from dlprof_lite.ingest.step_guess import Work, rejected_note
from dlprof_lite.ingest.tensorcore import classify_kernels
from dlprof_lite.progress import Stage, StageProgress, no_progress
from dlprof_lite.rules.inputs import is_report


def load(
    path: str | Path,
    *,
    steps: StepSelection = EVERY_STEP_BY_RULE,
    progress: StageProgress = no_progress,
    pids: Collection[int] | None = None,
    nsys: str | None = None,
) -> Profile:
    """Read an nsys SQLite export (or a report, exported first by ``nsys``: a path, default
    from PATH) and run every analysis step.

    ``steps``: which steps (the key range, the iteration window); ``pids``: analyse only
    these processes (one rank of a multi-process run).
    """
    raw = load_raw(path, progress=progress, nsys=nsys)
    return enrich(raw, steps=steps, progress=progress, pids=pids)


def load_raw(
    path: str | Path, *, progress: StageProgress = no_progress, nsys: str | None = None
) -> RawExport:
    """The base frames of ``path``, read once; :func:`enrich` analyses them (all processes,
    or one rank's each time, without reading the export again)."""
    progress(Stage.READING)
    with sqlite_of(Path(path), nsys) as sqlite:
        raw = read_export(sqlite)
    return replace(raw, meta=replace(raw.meta, source=str(path)))


def only_pids(raw: RawExport, pids: Collection[int]) -> RawExport:
    """The rows of ``pids`` in every per-process frame (GPUs are the machine's: kept).

    Filtered before any analysis step, so nesting, correlation and iterations see one
    process only: correlation ids repeat across processes, iteration ranges must not mix."""
    keep = list(pids)

    def mine(frame: pd.DataFrame) -> pd.DataFrame:
        out = frame[frame["pid"].isin(keep).to_numpy(dtype=bool)].reset_index(drop=True)
        for name in out.columns:  # other processes' names must not become empty table rows
            if isinstance(out[name].dtype, pd.CategoricalDtype):
                out[name] = out[name].cat.remove_unused_categories()
        return out

    return replace(raw, kernels=mine(raw.kernels), memops=mine(raw.memops), api=mine(raw.api),
                   nvtx=mine(raw.nvtx), marks=mine(raw.marks))  # fmt: skip


def enrich(
    raw: RawExport,
    *,
    steps: StepSelection = EVERY_STEP_BY_RULE,
    progress: StageProgress = no_progress,
    pids: Collection[int] | None = None,
    hand_over: bool = False,
) -> Profile:
    """Every analysis step on read frames (of ``pids`` only, when given).

    ``hand_over``: the caller has no further use for ``raw``: its NVTX events and GPU ops
    are emptied from it as soon as they are read, so that they are gone before the
    analysis peaks (about 100 MB at a million ranges)."""
    if pids is not None:
        raw = only_pids(raw, pids)
    progress(Stage.NESTING)
    ranges = build_ranges(raw.nvtx, session_end_ns=raw.meta.session_end_ns)
    if hand_over:
        _empty(raw, "nvtx", "nvtx_events")
    progress(Stage.CORRELATING)
    kernels = attach_launches(raw.kernels, raw.api)
    memops = attach_launches(raw.memops, raw.api)
    if hand_over:
        _empty(raw, "kernels", "kernels")
        _empty(raw, "memops", "memops")
    kernels = attribute_ranges(kernels, ranges)
    memops = attribute_ranges(memops, ranges)
    progress(Stage.ANALYSING)
    kernels = classify_kernels(kernels)
    kernels, memops = launch_overhead(kernels, memops)
    labels = label_ranges(ranges)  # one pass over the nesting, for the ops and the ranges
    kernels, memops = assign_layers(kernels, memops, ranges, labels)
    found = choose_iterations(ranges, raw.marks, steps=steps,
                              work=Work(kernels, memops, ranges))  # fmt: skip
    iterations = found.table
    kernels, memops = assign_iterations(kernels, memops, iterations)
    ranges = enrich_ranges(ranges, kernels, memops, labels)  # GPU work reads the TC flags
    del labels
    meta = replace(raw.meta, key_range=found.name, key_range_source=found.source,
                   key_range_note=rejected_note(list(found.rejected)))  # fmt: skip
    return Profile(
        kernels=coerce(kernels, "kernels"),
        memops=coerce(memops, "memops"),
        api=raw.api,
        ranges=ranges,
        marks=raw.marks,
        gpus=raw.gpus,
        iterations=iterations,
        meta=meta,
    )


def _empty(raw: RawExport, name: str, table: str) -> None:
    """Replace one of ``raw``'s frames by an empty one of its table (base columns)."""
    object.__setattr__(raw, name, empty_frame(table))  # frozen for readers, not for its owner


@contextmanager
def sqlite_of(path: Path, nsys: str | None = None) -> Iterator[Path]:
    """``path`` itself, or the ``nsys export`` (``nsys``: its path, default from PATH) of a
    report into a temporary folder.

    The user's report is never modified, and the temporary export is removed afterwards.
    """
    if not is_report(path):
        yield path
        return
    from dlprof_lite.launch.nsys import export_sqlite

    with tempfile.TemporaryDirectory(prefix="dlprof-lite-") as tmp:
        yield export_sqlite(path, Path(tmp) / f"{path.stem}.sqlite", nsys=nsys)
