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
from dlprof_lite.compare.stats import Estimate, StepDelta, StepStats, step_delta, step_stats
from dlprof_lite.report.advice import ms
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
                {**asdict(d), "significant": d.significant, "line": verdict_line(d)}
                for d in self.steps
            ],
            "deltas": [d.row() for d in self.deltas],
            "warnings": list(self.warnings),
        }


def compare_sides(
    sides: Sequence[Side], *, resamples: int = rules.RESAMPLES, seed: int = rules.SEED
) -> Comparison:
    """Compare every side after the first with the first (see the module docstring)."""
    checks.refuse(sides)
    stats = tuple(step_stats(s) for s in sides)
    base = sides[0]
    steps = []
    deltas: list[Delta] = []
    warnings = checks.environment_warnings(sides)
    for other, other_stats in zip(sides[1:], stats[1:], strict=True):
        step = step_delta(base, other, resamples=resamples, seed=seed)
        steps.append(step)
        renames = renamed_layers(base, other)
        found = side_deltas(base, other, renames)
        deltas.extend(found)
        warnings += checks.command_warnings(base, other)
        warnings += checks.renamed_warnings(renames, base.label, other.label)
        warnings += checks.layer_warnings(found, base.label, other.label)
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


def signed_ms(ns: float) -> str:
    return ("+" if ns > 0 else "") + ms(ns)


def _interval(est: Estimate, pct: Estimate) -> str:
    if est.low is None or est.high is None:
        return "no interval: too few steps"
    text = f"95 % CI {signed_ms(est.low)} to {signed_ms(est.high)}"
    if pct.low is not None and pct.high is not None:
        text += f", {pct.low:+.1f} % to {pct.high:+.1f} %"
    return text


def p_text(p: float | None) -> str:
    return "p = ?" if p is None else f"p = {p:.2g}"


def verdict_line(d: StepDelta) -> str:
    """``B vs A: slower: median +6.02 ms (+6.0 %; 95 % CI ...), mean ..., p = 1e-09``."""
    return (
        f"{d.label} vs {d.baseline}: {d.verdict}: median {signed_ms(d.median_ns.value)} "
        f"({d.median_pct.value:+.1f} %; {_interval(d.median_ns, d.median_pct)}), mean "
        f"{signed_ms(d.mean_ns.value)} ({d.mean_pct.value:+.1f} %; "
        f"{_interval(d.mean_ns, d.mean_pct)}), Mann-Whitney {p_text(d.p_value)}"
    )
