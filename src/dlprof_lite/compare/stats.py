"""Step-time statistics of a side, and B - A with confidence intervals, a p-value and a verdict.

Place in the pipeline: compare (pure; sides in, frozen results out).

What is computed, over each side's analysed steps (``Side.step_ns()``, every run pooled):

- per side: n, mean, median, sample std, p10, p90 (linear), min, max; for a side of several
  runs also the within-run spread (pooled within-run std: ``sqrt(sum((n_r - 1) s_r^2) /
  sum(n_r - 1))``) and the between-run spread (sample std of the run means), apart;
- B - A for the mean and the median, in ns and in % of A's, each with a 95 % percentile
  bootstrap interval, and the two-sided Mann-Whitney U p-value of B's steps against A's
  (``scipy.stats.mannwhitneyu``, its automatic exact/asymptotic choice).

Intervals. Two single-run sides are two independent samples: ``scipy.stats.bootstrap``
resamples each on its own (percentile method, vectorized statistic, fixed seed). When a side
pools several runs its steps are not independent (a run's steps share that run's machine
state), so resampling steps alone would leave the run-to-run spread out of the interval.
scipy resamples observations only, so that case is resampled here with numpy, in two
stages: each resample draws the runs with replacement, then, for each drawn run, as many
steps as the slot's run had, with replacement from the drawn run (a single-run side is then
ordinary step resampling). The interval is the same percentile interval of the same
statistic.

Verdict: "slower" (or "faster") only when both hold: p < alpha (0.05), and the median
delta's 95 % interval lies wholly above (below) 0; otherwise "no significant change". Two
tests must agree because each misses something: Mann-Whitney treats pooled steps as
independent (too confident when runs differ), the interval captures the between-run spread
but alone is no test. A side with fewer than 2 steps gets no interval and no verdict but
"no significant change".
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from dlprof_lite.compare.side import Side
from dlprof_lite.rules import compare as rules

SLOWER, FASTER, NO_CHANGE = "slower", "faster", "no significant change"
BOOTSTRAP, HIERARCHICAL = "bootstrap", "hierarchical bootstrap"
# Resamples per vectorized batch: memory is batch x steps floats per side.
_BATCH = 250


@dataclass(frozen=True)
class StepStats:
    """One side's analysed step times, ns. ``within_run_std_ns``/``between_run_std_ns``:
    only for a side of several runs (None otherwise)."""

    label: str
    runs: int
    n: int
    mean_ns: float
    median_ns: float
    std_ns: float
    p10_ns: float
    p90_ns: float
    min_ns: float
    max_ns: float
    within_run_std_ns: float | None
    between_run_std_ns: float | None


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its confidence interval (None when it cannot be had)."""

    value: float
    low: float | None
    high: float | None

    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


@dataclass(frozen=True)
class StepDelta:
    """Side ``label`` minus the baseline side: mean and median, ns and % of the baseline's."""

    label: str
    baseline: str
    mean_ns: Estimate
    median_ns: Estimate
    mean_pct: Estimate
    median_pct: Estimate
    p_value: float | None
    verdict: str
    method: str
    resamples: int

    @property
    def significant(self) -> bool:
        return self.verdict != NO_CHANGE


def step_stats(side: Side) -> StepStats:
    """The descriptive statistics of ``side``'s pooled analysed steps (at least one)."""
    steps = side.step_ns()
    runs = [run.step_ns() for run in side.runs]
    within = between = None
    if len(runs) > 1:
        dof = sum(len(r) - 1 for r in runs)
        if dof > 0:
            sq = sum(float(np.var(r, ddof=1)) * (len(r) - 1) for r in runs if len(r) > 1)
            within = float(np.sqrt(sq / dof))
        between = float(np.std([float(np.mean(r)) for r in runs], ddof=1))
    p10, p90 = np.percentile(steps, [10, 90])
    return StepStats(
        label=side.label,
        runs=len(side.runs),
        n=int(steps.size),
        mean_ns=float(np.mean(steps)),
        median_ns=float(np.median(steps)),
        std_ns=float(np.std(steps, ddof=1)) if steps.size > 1 else 0.0,
        p10_ns=float(p10),
        p90_ns=float(p90),
        min_ns=float(np.min(steps)),
        max_ns=float(np.max(steps)),
        within_run_std_ns=within,
        between_run_std_ns=between,
    )


def _deltas(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """[mean B - A, median B - A, the same in % of A's], along ``axis`` (vectorized)."""
    mean_a, mean_b = np.mean(a, axis=axis), np.mean(b, axis=axis)
    med_a, med_b = np.median(a, axis=axis), np.median(b, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.stack([
            mean_b - mean_a,
            med_b - med_a,
            (mean_b / mean_a - 1.0) * 100.0,
            (med_b / med_a - 1.0) * 100.0,
        ])  # fmt: skip


def _scipy_interval(
    a: np.ndarray, b: np.ndarray, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate sample (all steps equal) warns
        result = sps.bootstrap(
            (a, b),
            _deltas,
            n_resamples=resamples,
            batch=_BATCH,
            vectorized=True,
            paired=False,
            axis=-1,
            confidence_level=rules.CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    ci = result.confidence_interval
    return np.asarray(ci.low, dtype=float), np.asarray(ci.high, dtype=float)


def _resample_runs(rng: np.random.Generator, runs: Sequence[np.ndarray], count: int) -> np.ndarray:
    """``count`` two-stage resamples of a side (runs, then steps within each drawn run),
    as a (count, steps) array."""
    sizes = np.array([r.size for r in runs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(list(runs))
    slot = np.repeat(np.arange(len(runs)), sizes)  # the run slot of each step position
    drawn = rng.integers(0, len(runs), size=(count, len(runs)))[:, slot]
    within = (rng.random((count, flat.size)) * sizes[drawn]).astype(np.int64)
    return flat[offsets[drawn] + within]


def _hierarchical_interval(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = []
    for start in range(0, resamples, _BATCH):
        count = min(_BATCH, resamples - start)
        parts.append(_deltas(_resample_runs(rng, a, count), _resample_runs(rng, b, count)))
    dist = np.concatenate(parts, axis=1)  # (4, resamples)
    tail = (1.0 - rules.CONFIDENCE) / 2.0 * 100.0
    low, high = np.nanpercentile(dist, [tail, 100.0 - tail], axis=1)
    return low, high


def _p_value(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size == 0 or b.size == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(sps.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    return p if np.isfinite(p) else None


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def verdict(p_value: float | None, median: Estimate, alpha: float = rules.ALPHA) -> str:
    """The rule of the module docstring: p < alpha and the median delta's CI excludes 0."""
    if p_value is None or p_value >= alpha or not median.excludes_zero():
        return NO_CHANGE
    return SLOWER if median.value > 0 else FASTER


def step_delta(
    baseline: Side,
    other: Side,
    *,
    resamples: int = rules.RESAMPLES,
    seed: int = rules.SEED,
    alpha: float = rules.ALPHA,
) -> StepDelta:
    """``other`` minus ``baseline``: mean and median deltas with intervals, p and verdict."""
    a, b = baseline.step_ns(), other.step_ns()
    point = _deltas(a, b)
    hierarchical = len(baseline.runs) > 1 or len(other.runs) > 1
    low: list[float | None] = [None] * 4
    high: list[float | None] = [None] * 4
    if a.size > 1 and b.size > 1:
        if hierarchical:
            lo, hi = _hierarchical_interval(
                [r.step_ns() for r in baseline.runs], [r.step_ns() for r in other.runs],
                resamples, seed,
            )  # fmt: skip
        else:
            lo, hi = _scipy_interval(a, b, resamples, seed)
        low, high = [_finite(v) for v in lo], [_finite(v) for v in hi]
    est = [Estimate(float(point[i]), low[i], high[i]) for i in range(4)]
    p = _p_value(a, b)
    return StepDelta(
        label=other.label,
        baseline=baseline.label,
        mean_ns=est[0],
        median_ns=est[1],
        mean_pct=est[2],
        median_pct=est[3],
        p_value=p,
        verdict=verdict(p, est[1], alpha),
        method=HIERARCHICAL if hierarchical else BOOTSTRAP,
        resamples=resamples,
    )
