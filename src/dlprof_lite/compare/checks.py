"""Apples to apples: what makes a comparison unfair (a warning) or meaningless (a refusal).

Place in the pipeline: compare (pure). Refusals raise :class:`CompareError` (one line, exit 2):
fewer than two sides; a side with no analysed steps; kernels captured on one side and none
on the other (a capture that lost the GPU trace must never pass as "faster"; two CPU-only
runs with no kernels at all compare fine); a side with far fewer steps than the baseline
(rules/compare.py ``FAR_FEWER_RATIO``). Warnings are one line each: a different machine or
software stack, script or arguments, key range or table scope; layers whose calls per step
changed (a layer folded into its parent in some run is named apart, never as a changed
model), or that one side lacks; layer names that changed (a run named before wrappers were
seen through); too few steps for the statistics, with how many are needed.
An unknown value (None) is never a difference.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd
from scipy import stats as sps

from dlprof_lite.compare.deltas import ADDED, BOTH, LAYER, REMOVED, Delta
from dlprof_lite.compare.side import Side
from dlprof_lite.compare.stats import StepStats
from dlprof_lite.errors import DlprofError
from dlprof_lite.report.summary_types import number
from dlprof_lite.report.units import flops as flop_text
from dlprof_lite.rules import compare as rules
from dlprof_lite.store.record import RunRecord


class CompareError(DlprofError):
    """Two sides that cannot be compared: the one line says which and why."""


# Summary fields that should match between the sides (name as shown, field).
ENVIRONMENT = (
    ("GPU", "gpu_names"),
    ("driver", "driver_version"),
    ("CUDA", "cuda_version"),
    ("torch", "torch_version"),
    ("Python", "python_version"),
    ("nsys", "nsys_version"),
    ("host", "host"),
    ("key range", "key_range"),
    ("table scope", "window_scope"),
)


def run_name(run: RunRecord, index: int) -> str:
    """How a run is named in a message: its store id, its report folder, or its place."""
    if run.run_id is not None:
        return f"run #{run.run_id}"
    return run.context.report_dir or f"run {index + 1}"


def has_kernels(run: RunRecord) -> bool:
    count = number(run.summary.totals.kernel_count)
    return bool(count) or not run.kernels.empty


def refuse(sides: Sequence[Side]) -> None:
    """Raise :class:`CompareError` when the sides cannot be compared at all."""
    if len(sides) < 2:
        raise CompareError("compare needs a baseline and at least one other side")
    for side in sides:
        if not side.runs:
            raise CompareError(f"{side.label}: no runs to compare")
        for i, run in enumerate(side.runs):
            if run.step_ns().size == 0:
                where = f" ({run_name(run, i)})" if len(side.runs) > 1 else ""
                raise CompareError(
                    f"{side.label}{where}: no analysed steps (the profile has no iterations, "
                    "or the window left none out of warm-up); nothing to compare"
                )
    _refuse_kernel_mismatch(sides)
    base = sides[0]
    for other in sides[1:]:
        _refuse_far_fewer(base, other)


def _refuse_kernel_mismatch(sides: Sequence[Side]) -> None:
    with_k = [s.label for s in sides if any(has_kernels(r) for r in s.runs)]
    without = [s.label for s in sides if not all(has_kernels(r) for r in s.runs)]
    if with_k and without:
        raise CompareError(
            f"{', '.join(with_k)} captured GPU kernels and {', '.join(without)} none (or not "
            "in every run): a capture without kernels (CPU-only, or nsys missed the GPU trace) "
            "cannot be compared with one that has them"
        )


def _refuse_far_fewer(base: Side, other: Side) -> None:
    n_a, n_b = base.step_ns().size, other.step_ns().size
    small, large = min(n_a, n_b), max(n_a, n_b)
    if small * rules.FAR_FEWER_RATIO < large:
        few, many = (base, other) if n_a < n_b else (other, base)
        raise CompareError(
            f"{few.label} has {small} analysed steps and {many.label} {large}: fewer than "
            f"1/{rules.FAR_FEWER_RATIO:g} of the other's is another capture, not another "
            "sample; profile comparable windows (--iter-start/--iter-stop)"
        )


def _values(side: Side, field: str) -> list[str]:
    """The distinct known values of a summary field over a side's runs, in run order."""
    seen: dict[str, None] = {}
    for run in side.runs:
        value = run.summary.metrics().get(field)
        if value is None and field == "host":
            value = run.context.host
        if value is not None and str(value) != "":
            seen[str(value)] = None
    return list(seen)


def environment_warnings(sides: Sequence[Side]) -> list[str]:
    out = []
    for shown, field in ENVIRONMENT:
        values = {s.label: _values(s, field) for s in sides}
        for label, vals in values.items():
            if len(vals) > 1:
                out.append(f"{label} pools runs of different {shown}: {', '.join(vals)}")
        base = sides[0].label
        for side in sides[1:]:
            a, b = values[base], values[side.label]
            if a and b and set(a) != set(b):
                out.append(f"different {shown}: {base} {', '.join(a)}; {side.label} {', '.join(b)}")
    return out


def _command(run: RunRecord) -> tuple[str, ...]:
    if run.context.command:
        return run.context.command
    text = run.summary.system.command
    try:
        return tuple(shlex.split(text)) if isinstance(text, str) and text else ()
    except ValueError:  # unbalanced quotes in a recorded command: compare it whole
        return (str(text),)


def _short(words: Iterable[str], width: int = 60) -> str:
    text = shlex.join(list(words))
    return text if len(text) <= width else text[: width - 3] + "..."


def command_warnings(base: Side, other: Side) -> list[str]:
    """Different script, else different command line, when both sides know theirs."""
    scripts = [{r.context.script for r in s.runs} - {None} for s in (base, other)]
    if scripts[0] and scripts[1] and scripts[0] != scripts[1]:
        a, b = (", ".join(sorted(str(x) for x in s)) for s in scripts)
        return [f"different script: {base.label} {a}; {other.label} {b}"]
    commands = [{_command(r) for r in s.runs} - {()} for s in (base, other)]
    if commands[0] and commands[1] and commands[0] != commands[1]:
        a, b = (_short(sorted(s)[0]) for s in commands)
        return [f"different command line: {base.label} `{a}`; {other.label} `{b}`"]
    return []


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[: rules.WARN_NAMES])
    more = len(names) - rules.WARN_NAMES
    return shown + (f" (+{more} more)" if more > 0 else "")


def folded_layers(*sides: Side) -> set[str]:
    """Layers the annotation folded into their parent in some run of the sides (too short
    to time: after the warm-up step they wrote no ranges, so they count no calls there)."""
    out: set[str] = set()
    for side in sides:
        for run in side.runs:
            layers = run.layers
            if "folded_call_ns" in layers and "layer" in layers:
                folded = pd.to_numeric(layers["folded_call_ns"], errors="coerce") > 0
                out.update(str(n) for n in layers.loc[folded, "layer"])
    return out


def layer_warnings(
    deltas: Sequence[Delta], base: str, label: str, folded: Iterable[str] = ()
) -> list[str]:
    """Layers whose forward calls per step differ, and layers on one side only. A layer
    ``folded`` in some run is no "changed model": whether a module is short enough to fold
    is decided run by run, and a folded run counts none of its calls; it gets a line of
    its own."""
    skip = set(folded)
    calls = [d for d in deltas if d.section == LAYER and d.metric == "calls_per_step"]
    changed = [
        f"{d.name} {d.baseline_value:g} -> {d.value:g}"
        for d in calls
        if d.status == BOTH
        and d.name not in skip
        and d.value is not None
        and d.baseline_value is not None
        and abs(d.value - d.baseline_value)
        > rules.CALLS_TOLERANCE * max(abs(d.value), abs(d.baseline_value))
    ]
    out = []
    if changed:
        out.append(
            f"layer calls per step differ ({label} vs {base}: a changed model or batch?): "
            + _names(changed)
        )
    work = _flops_changed(deltas, skip)
    if work:
        out.append(
            f"layer FLOPs per step differ ({label} vs {base}: the two sides do different work, "
            "a widened layer or another batch or sequence length; their times are not a speed "
            "comparison): " + _names(work)
        )
    for status, who in ((ADDED, label), (REMOVED, base)):
        only = [d.name for d in calls if d.status == status]
        if only:
            out.append(f"layers only in {who}: {_names(only)}")
    shown = sorted(skip & {d.name for d in calls})
    if shown:
        out.append(
            "layers folded into their parent in some runs (too short to time; their calls "
            f"and time are their parent's there): {_names(shown)}"
        )
    return out


def _flops_changed(deltas: Sequence[Delta], skip: set[str]) -> list[str]:
    """Layers (both sides counted) whose forward + backward FLOPs per step differ."""
    totals: dict[str, list[float]] = {}
    for d in deltas:
        if (d.section == LAYER and d.metric == "flops" and d.status == BOTH
                and d.name not in skip and d.value is not None and d.baseline_value is not None):
            pair = totals.setdefault(d.name, [0.0, 0.0])
            pair[0] += d.baseline_value
            pair[1] += d.value
    return [
        f"{name} {flop_text(old)} -> {flop_text(new)}"
        for name, (old, new) in totals.items()
        if old > 0 and new > 0
        and abs(new - old) > rules.CALLS_TOLERANCE * max(abs(new), abs(old))
    ]


def renamed_warnings(renames: Mapping[str, str], base: str, label: str) -> list[str]:
    """One line when layers were matched across a change of names (:func:`~dlprof_lite.
    compare.deltas.renamed_layers`): a side stored before wrappers were seen through."""
    if not renames:
        return []
    pairs = [f"{old} -> {new}" for old, new in renames.items()]
    return [
        f"layer names changed between {base} and {label} (a wrapper's attribute, such as "
        f"module. or _lightning_module., is no longer part of them): {len(pairs)} layers "
        "matched without it: " + _names(pairs)
    ]


def steps_needed(a: StepStats, b: StepStats) -> int:
    """Steps a side needs to detect a DETECTABLE_CHANGE of A's mean at POWER and ALPHA at
    the observed spread (two-sample normal approximation), at least MIN_STEPS."""
    sigma2 = (a.std_ns**2 + b.std_ns**2) / 2.0
    delta = rules.DETECTABLE_CHANGE * a.mean_ns
    z = sps.norm.ppf(1.0 - rules.ALPHA / 2.0) + sps.norm.ppf(rules.POWER)
    needed = math.ceil(2.0 * z * z * sigma2 / (delta * delta)) if delta > 0 else rules.MIN_STEPS
    return max(needed, rules.MIN_STEPS)


def steps_warnings(a: StepStats, b: StepStats) -> list[str]:
    """Too few steps for the within-run figures (the runs' own levels); too few runs for
    the run-level test is the verdict line's (its power and the runs needed)."""
    needed = steps_needed(a, b)
    if a.n >= needed and b.n >= needed:
        return []
    return [
        f"too few steps for the statistics: {a.label} {a.n}, {b.label} {b.n}; detecting a "
        f"{rules.DETECTABLE_CHANGE:.0%} change of the mean ({rules.POWER:.0%} power, alpha "
        f"{rules.ALPHA:g}) at the observed spread needs about {needed} steps a side"
    ]
