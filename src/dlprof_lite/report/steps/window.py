"""The analysed window: which steps the kernels, ranges and layers tables cover.

Place in the pipeline: report. :func:`choose_window` reads the iterations ingest found
(``warmup``/``in_window`` already say what ``--iter-start/--iter-stop`` and the warm-up rule
chose) and returns one :class:`StepWindow`; :func:`dlprof_lite.report.build.build_report`
cuts the Profile's frames with it once and hands the cut frames to the table functions, and
the summary and every table's JSON state it (``window_*`` fields), so no writer re-derives it.

Three scopes:

- ``analysed`` (default): the analysed iterations (in the window, not warm-up), the ones the
  step statistics use. A GPU op belongs to the iteration ingest gave it (its launch call); a
  range to the iteration its start falls in, by the same ``(start, end]`` rule.
- ``whole-run`` (``--all-iterations``): every event of the run, warm-up, start-up and
  evaluation included (nsys stats' totals); per-step figures over every iteration.
- ``no-iterations``: the profile has no iterations: the whole run, and no per-step figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlprof_lite.report.model import analysed_mask

ANALYSED, WHOLE_RUN, NO_ITERATIONS = "analysed", "whole-run", "no-iterations"


@dataclass(frozen=True)
class StepWindow:
    """The steps the tables cover. ``steps``: iteration indexes of the per-step figures, in
    order; ``starts``/``ends``: their bounds (the iterations table's ``(start, end]``)."""

    scope: str
    steps: tuple[int, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    start_ns: int | None
    end_ns: int | None

    @property
    def cuts(self) -> bool:
        """Whether events outside the steps are left out (the default scope)."""
        return self.scope == ANALYSED

    def fields(self) -> dict[str, object]:
        """The summary's ``window_*`` fields (the JSON of each table repeats them)."""
        return {
            "window_scope": self.scope,
            "window_iter_start": self.steps[0] if self.steps else None,
            "window_iter_stop": self.steps[-1] + 1 if self.steps else None,
            "window_steps": len(self.steps),
            "window_start_ns": self.start_ns,
            "window_end_ns": self.end_ns,
        }


def choose_window(
    iterations: pd.DataFrame, session: tuple[int, int], *, all_iterations: bool = False
) -> StepWindow:
    """The window of a profile: its analysed iterations, else (``all_iterations`` or none
    found) the whole session ``(start, end)``."""
    table = iterations.sort_values("iteration") if len(iterations) else iterations
    if table.empty:
        return StepWindow(NO_ITERATIONS, (), (), (), *session)
    if all_iterations:
        chosen, scope, bounds = table, WHOLE_RUN, session
    else:
        chosen, scope = table[analysed_mask(table)], ANALYSED
        if chosen.empty:  # every iteration is warm-up: nothing analysed, say so, cover none
            return StepWindow(ANALYSED, (), (), (), None, None)
        bounds = (int(chosen["start_ns"].iloc[0]), int(chosen["end_ns"].iloc[-1]))
    return StepWindow(
        scope,
        tuple(int(i) for i in chosen["iteration"]),
        tuple(int(t) for t in chosen["start_ns"]),
        tuple(int(t) for t in chosen["end_ns"]),
        *bounds,
    )


def step_of(times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """The iteration holding each time, -1 for none: ``(start, end]``, and its own start
    where no step ends there (the first, and one with ``between_before_ns``): ingest's rule
    for GPU ops (``ingest.iterations.step_at``), here for ranges by their start."""
    out = np.full(len(times), -1, dtype=np.int64)
    if iterations.empty or not len(times):
        return out
    table = iterations.sort_values("start_ns")
    starts = table["start_ns"].to_numpy(dtype=np.int64)
    ends = table["end_ns"].to_numpy(dtype=np.int64)
    opens = table["between_before_ns"].to_numpy(dtype=np.int64) > 0
    opens[0] = True
    index = table["iteration"].to_numpy(dtype=np.int64)
    t = np.asarray(times, dtype=np.int64)
    pos = np.searchsorted(ends, t, side="left")
    inside = pos < len(ends)
    at = pos[inside]
    inside[inside] = (t[inside] > starts[at]) | ((t[inside] == starts[at]) & opens[at])
    out[inside] = index[pos[inside]]
    return out


def op_steps(ops: pd.DataFrame) -> np.ndarray:
    """Ingest's ``iteration`` of each GPU op as int64, -1 outside every iteration."""
    return ops["iteration"].astype("Int64").to_numpy(dtype=np.int64, na_value=-1)


def cut_ops(ops: pd.DataFrame, window: StepWindow) -> pd.DataFrame:
    """The GPU ops (kernels or memops) of the window's steps."""
    if not window.cuts:
        return ops
    return _rows(ops, np.isin(op_steps(ops), np.asarray(window.steps, dtype=np.int64)))


def cut_ranges(ranges: pd.DataFrame, steps: np.ndarray, window: StepWindow) -> pd.DataFrame:
    """The ranges (each in iteration ``steps``) that start in one of the window's steps."""
    if not window.cuts:
        return ranges
    return _rows(ranges, np.isin(steps, np.asarray(window.steps, dtype=np.int64)))


def _rows(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows of ``frame`` where ``keep``. Events come in time order, so a window's are
    usually one run of rows: then a slice, sharing the frame's columns (copy-on-write),
    where a mask copied them all (171 MB of kernels at 1M, 173 MB of 1.35M ranges)."""
    rows = np.flatnonzero(keep)
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return frame.iloc[rows[0] : rows[-1] + 1]
    kept: pd.DataFrame = frame.take(rows)
    return kept
