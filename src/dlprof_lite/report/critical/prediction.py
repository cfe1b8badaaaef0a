"""What a what-if asks and answers: a :class:`Scale` (``--scale KIND=WHAT:FACTOR``) and
a :class:`Prediction`, plain values (the Report's model names them; the replay is in
:mod:`dlprof_lite.report.critical.whatif`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from dlprof_lite.errors import InputError
from dlprof_lite.rules.critical import SCALE_KINDS


@dataclass(frozen=True)
class Scale:
    kind: str
    what: str
    factor: float

    @staticmethod
    def parse(text: str) -> Scale:
        """``layer=conv2:0.5``, ``phase=data:0``, ``kernel=REGEX:0.8``."""
        kind, sep, rest = text.partition("=")
        what, colon, number = rest.rpartition(":")
        if not sep or not colon or kind not in SCALE_KINDS or not what:
            raise InputError(f"--scale {text!r}: write KIND=WHAT:FACTOR with KIND one of "
                             f"{', '.join(SCALE_KINDS)}, e.g. layer=conv2:0.5")  # fmt: skip
        try:
            factor = float(number)
        except ValueError:
            factor = math.nan
        if not (factor >= 0 and math.isfinite(factor)):
            raise InputError(f"--scale {text!r}: the factor must be a number >= 0 (0 removes "
                             f"the work, 0.5 halves it), not {number!r}")  # fmt: skip
        if kind == "kernel":
            try:
                re.compile(what)
            except re.error as err:
                raise InputError(f"--scale {text!r}: invalid regular expression: {err}") from None
        return Scale(kind, what, factor)

    def __str__(self) -> str:
        return f"{self.kind}={self.what}:{self.factor:g}"


@dataclass(frozen=True)
class Prediction:
    """Observed and predicted step times (ns) of the analysed steps, and the notes."""

    scales: tuple[Scale, ...]
    observed: np.ndarray
    predicted: np.ndarray
    selected: tuple[int, ...]  # nodes each scale selected
    notes: tuple[str, ...]

    @staticmethod
    def _stats(values: np.ndarray) -> tuple[float, float, float]:
        if values.size == 0:
            return math.nan, math.nan, math.nan
        p10, med, p90 = np.percentile(values, [10, 50, 90])
        return float(med), float(p10), float(p90)

    @property
    def observed_stats(self) -> tuple[float, float, float]:
        return self._stats(self.observed)

    @property
    def predicted_stats(self) -> tuple[float, float, float]:
        return self._stats(self.predicted)

    @property
    def change_pct(self) -> float:
        before, after = self.observed_stats[0], self.predicted_stats[0]
        return (after - before) / before * 100 if before > 0 else math.nan
