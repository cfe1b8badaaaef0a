"""The regression gate: should a CI pipeline stop because a side got slower?

Place in the pipeline: compare (pure; the CLI turns ``failed`` into exit code 1). A side
fails the gate when both hold: its median step time is slower than the baseline's by more
than ``pct`` % (the point estimate), and the difference is significant by the comparison's
verdict rule (Mann-Whitney p < alpha and the median delta's 95 % interval above 0; see
:mod:`dlprof_lite.compare.stats`). A slowdown within ``pct`` %, or one that the statistics
cannot tell from noise, passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlprof_lite.compare.checks import CompareError
from dlprof_lite.compare.comparison import Comparison, p_text
from dlprof_lite.compare.stats import SLOWER, StepDelta


@dataclass(frozen=True)
class GateResult:
    """``line``: one sentence saying why it failed or passed (without a ``gate:`` prefix)."""

    failed: bool
    line: str


def _fails(d: StepDelta, pct: float) -> bool:
    return d.verdict == SLOWER and d.median_pct.value > pct


def _describe(d: StepDelta) -> str:
    change = d.median_pct.value
    how = "slower" if change > 0 else "faster"
    return (
        f"{d.label}'s median step is {abs(change):.1f} % {how} than {d.baseline}'s "
        f"({d.verdict}, {p_text(d.p_value)})"
    )


def gate(comparison: Comparison, pct: float) -> GateResult:
    """Fail when any side is significantly slower than the baseline by more than ``pct`` %."""
    if not math.isfinite(pct) or pct < 0:
        raise CompareError(f"--gate needs a percentage >= 0, not {pct}")
    failing = [d for d in comparison.steps if _fails(d, pct)]
    if failing:
        parts = "; ".join(_describe(d) for d in failing)
        return GateResult(True, f"failed: {parts}, over the {pct:g} % limit")
    parts = "; ".join(_describe(d) for d in comparison.steps)
    return GateResult(False, f"passed ({pct:g} % limit): {parts}")
