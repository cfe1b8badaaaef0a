"""Projected epoch and training time: the steady step scaled up, plus what is not a step.

Place in the pipeline: report (the summary's ``projection`` group). A per-step projection
(steps x step time) misses what a real run also spends: start-up before the first step
(building the model and the dataset, creating the DataLoader, the warm-up steps' extra
time) and, every epoch, what runs between or after the steps (evaluation loops, logging,
checkpoints). Both are measured in the profile:

- ``startup``: from the program's start (its ``import torch``, where the annotation records
  the ``process`` fact; else the capture's start) to the first iteration, plus what the
  warm-up iterations took beyond the steady step; counted once per training run.
- ``outside`` (per epoch): time between steps (a step's ``between_before_ns``, the
  previous step's end to its start, plus, for key ranges that tile the run, an iteration's
  start to its first training-phase range: an evaluation loop between epochs), plus the
  time after the last step to the program's last recorded event (the final evaluation),
  divided by the epochs the profile covered (at least one).
- ``step``: each analysed iteration's wall time less its between-steps time; mean, p10, p90.

``epoch = steps_per_epoch x step + outside`` and ``train = startup + epochs x epoch``, each
for the mean, p10 and p90 step. Steps per epoch are ``--steps-per-epoch`` or the training
DataLoader's recorded ``len`` (the ``dataloader`` fact recorded inside a step) divided by
the batches one step consumed (gradient accumulation). Without either there is no
projection, and one warning says why: never a guessed number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.model import analysed, analysed_mask
from dlprof_lite.report.summary_types import Projection, Summary
from dlprof_lite.rules.names import DOMAIN, PHASES

# Every warning of this module starts with one of these (replaced when options change).
NO_PROJECTION = "no projected training time: "
CAVEAT = "projected training time: "
# The training phases that start a step's own work (compilation may run outside steps).
STEP_PHASES = tuple(p for p in PHASES if p != "compile")
# Facts the annotation writes at exit, after its own work there (its calibration, the FLOP
# count on fake tensors): not the program's work.
EXIT_FACTS = frozenset({"annotation", "flops"})


@dataclass(frozen=True)
class ProjectionInput:
    """What the user said: ``steps_per_epoch`` (None: from the DataLoader) and ``epochs``."""

    steps_per_epoch: int | None = None
    epochs: int | None = None


def project(
    profile: Profile, iterations: pd.DataFrame, given: ProjectionInput = ProjectionInput()
) -> tuple[dict[str, object], list[str]]:
    """The ``projection_*`` summary values and the warnings (one when there is none)."""
    values: dict[str, object] = {}
    epochs = given.epochs or 1
    analysed_steps = analysed_mask(iterations)
    kept = iterations[analysed_steps]
    if kept.empty:
        return values, [NO_PROJECTION + "no analysed training steps were found"]
    facts = _facts(profile)
    steps, source, why = _steps_per_epoch(profile, iterations, facts, given.steps_per_epoch)
    if steps is None:
        return values, [NO_PROJECTION + why]
    inside = _between_steps(iterations, _phase_starts(profile.ranges))
    step = kept["wall_ns"].to_numpy(np.float64) - inside[analysed_steps]
    mean = float(step.mean())
    p10, p90 = (float(v) for v in np.percentile(step, [10, 90]))
    startup = _startup(profile, facts, iterations, inside, mean)
    gaps = outside_steps(profile, iterations, facts)
    # Per epoch: what the profile saw outside steps, over the epochs it covered.
    seen = float(inside.sum()) + gaps["between_steps_ns"] + gaps["after_training_ns"]
    outside = seen / max(1, round(len(iterations) / steps))
    values.update(
        projection_steps_per_epoch=steps,
        projection_steps_source=source,
        projection_epochs=epochs,
        projection_step_ns=mean,
        projection_step_p10_ns=p10,
        projection_step_p90_ns=p90,
        projection_startup_ns=startup,
        projection_outside_ns=outside,
    )
    for suffix, per_step in (("", mean), ("_p10", p10), ("_p90", p90)):
        epoch = steps * per_step + outside
        values[f"projection_epoch{suffix}_ns"] = epoch
        values[f"projection_train{suffix}_ns"] = startup + epochs * epoch
    return values, _caveats(facts, len(iterations), steps)


def outside_steps(
    profile: Profile, iterations: pd.DataFrame, facts: list[_Fact] | None = None
) -> dict[str, int]:
    """``between_steps_ns``: the time from each step's end to the next one's start, summed
    (evaluation, logging, checkpoints); ``after_training_ns``: the last step's end to the
    program's last recorded event. Both 0 without steps."""
    if iterations.empty:
        return {"between_steps_ns": 0, "after_training_ns": 0}
    facts = _facts(profile) if facts is None else facts
    last = int(iterations["end_ns"].max())
    return {
        "between_steps_ns": int(iterations["between_before_ns"].sum()),
        "after_training_ns": _program_end(profile, facts, last) - last,
    }


def _startup(
    profile: Profile, facts: list[_Fact], iterations: pd.DataFrame, between: np.ndarray,
    mean: float,
) -> float:  # fmt: skip
    """Program start to the first iteration, plus the warm-up steps' time beyond the mean
    step (lazy initialisation, autotuning, compilation in the first steps).

    The program's start is its first ``process`` fact, recorded right after the script's
    ``import torch``: the interpreter's and torch's import time, and the profiler's own
    start-up before it, are not counted. Without that record: the capture's start.
    """
    starts = [f.start_ns for f in facts if f.key == "process"]
    origin = min(starts) if starts else profile.meta.session_start_ns
    before = int(iterations["start_ns"].min()) - origin
    warm = iterations["warmup"].to_numpy(dtype=bool)
    extra = iterations["wall_ns"].to_numpy(np.float64)[warm] - between[warm] - mean
    return before + float(np.clip(extra, 0, None).sum())


@dataclass(frozen=True)
class _Fact:
    start_ns: int
    key: str
    value: dict[str, object]


def _facts(profile: Profile) -> list[_Fact]:
    """The run facts with their times (report/run_facts.py reads them without)."""
    facts = profile.facts
    return [_Fact(int(t), str(k), v) for t, k, v in
            zip(facts["start_ns"].to_numpy(), facts["key"], facts["value"], strict=True)]


def _inside(times: np.ndarray, iterations: pd.DataFrame) -> np.ndarray:
    """Whether each time falls in some iteration ``[start, end]``."""
    ordered = iterations.sort_values("start_ns")
    t0 = ordered["start_ns"].to_numpy(np.int64)
    t1 = ordered["end_ns"].to_numpy(np.int64)
    at = np.searchsorted(t0, times, side="right") - 1
    found = at >= 0
    found[found] = times[found] <= t1[at[found]]
    return found


def _steps_per_epoch(
    profile: Profile, iterations: pd.DataFrame, facts: list[_Fact], given: int | None
) -> tuple[int | None, str, str]:
    """(steps per epoch, where it came from, why unknown)."""
    if given is not None:
        return given, "--steps-per-epoch", ""
    loaders = [f for f in facts if f.key == "dataloader"]
    times = np.array([f.start_ns for f in loaders], dtype=np.int64)
    # The training loader describes itself inside a step; an evaluation loader run before
    # training (a sanity check) is described outside every step.
    training = [f for f, ok in zip(loaders, _inside(times, iterations), strict=True) if ok]
    hint = ": pass --steps-per-epoch N"
    if not training:
        return None, "", ("no DataLoader length was recorded (no DataLoader fed the steps, or "
                          "the run was not profiled by dlprof-lite)" + hint)  # fmt: skip
    lengths = sorted({_length(f.value.get("length")) for f in training}, key=str)
    if None in lengths:
        return None, "", "the training DataLoader has no length (an IterableDataset?)" + hint
    if len(lengths) > 1:
        shown = ", ".join(str(n) for n in lengths)
        return None, "", f"DataLoaders of lengths {shown} fed the steps" + hint
    batches = int(lengths[0] or 0)
    per_step = _batches_per_step(profile.ranges, iterations)
    source = f"dataloader: {batches} batches" + (f", {per_step} per step" if per_step > 1 else "")
    return math.ceil(batches / per_step), source, ""


def _length(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _our_ranges(ranges: pd.DataFrame, names: tuple[str, ...]) -> pd.DataFrame:
    mine = cat_mask(ranges["name"], lambda s: s.isin(names)) & cat_mask(
        ranges["domain"], lambda s: s == DOMAIN
    )
    out: pd.DataFrame = ranges[mine]
    return out


def _batches_per_step(ranges: pd.DataFrame, iterations: pd.DataFrame) -> int:
    """Batches one analysed step fetched: its ``data`` ranges (several with gradient
    accumulation), the median over the steps; 1 when the profile has none."""
    starts = np.sort(_our_ranges(ranges, ("data",))["start_ns"].to_numpy(np.int64))
    window = analysed(iterations)
    lo = np.searchsorted(starts, window["start_ns"].to_numpy(np.int64), side="left")
    # [start, end): the next step's first data range may start where this one ends.
    hi = np.searchsorted(starts, window["end_ns"].to_numpy(np.int64), side="left")
    counts = hi - lo
    return max(1, int(np.median(counts))) if len(counts) else 1


def _phase_starts(ranges: pd.DataFrame) -> np.ndarray:
    return np.sort(_our_ranges(ranges, STEP_PHASES)["start_ns"].to_numpy(np.int64))


def _between_steps(iterations: pd.DataFrame, phase_starts: np.ndarray) -> np.ndarray:
    """Per iteration: from its start (the previous step's end) to its first training-phase
    range, the time that is no step (an evaluation loop between epochs); 0 without phase
    ranges, where the whole iteration counts as the step."""
    t0 = iterations["start_ns"].to_numpy(np.int64)
    t1 = iterations["end_ns"].to_numpy(np.int64)
    out = np.zeros(len(t0), dtype=np.float64)
    if not len(phase_starts):
        return out
    at = np.searchsorted(phase_starts, t0, side="left")
    ok = at < len(phase_starts)
    first = phase_starts[np.minimum(at, len(phase_starts) - 1)]
    ok &= first <= t1
    out[ok] = (first - t0)[ok]
    return out


def _program_end(profile: Profile, facts: list[_Fact], last_step_end: int) -> int:
    """The program's last recorded event: a closed range's end or a mark (not the exit
    facts, which follow the annotation's own work at exit)."""
    ranges = profile.ranges
    ends = ranges["end_ns"].to_numpy(np.int64)[ranges["closed"].to_numpy(dtype=bool)]
    marks = profile.marks["start_ns"].to_numpy(np.int64)
    exits = {f.start_ns for f in facts if f.key in EXIT_FACTS}
    marks = marks[~np.isin(marks, list(exits))] if exits else marks
    candidates = [last_step_end, *(int(a.max()) for a in (ends, marks) if len(a))]
    return max(candidates)


def _caveats(facts: list[_Fact], iterations: int, steps: int) -> list[str]:
    """What the projection could not see."""
    out = []
    if iterations < steps:
        out.append(
            CAVEAT + f"the profile holds {iterations} of an epoch's {steps} "
            "steps, so per-epoch work after an epoch's last step (evaluation, checkpoints) "
            "is counted only as far as the profile saw it"
        )
    if not any(f.key == "process" for f in facts):
        out.append(
            CAVEAT + "no record of the program's start (annotation off?), "
            "so start-up is counted from the capture's start"
        )
    return out


def reproject(
    summary: Summary, profile: Profile, iterations: pd.DataFrame, given: ProjectionInput
) -> Summary:
    """``summary`` with its projection (group and warnings) made for ``given`` instead."""
    values, warnings = project(profile, iterations, given)
    kept = [w for w in summary.warnings if not w.startswith((NO_PROJECTION, CAVEAT))]
    return replace(summary, projection=Projection.of(values), warnings=(*kept, *warnings))
