"""The result of ``compare``: one frozen :class:`Comparison` built from a list of sides.

Place in the pipeline: compare (stage after store). :func:`compare_sides` is the one entry:
the first side is the baseline A, every other side B is compared with it. It refuses sides
that cannot be compared (:mod:`dlprof_lite.compare.checks`), then gathers each side's step
statistics (:mod:`~dlprof_lite.compare.stats`), each B's step-time delta with its interval,
p-value and verdict, the per-phase/layer/kernel deltas (:mod:`~dlprof_lite.compare.deltas`)
and the warnings. The console, the files and the gate read only this object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dlprof_lite.compare import checks
from dlprof_lite.compare.deltas import Delta, renamed_layers, side_deltas
from dlprof_lite.compare.side import Side
from dlprof_lite.compare.stats import (
    WELCH,
    Estimate,
    StepDelta,
    StepStats,
    step_delta,
    step_stats,
)
from dlprof_lite.durations import signed
from dlprof_lite.rules import compare as rules


@dataclass(frozen=True)
class Comparison:
    """``sides``: every side's step statistics, the baseline first; ``steps``: one step-time
    delta per other side; ``deltas``: every section's ranked deltas of every other side."""

    baseline: str
    sides: tuple[StepStats, ...]
    steps: tuple[StepDelta, ...]
    deltas: tuple[Delta, ...]
    warnings: tuple[str, ...]
    alpha: float
    confidence: float
    resamples: int
    seed: int

    def section(self, section: str, label: str) -> list[Delta]:
        """One section's deltas of side ``label``, ranked."""
        return [d for d in self.deltas if d.section == section and d.label == label]

    def document(self) -> dict[str, Any]:
        """Plain data (dicts, lists, numbers, strings, None) for ``json.dumps``."""
        return {
            "baseline": self.baseline,
            "settings": {
                "alpha": self.alpha,
                "confidence": self.confidence,
                "resamples": self.resamples,
                "seed": self.seed,
            },
            "sides": [asdict(s) for s in self.sides],
            "steps": [
                {**asdict(d), "significant": d.significant, "tested": d.tested,
                 "line": verdict_line(d)}
                for d in self.steps
            ],
            "deltas": [d.row() for d in self.deltas],
            "warnings": list(self.warnings),
        }


def compare_sides(
    sides: Sequence[Side],
    *,
    resamples: int = rules.RESAMPLES,
    seed: int = rules.SEED,
    detectable: float = rules.DETECTABLE_CHANGE,
) -> Comparison:
    """Compare every side after the first with the first (see the module docstring);
    ``detectable``: the relative change the run-level power is given for (the gate's)."""
    checks.refuse(sides)
    stats = tuple(step_stats(s) for s in sides)
    base = sides[0]
    steps = []
    deltas: list[Delta] = []
    warnings = checks.environment_warnings(sides)
    for other, other_stats in zip(sides[1:], stats[1:], strict=True):
        step = step_delta(base, other, resamples=resamples, seed=seed, detectable=detectable)
        steps.append(step)
        renames = renamed_layers(base, other)
        found = side_deltas(base, other, renames)
        deltas.extend(found)
        warnings += checks.command_warnings(base, other)
        warnings += checks.renamed_warnings(renames, base.label, other.label)
        warnings += checks.layer_warnings(found, base.label, other.label,
                                          checks.folded_layers(base, other))  # fmt: skip
        if not step.significant:  # a change was found: the steps were enough to find it
            warnings += checks.steps_warnings(stats[0], other_stats)
    return Comparison(
        baseline=base.label,
        sides=stats,
        steps=tuple(steps),
        deltas=tuple(deltas),
        warnings=tuple(warnings),
        alpha=rules.ALPHA,
        confidence=rules.CONFIDENCE,
        resamples=resamples,
        seed=seed,
    )


def _pct_interval(pct: Estimate) -> str:
    if pct.low is None or pct.high is None:
        return "no interval: too few steps"
    return f"95 % CI {pct.low:+.1f} % to {pct.high:+.1f} %"


def p_text(p: float | None) -> str:
    return "p = ?" if p is None else f"p = {p:.2g}"


def _tested_tail(d: StepDelta) -> str:
    """How the run-level test was made, and what it could see."""
    test = "Welch t-test" if d.method == WELCH else "t-test against the other side's runs"
    text = (f"{test} on run medians, {p_text(d.p_value)}, {d.runs_side} vs {d.runs_baseline} "
            f"runs, between-run spread {d.between_run_pct or 0.0:.1f} %")  # fmt: skip
    if d.power is not None:
        text += f"; power {d.power * 100:.0f} % to detect a {d.detectable_pct:g} % change"
        if d.power < rules.POWER:
            more = (f"{d.runs_needed} runs a side" if d.runs_needed is not None
                    else f"more than {rules.MAX_RUNS} runs a side")  # fmt: skip
            text += f" ({more} for {rules.POWER * 100:.0f} %)"
    if d.p_value is not None and d.p_value < rules.ALPHA and not d.significant:
        text += (f"; within the minimum effect, {d.minimum_effect_pct or 0.0:.1f} % "
                 f"({rules.MIN_EFFECT_FACTOR:g} x the steps' own spread), where a change "
                 f"needs p < {rules.SMALL_CHANGE_ALPHA:g}")  # fmt: skip
    return text


def verdict_line(d: StepDelta) -> str:
    """One line: the verdict, the median's and the mean's change, how it was judged."""
    head = (f"{d.label} vs {d.baseline}: {d.verdict}: median {signed(d.median_ns.value)} "
            f"({d.median_pct.value:+.1f} %, ")  # fmt: skip
    mean = f"mean {signed(d.mean_ns.value)} ({d.mean_pct.value:+.1f} %)"
    if not d.tested:
        return (head + f"within-run {_pct_interval(d.within_median_pct)}), {mean}; the "
                "run-to-run spread is unknown, so no significance is claimed: repeat each "
                "side (--repeat 3) to test it")  # fmt: skip
    return (head + f"{_pct_interval(d.median_pct)} between runs, within-run "
            f"{_pct_interval(d.within_median_pct).removeprefix('95 % CI ')}), {mean}; "
            + _tested_tail(d))  # fmt: skip
