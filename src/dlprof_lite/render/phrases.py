"""The phrases the console and the page share, so that both say what the JSON says.

Place in the pipeline: report (rendering). Each share is written with its named denominator
(report/denominators.py: the summary's ``*_scope`` fields); a step time is written with one
spread, p10-p90 of the analysed steps (``iterations_p10_ns``/``iterations_p90_ns``), never
beside a second one (a CV on a run with one slow outlier says 204 % where p10-p90 says
10-13 ms).
"""

from __future__ import annotations

from dlprof_lite.report.summary_types import Summary
from dlprof_lite.report.units import duration, of_scope, percent


def share_of(value: object, scope: object, *, scale: float = 100.0) -> str:
    """``7.0% of the session``; ``-`` when the share is unknown."""
    shown = percent(value, scale)
    return shown if shown == "-" else f"{shown} of {of_scope(scope)}"


def tc_phrase(s: Summary) -> str:
    """``62.0% of the kernel time whose names tell (names cannot tell: 10.0%, 8.0% inferred
    tc)``: the Tensor Core share over known kernels, the unknown share beside it."""
    tc = s.tensor_cores
    if tc.tc_share is None and not tc.tc_unknown_share:
        return "-"
    text = f"{percent(tc.tc_share)} of the kernel time whose names tell"
    if tc.tc_unknown_share:
        inferred = ""
        if tc.tc_inferred_ns and s.totals.kernel_ns:
            inferred = f", {percent(tc.tc_inferred_ns / s.totals.kernel_ns)} tc (inferred)"
        text += f" (names cannot tell: {percent(tc.tc_unknown_share)} of kernel time{inferred})"
    return text


def step_phrase(s: Summary) -> str:
    """``12.1 ms median (p10–p90 10.2 ms–13.0 ms)``: the analysed steps' median with its
    spread; ``-`` without steps."""
    it = s.iterations
    if it.iterations_median_ns is None:
        return "-"
    spread = ""
    if it.iterations_p10_ns is not None and it.iterations_p90_ns is not None:
        spread = (f" (p10–p90 {duration(it.iterations_p10_ns)}–"
                  f"{duration(it.iterations_p90_ns)})")  # fmt: skip
    return f"{duration(it.iterations_median_ns)} median{spread}"
