"""Training steps decided afterwards: each step's start and end from the annotation's phase
ranges and its ``update:<n>`` / ``backward-end`` marks (``rules/names.py``).

Place in the pipeline: an analysis step of ``ingest``, called by
:func:`dlprof_lite.ingest.iterations.find_iterations` for profiles the annotation made.

A step is one optimizer update and what leads to it: its data wait, forward(s), backward(s)
and the update. Per process:

- **updates**: the ``update:<n>`` marks, one at the end of each outermost
  ``optimizer.step()``. Consecutive marks belong to one step (several optimizers stepping
  on one batch: a GAN's two, a model with two parameter groups' optimizers) unless a
  ``data`` phase starts between them (a new batch) or the optimizer already stepped in the
  step being built (the same optimizer stepping again is the next update);
- **end**: the time of the step's last mark, where its update ends. Never the start of
  whatever comes next, never the process's exit;
- **start**: the first training phase range (``data``, ``forward``, ``backward``,
  ``optimizer``) that starts after the previous step's end: the wait in the loop's
  ``next()`` for the step's first batch, or its first forward when no wait was seen (a
  look-ahead loader that already holds the batch at an epoch's end);
- what lies between one step's end and the next one's start (evaluation, logging,
  checkpointing, ``zero_grad`` after the update) is no step: the report shows it as time
  between steps.

Without any update mark (a loop that updates ``p.data`` by hand: torch has no hook for it)
a step is one training forward of the root plus its backward: a step starts at each
``forward`` phase that follows a ``backward`` phase (pulled back to the ``data`` wait right
before it), and ends where the next one starts; the last one ends at its last
``backward-end`` mark.

Vectorised over steps (``numpy.searchsorted``); the only Python loop is over the marks of
a process where several optimizers step (a handful per step, rare).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.rules.names import BACKWARD_END_MARK, DOMAIN, PHASES, UPDATE_MARK

# The phases a step's own work starts with (compilation may run outside steps).
_STEP_PHASES = tuple(p for p in PHASES if p != "compile")
_INSTANCE_COLUMNS = ["start_ns", "end_ns", "pid", "tid"]

I64 = npt.NDArray[np.int64]


def ours(frame: pd.DataFrame, names: tuple[str, ...] | None = None, prefix: str = "") -> (
    npt.NDArray[np.bool_]
):
    """Rows of the annotation's domain named one of ``names`` or starting with ``prefix``."""
    mine = cat_mask(frame["domain"], lambda s: s == DOMAIN)
    if not mine.any():
        return mine
    if names is not None:  # tested once per distinct name, not per row
        named: npt.NDArray[np.bool_] = cat_mask(frame["name"], lambda s: s.isin(names))
    else:
        named = cat_mask(frame["name"], lambda s: s.str.startswith(prefix))
    return mine & named


def has_update_marks(marks: pd.DataFrame) -> bool:
    return bool(len(marks)) and bool(ours(marks, prefix=UPDATE_MARK).any())


def step_instances(ranges: pd.DataFrame, marks: pd.DataFrame) -> pd.DataFrame:
    """One row per step (``start_ns``, ``end_ns``, ``pid``, ``tid``), every process's,
    sorted by start; empty when the profile holds neither update marks nor training phases."""
    closed = ranges[ranges["closed"].to_numpy(dtype=bool)]
    phases = closed[ours(closed, _STEP_PHASES)]
    updates = marks[ours(marks, prefix=UPDATE_MARK)] if len(marks) else marks
    ends = marks[ours(marks, (BACKWARD_END_MARK,))] if len(marks) else marks
    parts = []
    for pid in sorted(set(phases["pid"].tolist()) | set(updates["pid"].tolist())):
        mine = phases[(phases["pid"] == pid).to_numpy(dtype=bool)]
        done = updates[(updates["pid"] == pid).to_numpy(dtype=bool)]
        if len(done):
            parts.append(_update_steps(mine, done))
        else:
            parts.append(_forward_steps(mine, ends[(ends["pid"] == pid).to_numpy(dtype=bool)]))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _INSTANCE_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _update_steps(phases: pd.DataFrame, updates: pd.DataFrame) -> pd.DataFrame:
    """Steps of a process that ran optimizer updates (rules in the module docstring)."""
    updates = updates.sort_values("start_ns", kind="stable")
    t = updates["start_ns"].to_numpy(np.int64)
    number = updates["name"].astype(str).str.slice(len(UPDATE_MARK)).to_numpy()
    order = np.argsort(phases["start_ns"].to_numpy(np.int64), kind="stable")
    ps = phases["start_ns"].to_numpy(np.int64)[order]
    data = ps[(phases["name"].astype(object).to_numpy()[order] == "data")]
    first = _first_of_step(t, number, data)
    last = np.append(first[1:], True)
    begin, end = t[first], t[last]
    prev_end = np.concatenate(([np.iinfo(np.int64).min], end[:-1]))
    start = _first_phase_after(ps, prev_end, begin)
    tid = updates["tid"].to_numpy(np.int64)[last]
    pid = updates["pid"].to_numpy(np.int64)[last]
    return pd.DataFrame({"start_ns": start, "end_ns": end, "pid": pid, "tid": tid})


def _first_of_step(t: I64, number: np.ndarray, data: I64) -> npt.NDArray[np.bool_]:
    """Whether each update mark opens a new step: the first, one after a data wait began,
    or one whose optimizer already stepped in the step being built."""
    first = np.ones(len(t), dtype=bool)
    if len(t) < 2:
        return first
    # A data phase starting in (t[j-1], t[j]] separates marks j-1 and j.
    between = np.searchsorted(data, t[1:], side="right") > np.searchsorted(
        data, t[:-1], side="right"
    )
    if len(set(number.tolist())) == 1:
        return first  # one optimizer: each of its updates is a step
    seen: set[str] = set()
    for j in range(len(t)):  # several optimizers: a few marks per step
        if j and not between[j - 1] and number[j] not in seen:
            first[j] = False
        else:
            seen.clear()
        seen.add(str(number[j]))
    return first


def _first_phase_after(ps: I64, after: I64, until: I64) -> I64:
    """For each step: the start of the first phase range starting in ``(after, until]``;
    ``until`` itself when none does (an update with no phase before it)."""
    at = np.searchsorted(ps, after, side="right")
    found = at < len(ps)
    candidate = ps[np.minimum(at, max(len(ps) - 1, 0))] if len(ps) else until
    found &= candidate <= until
    return np.where(found, candidate, until).astype(np.int64)


def _forward_steps(phases: pd.DataFrame, backward_ends: pd.DataFrame) -> pd.DataFrame:
    """Steps of a process with no optimizer update: a training forward plus its backward."""
    phases = phases.sort_values("start_ns", kind="stable")
    names = phases["name"].astype(object).to_numpy()
    ps = phases["start_ns"].to_numpy(np.int64)
    pe = phases["end_ns"].to_numpy(np.int64)
    if not (names == "backward").any():
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _INSTANCE_COLUMNS})
    # A forward opens a step when no forward came before it since the last backward.
    is_fwd, is_bwd = names == "forward", names == "backward"
    seen_bwd = np.maximum.accumulate(np.where(is_bwd, np.arange(len(names)), -1))
    seen_fwd = np.maximum.accumulate(np.where(is_fwd, np.arange(len(names)), -1))
    prev_fwd = np.concatenate(([-1], seen_fwd[:-1]))
    opens = np.flatnonzero(is_fwd & (prev_fwd <= seen_bwd))
    # Pulled back to the data wait right before it.
    before = opens - 1
    pulled = (before >= 0) & (names[np.maximum(before, 0)] == "data")
    starts = np.where(pulled, ps[np.maximum(before, 0)], ps[opens])
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = _last_end(ps[opens[-1]], pe, backward_ends)
    rows = phases.iloc[opens]
    return pd.DataFrame({"start_ns": starts, "end_ns": ends,
                         "pid": rows["pid"].to_numpy(np.int64),
                         "tid": rows["tid"].to_numpy(np.int64)})  # fmt: skip


def _last_end(opened: int, phase_ends: I64, backward_ends: pd.DataFrame) -> int:
    """The last step's end: its last backward's end mark; else its phases' last end."""
    marks = backward_ends["start_ns"].to_numpy(np.int64)
    marks = marks[marks > opened]
    if len(marks):
        return int(marks.max())
    return int(phase_ends.max())
