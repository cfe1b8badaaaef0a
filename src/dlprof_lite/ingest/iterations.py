"""Training iterations: found from NVTX key ranges, then every GPU op is placed in one.

Place in the pipeline: an analysis step of ``ingest`` (see :mod:`dlprof_lite.ingest.load`).
:func:`find_iterations` reads the nested ``ranges`` and builds the ``iterations`` table of
the column contract; :func:`assign_iterations` adds ``iteration`` to kernels and memops;
their statistics are the report's (:mod:`dlprof_lite.report.steps.stats`). Sources and
thresholds are rules (:mod:`dlprof_lite.rules.iterations`).

DLProf's key-node rule (every source but the annotation's steps, rules 3 and 4 below):
iteration boundaries are the END times of the instances of one key range. Iteration ``i``
spans ``(end of instance i-1, end of instance i]``; iteration 0 has no previous instance
and spans ``[start, end]`` of the first key instance, so the time before
the first key range (imports, model build, data loader start-up) belongs to no iteration.
Time between two key instances belongs to the later iteration (its data loading, say).

The key range is, in this order (:data:`dlprof_lite.rules.iterations.SOURCES`; the rules
:mod:`dlprof_lite.ingest.key_ranges`):

1. ``--key-range REGEX`` (``re.search`` on range names): "key-range";
2. the script's own numbered step ranges (``step 12``, ``Step#12``, ``train_step_3``, ...),
   which hold the whole step the user means, logging included: "numbered-ranges"; where
   the annotation recorded optimizer steps, at least half of them must hold one;
3. the annotation's steps: where it recorded optimizer updates (``update:<n>`` marks), each
   step's bounds are decided here from its marks and phase ranges
   (:mod:`dlprof_lite.ingest.step_bounds`: from the step's data wait to its update's end,
   steps not contiguous); a profile of an older annotation, or a script that placed its own
   ``iteration()`` ranges, gives its ``iteration`` ranges, dropping those that never reached
   the optimizer: "annotation";
4. a training loop without an optimizer step (``p.data`` updated by hand): one training
   forward plus its backward per step, each ending where the next starts:
   "forward-backward";
5. for scripts without optimizer steps (inference): our ``iteration`` ranges, which the
   annotation opens for each model call when nothing ever steps; else our ``forward``
   phase ranges; else the repeated calls of a root model (``fwd:model:Net`` with no module
   range around it): "root-model-calls";
6. the top-level push/pop range name that repeats most on one thread: "most-repeated";
7. none.

Rules 2, 5 and 6 are guesses (:data:`dlprof_lite.rules.iterations.GUESSED`): the report
says which one was used. Given the profile's work (:class:`~.step_guess.Work`), a guess must
also pass the step test of :mod:`dlprof_lite.ingest.step_guess` (enough of the GPU time, a
median of at least 100 µs, a CV of at most 1, no library's own range); a guess that fails
it is passed over for the next rule's (the most-repeated rule tries each repeated name in
turn), and when every guess fails there are no iterations and :func:`choose_iterations`
returns the verdicts for the warning.

Warm-up: iteration 0 (CUDA context, cuDNN autotuning, allocator growth) with at least
:data:`DEFAULT_WARMUP_MIN_ITERATIONS` iterations, and every iteration of the run's opening
stretch that compiles (holds ``compile`` phase time: ``torch.compile`` compiles in the first
steps), as long as one iteration is left after it. ``--iter-start`` replaces both rules.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.ingest.columns import empty_frame
from dlprof_lite.ingest.key_ranges import numbered_steps, repeated_names, root_model_calls
from dlprof_lite.ingest.selection import EVERY_STEP_BY_RULE, StepSelection
from dlprof_lite.ingest.step_bounds import ours, step_instances
from dlprof_lite.ingest.step_guess import Verdict, Work, judge
from dlprof_lite.rules.iterations import DEFAULT_WARMUP_MIN_ITERATIONS
from dlprof_lite.rules.names import (
    COMPILE,
    DOMAIN,
    ITERATION,
    MANUAL_MARK,
    OPTIMIZER,
    UPDATE_MARK,
)


def find_iterations(
    ranges: pd.DataFrame,
    marks: pd.DataFrame | None = None,
    *,
    steps: StepSelection = EVERY_STEP_BY_RULE,
) -> tuple[pd.DataFrame, str | None, str]:
    """Return the ``iterations`` table, the key range name and where the key came from, by
    the rules alone (no step test: :func:`choose_iterations` with the profile's work has one).

    The source is one of :data:`SOURCES`. With a regex matching several names (``step 1``,
    ``step 2``, ...) the name returned is the regex itself. ``steps.iter_start``/``iter_stop``
    choose the window (stop exclusive); iterations before ``iter_start`` are warm-up.
    Raises :class:`InputError` for a regex that is invalid or matches no range, a negative or
    empty window, or a window that selects none of the iterations found.
    """
    found = choose_iterations(ranges, marks, steps=steps)
    return found.table, found.name, found.source


class Found(NamedTuple):
    """The iterations, the key's name and source, and the guesses the step test refused."""

    table: pd.DataFrame
    name: str | None
    source: str
    rejected: tuple[Verdict, ...] = ()


def choose_iterations(
    ranges: pd.DataFrame,
    marks: pd.DataFrame | None = None,
    *,
    steps: StepSelection = EVERY_STEP_BY_RULE,
    work: Work | None = None,
) -> Found:
    """:func:`find_iterations`, each guessed key tested against ``work`` (the profile's GPU
    or main-thread time: ingest/step_guess.py); without ``work``, no test."""
    _check_window(steps.iter_start, steps.iter_stop)
    guesses = _Guesses(work)
    key = _key_instances(ranges, marks, steps.key_range, guesses)
    if key.instances.empty:
        return Found(empty_frame("iterations"), None, "none", tuple(guesses.rejected))
    table = _key_table(key, steps.iter_start, steps.iter_stop)
    if not steps.bounded:
        table["warmup"] = _compiling_start(table, ranges)
    return Found(table, key.name, key.source)


def _key_table(key: _Key, iter_start: int | None, iter_stop: int | None) -> pd.DataFrame:
    instances = _outermost(_busiest_thread(key.instances))
    return _iteration_table(instances, iter_start, iter_stop, key.own_starts)


class _Key(NamedTuple):
    """The key instances, the key's name, its source, and whether each instance is a whole
    step with its own start (the annotation's decided steps) or only ends one."""

    instances: pd.DataFrame
    name: str | None
    source: str
    own_starts: bool = False


class _Guesses:
    """The step test of each guessed key (ingest/step_guess.py), and the refused ones."""

    def __init__(self, work: Work | None) -> None:
        self.work = work
        self.rejected: list[Verdict] = []

    def ok(self, key: _Key) -> bool:
        if self.work is None:
            return True
        verdict = judge(_key_table(key, None, None), key.instances, str(key.name), key.source,
                        self.work)  # fmt: skip
        if not verdict.accepted:
            self.rejected.append(verdict)
        return verdict.accepted


def _check_window(iter_start: int | None, iter_stop: int | None) -> None:
    if iter_start is not None and iter_start < 0:
        raise InputError(f"--iter-start must be >= 0, not {iter_start}")
    if iter_stop is not None and iter_stop <= (iter_start or 0):
        raise InputError(
            f"--iter-stop ({iter_stop}) must be greater than --iter-start ({iter_start or 0})"
        )


def _key_instances(
    ranges: pd.DataFrame, marks: pd.DataFrame | None, key_range: str | None, guesses: _Guesses
) -> _Key:
    closed = ranges[ranges["closed"].to_numpy(dtype=bool)]
    # A key range never closed (the program died in it) has no end, so no boundary.
    if key_range is not None:
        matched = _regex_names(ranges, key_range)
        picked = closed[closed["name"].isin(matched).to_numpy()]
        shown = matched[0] if len(matched) == 1 else key_range
        return _Key(picked, shown, "key-range")
    in_domain = (closed["domain"] == DOMAIN).to_numpy()
    names = closed["name"]
    optimizer = closed[(names == OPTIMIZER).to_numpy() & in_domain]
    numbered, name = numbered_steps(ranges)
    if name is not None and _whole_steps(numbered, optimizer):
        key = _Key(numbered, name, "numbered-ranges")
        if guesses.ok(key):
            return key
    decided = _decided_steps(ranges, marks, optimizer)
    if decided is not None:
        return decided
    ours = (names == ITERATION).to_numpy() & in_domain
    if ours.any():
        if not optimizer.empty:
            return _Key(_complete(closed[ours], optimizer), ITERATION, "annotation")
        # No optimizer step anywhere: the annotation's iterations are inference calls of
        # the model (annotate/phases.py), one per call: a guess at the step.
        key = _Key(closed[ours], ITERATION, "root-model-calls")
        if guesses.ok(key):
            return key
    instances, name = root_model_calls(ranges)
    if name is not None and guesses.ok(key := _Key(instances, name, "root-model-calls")):
        return key
    for instances, name in repeated_names(ranges):
        if guesses.ok(key := _Key(instances, name, "most-repeated")):
            return key
    return _Key(closed.iloc[:0], None, "none")


def _decided_steps(
    ranges: pd.DataFrame, marks: pd.DataFrame | None, optimizer: pd.DataFrame
) -> _Key | None:
    """The annotation's steps decided from its marks and phases (step_bounds.py), or None:
    no annotation marks (an older annotation's profile) or the script's own iterations."""
    if marks is None or marks.empty or ours(marks, (MANUAL_MARK,)).any():
        return None
    if ours(marks, prefix=UPDATE_MARK).any():
        return _Key(step_instances(ranges, marks), ITERATION, "annotation", own_starts=True)
    if optimizer.empty and ours(ranges, ("backward",)).any():
        steps = step_instances(ranges, marks)
        if not steps.empty:
            return _Key(steps, "forward", "forward-backward", own_starts=True)
    return None


def _whole_steps(numbered: pd.DataFrame, optimizer: pd.DataFrame) -> bool:
    """Whether numbered ranges hold whole training steps: where the annotation saw optimizer
    steps, at least half of them must hold one. ``checkpoint step 500``, ``eval batch 3`` or
    the micro-batches of gradient accumulation are numbered too, but they are not the step.
    """
    return optimizer.empty or 2 * len(_complete(numbered, optimizer)) >= len(numbered)


def _complete(steps: pd.DataFrame, optimizer: pd.DataFrame) -> pd.DataFrame:
    """Annotation iterations that hold an optimizer phase.

    A script that fetches a batch and then leaves its loop opens an iteration that never
    reaches ``optimizer``; nsys closes it at the session end (annotate/names.py), so it is
    recognised by the missing phase.
    """
    keep = np.zeros(len(steps), dtype=bool)
    step_pid = steps["pid"].to_numpy()
    for pid, opt in optimizer.groupby("pid"):  # one pass per process, not per event
        mine = step_pid == pid
        starts = np.sort(opt["start_ns"].to_numpy(np.int64))
        lo = np.searchsorted(starts, steps["start_ns"].to_numpy(np.int64)[mine], side="left")
        hi = np.searchsorted(starts, steps["end_ns"].to_numpy(np.int64)[mine], side="right")
        keep[mine] = hi > lo
    return steps[keep]


def _regex_names(ranges: pd.DataFrame, key_range: str) -> list[str]:
    try:
        pattern = re.compile(key_range)
    except re.error as exc:
        raise InputError(
            f"--key-range {key_range!r} is not a valid regular expression: {exc}"
        ) from exc
    # Each distinct name is tested once, never each instance.
    unique = ranges["name"].astype("category").cat.categories
    matched = [str(n) for n in unique if pattern.search(str(n))]
    if not matched:
        top = ranges.loc[ranges["depth"] == 0, "name"].astype("object").value_counts()
        shown = ", ".join(repr(_short(str(n))) for n in top.index[:5]) or "none"
        raise InputError(
            f"--key-range {key_range!r} matches no NVTX range; top-level ranges: {shown}"
        )
    return matched


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _busiest_thread(instances: pd.DataFrame) -> pd.DataFrame:
    """Keep the key instances of the one thread that has the most of them.

    In a profile of several processes or threads (ranks, a data-loader thread) each runs its
    own copy of the loop; the thread with the most instances is taken as the training loop,
    a tie going to the thread whose first instance starts first.
    """
    per_thread = instances.groupby(["pid", "tid"])["start_ns"].agg(["size", "min"])
    best = per_thread.sort_values(["size", "min"], ascending=[False, True], kind="stable")
    pid, tid = best.index[0]
    same_pid = (instances["pid"] == pid).to_numpy()
    mine: npt.NDArray[np.bool_] = same_pid & (instances["tid"] == tid).to_numpy()
    return instances[mine]


def _outermost(instances: pd.DataFrame) -> pd.DataFrame:
    """Drop instances that start inside an earlier one (a regex can match nested ranges)."""
    ordered = instances.sort_values(["start_ns", "end_ns"], kind="stable")
    start = ordered["start_ns"].to_numpy(dtype=np.int64)
    end = ordered["end_ns"].to_numpy(dtype=np.int64)
    prev_end = np.maximum.accumulate(end)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = start[1:] >= prev_end[:-1]
    return ordered[keep]


def _iteration_table(
    instances: pd.DataFrame, iter_start: int | None, iter_stop: int | None, own_starts: bool
) -> pd.DataFrame:
    """Iteration rows; ``own_starts``: each instance starts a step (the annotation's steps),
    else an iteration starts where the previous key instance ended (the key-node rule)."""
    end = instances["end_ns"].to_numpy(dtype=np.int64)
    start = np.empty_like(end)
    start[0] = instances["start_ns"].iloc[0]
    start[1:] = instances["start_ns"].to_numpy(np.int64)[1:] if own_starts else end[:-1]
    between = np.zeros_like(end)
    between[1:] = start[1:] - end[:-1]
    index = np.arange(len(end), dtype=np.int64)
    explicit = iter_start is not None or iter_stop is not None
    lo = iter_start or 0
    hi = len(end) if iter_stop is None else iter_stop
    in_window = (index >= lo) & (index < hi)
    if explicit:
        warmup = index < lo
        if not in_window.any():
            raise InputError(
                f"the iteration window [{lo}, {hi}) selects none of the {len(end)} iterations found"
            )
    else:
        warmup = (index == 0) & (len(end) >= DEFAULT_WARMUP_MIN_ITERATIONS)
    return pd.DataFrame(
        {
            "iteration": index,
            "start_ns": start,
            "end_ns": end,
            "wall_ns": end - start,
            "between_before_ns": between,
            "warmup": warmup,
            "in_window": in_window,
        }
    )


def _compile_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """The annotation's ``compile`` phase ranges (one per Dynamo compilation)."""
    mine = (ranges["name"] == COMPILE).to_numpy(dtype=bool)
    return ranges[mine & (ranges["domain"] == DOMAIN).to_numpy(dtype=bool)]


def compiling(table: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Whether each iteration window ``(start, end]`` overlaps a ``compile`` phase range."""
    compiles = _compile_ranges(ranges)
    c0 = compiles["start_ns"].to_numpy(dtype=np.int64)
    c1 = compiles["end_ns"].to_numpy(dtype=np.int64)
    t0 = table["start_ns"].to_numpy(dtype=np.int64)
    t1 = table["end_ns"].to_numpy(dtype=np.int64)
    if not len(c0):
        return np.zeros(len(t0), dtype=bool)
    order = np.argsort(c0, kind="stable")
    c0, c1 = c0[order], np.maximum.accumulate(c1[order])
    # The compile range starting last before a window's end overlaps it when it ends after
    # the window's start; with ends made cumulative, that one range answers for all earlier.
    last = np.searchsorted(c0, t1, side="left") - 1
    hit = last >= 0
    hit[hit] = c1[last[hit]] > t0[hit]
    return hit


def _compiling_start(table: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Warm-up: the run's opening stretch of iterations that compile (torch.compile compiles
    in the first steps) or are warm-up already, unless that is every iteration (then no
    step would be left: compiling in every step is recompilation, reported as such)."""
    warm = table["warmup"].to_numpy(dtype=bool)
    stretch = compiling(table, ranges) | warm
    if stretch.all():
        return warm
    return np.arange(len(stretch)) < int(np.argmin(stretch))


def assign_iterations(
    kernels: pd.DataFrame, memops: pd.DataFrame, iterations: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add ``iteration`` (Int64) to copies of ``kernels`` and ``memops``.

    An op belongs to the iteration in which it was launched: its launch call's start
    (``api_start_ns``), or its GPU start when it has no API row. GPU work still running after
    the iteration's end is thereby charged to the step that issued it. Ops of every process
    are placed on the one timeline of the key thread.
    """
    return _assign(kernels, iterations), _assign(memops, iterations)


def _assign(ops: pd.DataFrame, iterations: pd.DataFrame) -> pd.DataFrame:
    out = ops.copy(deep=False)  # new columns only: the input is never touched
    launch = ops["api_start_ns"].astype("Int64").fillna(ops["start_ns"].astype("Int64"))
    at = step_at(launch.to_numpy(dtype=np.int64).astype(np.int64), iterations)
    inside = at >= 0
    data = np.zeros(len(ops), dtype=np.int32)  # columns.py: Int32
    data[inside] = iterations["iteration"].to_numpy(dtype=np.int64)[at[inside]]
    out["iteration"] = pd.Series(pd.arrays.IntegerArray(data, ~inside), index=ops.index)
    return out


def step_at(times: npt.NDArray[np.int64], iterations: pd.DataFrame) -> npt.NDArray[np.int64]:
    """The row of ``iterations`` (in start order) holding each time, -1 for none.

    A step holds ``(start, end]``: where steps tile the run, an instant on a boundary is the
    step that ends there. A step's own start is its too where nothing ends there (the first
    step, and every step with time between steps before it: ``[start, end]``)."""
    out = np.full(len(times), -1, dtype=np.int64)
    if iterations.empty or not len(times):
        return out
    starts = iterations["start_ns"].to_numpy(dtype=np.int64)
    ends = iterations["end_ns"].to_numpy(dtype=np.int64)
    opens = np.ones(len(starts), dtype=bool)  # whether a step holds its own start
    opens[1:] = starts[1:] > ends[:-1]
    t = np.asarray(times, dtype=np.int64)
    pos = np.searchsorted(ends, t, side="left")
    inside = pos < len(ends)
    at = pos[inside]
    inside[inside] = (t[inside] > starts[at]) | ((t[inside] == starts[at]) & opens[at])
    out[inside] = pos[inside]
    return out
