"""The regression gate: should a CI pipeline stop because a side got slower?

Place in the pipeline: compare (pure; the CLI turns ``failed`` into exit code 1). With runs
on a side to test (:mod:`dlprof_lite.compare.stats`), a side fails when its median step is
slower than the baseline's by more than ``pct`` % (the point estimate) and the run-level
test calls it slower (p < alpha). With one run a side nothing is tested (the run-to-run
spread is unknown): it fails only when the change is beyond ``pct`` % *and* beyond the
one-run minimum effect (``MIN_EFFECT_FACTOR`` x the within-run spread, half the p10-p90
range of the steps in % of their median), and the line says that this is no significance
test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlprof_lite.compare.checks import CompareError
from dlprof_lite.compare.comparison import Comparison, p_text
from dlprof_lite.compare.stats import SLOWER, StepDelta
from dlprof_lite.rules.compare import MIN_EFFECT_FACTOR


@dataclass(frozen=True)
class GateResult:
    """``line``: one sentence saying why it failed or passed (without a ``gate:`` prefix)."""

    failed: bool
    line: str


def _fails(d: StepDelta, pct: float) -> bool:
    if d.tested:
        return d.verdict == SLOWER and d.median_pct.value > pct
    minimum = d.minimum_effect_pct
    return minimum is not None and d.median_pct.value > max(pct, minimum)


def _describe(d: StepDelta) -> str:
    change = d.median_pct.value
    how = "slower" if change > 0 else "faster"
    head = f"{d.label}'s median step is {abs(change):.1f} % {how} than {d.baseline}'s"
    if d.tested:
        runs = f"{d.runs_side} vs {d.runs_baseline} runs"
        return f"{head} ({d.verdict}, {p_text(d.p_value)}, {runs})"
    return (f"{head} (one run a side, not a significance test: the gate needs a slowdown "
            f"beyond its limit and beyond {MIN_EFFECT_FACTOR:g} x the steps' own spread, "
            f"{d.minimum_effect_pct:.1f} %; repeat each side to test it)")  # fmt: skip


def gate(comparison: Comparison, pct: float) -> GateResult:
    """Fail when a side is slower than the baseline by more than ``pct`` % as the module
    docstring says (tested on runs, or beyond the one-run minimum effect)."""
    if not math.isfinite(pct) or pct < 0:
        raise CompareError(f"--gate needs a percentage >= 0, not {pct}")
    failing = [d for d in comparison.steps if _fails(d, pct)]
    if failing:
        parts = "; ".join(_describe(d) for d in failing)
        return GateResult(True, f"failed: {parts}, over the {pct:g} % limit")
    parts = "; ".join(_describe(d) for d in comparison.steps)
    return GateResult(False, f"passed ({pct:g} % limit): {parts}")
