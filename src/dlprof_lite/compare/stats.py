"""Step-time statistics of a side, and B - A: its size, a within-run interval, a test on runs.

Place in the pipeline: compare (pure; sides in, frozen results out).

Why runs, not steps, are the samples. A run's steps share one machine state (other load,
clocks, caches, thermal state), so they are not independent samples of the code's speed: a
test over pooled steps answers "were these two runs different", which a rerun of unchanged
code on a loaded machine answers "yes" at p = 1e-8. The statistics work at two levels:

- **Within runs** (every comparison): B - A of the median and of the mean step, with a 95 %
  *moving-block bootstrap* interval (Kuensch, Annals of Statistics 1989): each run's steps
  are resampled in contiguous blocks of ``round(n^(1/3))`` steps (the order Hall, Horowitz
  & Jing, Biometrika 1995, give for the optimal block), so a slow stretch of neighbouring
  steps stays together and autocorrelation widens the interval as it should; runs are kept
  as they are. It says how precisely each run's own level is known, not how far a rerun
  would move it.
- **Between runs** (at least three runs in all, one side with two or more): each run's
  median step is one sample, on a log scale (load slows a run by a factor). B - A is the
  difference of the sides' mean log run medians, shown as the ratio of their geometric
  means in % and as that ratio's ns. The test: Welch's t-test when both sides have two or
  more runs (it keeps its level when the sides' spreads differ, as a loaded machine makes
  them; on the study's unchanged pairs of three runs a side, ``scripts/compare_study.py``,
  Student's pooled test called 7 of 40 slower or faster, Welch's 4), else a t-test of the
  single run against the other side's runs (their spread standing for both sides',
  ``df = runs - 1``), with the matching t interval. The power the test had to
  detect a change of the size that matters (the gate's, else ``DETECTABLE_CHANGE``) and the
  runs a side that would give ``POWER`` for it come from the noncentral t distribution at
  the observed between-run spread.

Verdicts. "slower" or "faster" only from the run-level test: p < alpha for a change beyond
the *minimum effect* (below), p < ``SMALL_CHANGE_ALPHA`` for one within it. Three run medians
of unchanged code that sit at one end of a skewed range pass Welch's test more often than
alpha says (3 of 20 unchanged pairs spread in time, in the study), and such a change is
small beside the steps' own scatter; runs that agree closely give far smaller p values.
The step's test is the comparison's first question and keeps
the whole alpha; the layers' tests are a family of their own (Holm,
:func:`dlprof_lite.compare.deltas.layer_tests`). In the study, one family for the step and
the layers kept unchanged pairs clean but called a 51 % slowdown with three runs a side "no
significant change" once a dozen layers shared the alpha; a variance prior from the layers
(Smyth's moderated t) found more but called more unchanged pairs slower.

The *minimum effect*: ``MIN_EFFECT_FACTOR`` times the within-run spread
(:func:`step_spread_pct`, the larger side's), the change that stands out of how far the
steps themselves scatter. With one run a side the run-to-run spread is unknown: the verdict
is "not tested (one run a side)", with the effect size and the within-run interval, and the
gate fails on one run only beyond its limit and the minimum effect. The interval's own
half-width would not do as the minimum: with many steps it is narrow, while a rerun of
unchanged code moves the median by about as much as the steps scatter (the study:
``scripts/compare_study.py``).
With one run a side, the point estimates are plain: median(B) - median(A), mean(B) - mean(A).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from dlprof_lite.compare.side import Side
from dlprof_lite.rules import compare as rules

SLOWER, FASTER, NO_CHANGE = "slower", "faster", "no significant change"
UNTESTED = "not tested (one run a side)"
ONE_RUN = "one run a side: moving-block bootstrap within the runs"
WELCH = "runs: Welch t-test on log run medians"
AGAINST_SPREAD = "runs: t-test of the single run against the other side's runs"
# Resamples per vectorized batch: memory is batch x steps floats per run.
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
    """Side ``label`` minus the baseline side (see the module docstring).

    ``mean_ns``/``median_ns``/``mean_pct``/``median_pct``: the change with the interval of
    ``method`` (between runs when tested, else within runs); ``within_median_ns``/
    ``within_median_pct``: the within-run interval of the median's change, always;
    ``p_value``: the run-level test's (None with one run a side); ``between_run_pct``: the
    between-run spread the test saw (sd of log run medians, in %); ``minimum_effect_pct``:
    ``MIN_EFFECT_FACTOR`` x :func:`step_spread_pct` (with runs, a change within it needs
    p < ``SMALL_CHANGE_ALPHA``; one run a side, the gate fails only beyond it); ``power``:
    the test's power to detect ``detectable_pct``; ``runs_needed``: runs a side for
    ``POWER`` at it."""

    label: str
    baseline: str
    mean_ns: Estimate
    median_ns: Estimate
    mean_pct: Estimate
    median_pct: Estimate
    within_median_ns: Estimate
    within_median_pct: Estimate
    p_value: float | None
    verdict: str
    method: str
    runs_baseline: int
    runs_side: int
    between_run_pct: float | None
    minimum_effect_pct: float | None
    detectable_pct: float
    power: float | None
    runs_needed: int | None
    resamples: int

    @property
    def significant(self) -> bool:
        return self.verdict in (SLOWER, FASTER)

    @property
    def tested(self) -> bool:
        return self.verdict != UNTESTED


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


# --- within runs: the moving-block bootstrap ---------------------------------------------


def block_length(n: int) -> int:
    """Steps per block for a run of ``n`` steps: ``round(n^(1/3))``, at least 1."""
    size: int = round(n ** (1.0 / 3.0))
    return max(1, size)


def block_resample(rng: np.random.Generator, steps: np.ndarray, count: int) -> np.ndarray:
    """``count`` moving-block resamples of one run's steps, as a (count, n) array: blocks of
    :func:`block_length` contiguous steps, starts drawn uniformly, cut to ``n``."""
    n = steps.size
    size = block_length(n)
    blocks = math.ceil(n / size)
    starts = rng.integers(0, n - size + 1, size=(count, blocks))
    index = (starts[:, :, None] + np.arange(size)).reshape(count, blocks * size)[:, :n]
    out: np.ndarray = steps[index]
    return out


def _log_level(runs: Sequence[np.ndarray], stat: str, axis: int = -1) -> np.ndarray:
    """The mean over runs of log(each run's median or mean step)."""
    pick = np.median if stat == "median" else np.mean
    with np.errstate(divide="ignore", invalid="ignore"):
        levels = [np.log(np.maximum(pick(r, axis=axis), 1.0)) for r in runs]
    out: np.ndarray = np.mean(levels, axis=0)
    return out


def _changes(a: Sequence[np.ndarray], b: Sequence[np.ndarray], axis: int = -1) -> np.ndarray:
    """[mean change ns, median change ns, mean %, median %] of the geometric means of run
    means / medians (one run a side: plain mean and median), along ``axis``."""
    out = []
    for stat in ("mean", "median"):
        level_a, level_b = np.exp(_log_level(a, stat, axis)), np.exp(_log_level(b, stat, axis))
        out.append((level_b - level_a, (level_b / level_a - 1.0) * 100.0))
    (mean_ns, mean_pct), (median_ns, median_pct) = out
    return np.stack([mean_ns, median_ns, mean_pct, median_pct])


def _within_interval(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of :func:`_changes` over moving-block resamples of every run."""
    rng = np.random.default_rng(seed)
    parts = []
    for start in range(0, resamples, _BATCH):
        count = min(_BATCH, resamples - start)
        ra = [block_resample(rng, r, count) for r in a]
        rb = [block_resample(rng, r, count) for r in b]
        parts.append(_changes(ra, rb, axis=1))
    dist = np.concatenate(parts, axis=1)  # (4, resamples)
    tail = (1.0 - rules.CONFIDENCE) / 2.0 * 100.0
    low, high = np.nanpercentile(dist, [tail, 100.0 - tail], axis=1)
    return low, high


# --- between runs: a t-test on log run medians ---------------------------------------------


@dataclass(frozen=True)
class RunTest:
    """The run-level test of log levels: difference, its t interval, p, df and the pooled
    between-run sd it used (log scale)."""

    diff: float
    low: float
    high: float
    p_value: float
    df: float
    spread: float


def run_test(a: Sequence[float], b: Sequence[float], alpha: float = rules.ALPHA) -> RunTest | None:
    """B - A of log-scale run levels ``a``, ``b`` (see the module docstring); None when
    neither side has two runs."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = xa.size, xb.size
    if na < 1 or nb < 1 or max(na, nb) < 2:
        return None
    diff = float(np.mean(xb) - np.mean(xa))
    if na >= 2 and nb >= 2:
        va, vb = float(np.var(xa, ddof=1)), float(np.var(xb, ddof=1))
        se2 = va / na + vb / nb
        denom = (va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)
        df = se2 * se2 / denom if denom > 0 else float(na + nb - 2)
    else:
        many = xa if na >= 2 else xb
        va = vb = float(np.var(many, ddof=1))
        se2 = va * (1.0 / na + 1.0 / nb)
        df = float(many.size - 1)
    spread = pooled_spread([xa, xb])
    se = math.sqrt(se2)
    if se == 0.0:  # every run alike on both sides: a difference is exact, none is none
        return RunTest(diff, diff, diff, 1.0 if diff == 0.0 else 0.0, df, spread)
    t = diff / se
    p = float(2.0 * sps.t.sf(abs(t), df))
    margin = float(sps.t.ppf(1.0 - alpha / 2.0, df)) * se
    return RunTest(diff, diff - margin, diff + margin, p, df, spread)


def pooled_spread(groups: Sequence[np.ndarray]) -> float:
    """Pooled sample sd of the groups with two or more values (0 when none has)."""
    dof = sum(g.size - 1 for g in groups if g.size > 1)
    if dof == 0:
        return 0.0
    return math.sqrt(sum(float(np.var(g, ddof=1)) * (g.size - 1) for g in groups if g.size > 1)
                     / dof)  # fmt: skip


def run_spread(side: Side) -> float:
    """The sd of log run medians of a side's runs with steps (0 with fewer than two)."""
    runs = [r.step_ns() for r in side.runs]
    return pooled_spread([np.asarray(_logs([r for r in runs if r.size], np.median))])


def power(change: float, spread: float, na: int, nb: int, alpha: float = rules.ALPHA) -> float:
    """Power of the two-sided run-level t-test to detect a relative ``change`` (0.05: 5 %)
    at log-scale between-run sd ``spread``, ``na`` and ``nb`` runs (noncentral t)."""
    if spread <= 0.0:
        return 1.0
    df = max(na + nb - 2, 1)
    ncp = math.log1p(change) / (spread * math.sqrt(1.0 / na + 1.0 / nb))
    crit = float(sps.t.ppf(1.0 - alpha / 2.0, df))
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))


def runs_needed(change: float, spread: float, alpha: float = rules.ALPHA) -> int | None:
    """Runs a side that give ``POWER`` to detect ``change`` at ``spread``; None beyond
    ``MAX_RUNS``."""
    for n in range(2, rules.MAX_RUNS + 1):
        if power(change, spread, n, n, alpha) >= rules.POWER:
            return n
    return None


def step_spread_pct(runs: Sequence[np.ndarray]) -> float:
    """How far a side's steps scatter: half their p10-p90 range, in % of their median
    (pooled steps; 1.28 standard deviations for normal steps, untouched by a few stalls)."""
    steps = np.concatenate(list(runs)) if runs else np.empty(0)
    if steps.size == 0:
        return 0.0
    p10, median, p90 = np.percentile(steps, [10, 50, 90])
    return float((p90 - p10) / 2.0 / median * 100.0) if median > 0 else 0.0


def minimum_effect_pct(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """The smallest change compare calls, in %: ``MIN_EFFECT_FACTOR`` x the larger side's
    :func:`step_spread_pct` (the runs' steps ``a``, ``b``)."""
    return rules.MIN_EFFECT_FACTOR * max(step_spread_pct(a), step_spread_pct(b))


def run_verdict(test: RunTest, p: float, minimum_pct: float, alpha: float = rules.ALPHA) -> str:
    """Slower or faster when the run-level ``test`` (p-value ``p``, adjusted where a family
    is tested) is significant and its change beyond ``minimum_pct``, or, within it, when p is
    below ``SMALL_CHANGE_ALPHA``; else no change."""
    beyond = abs(math.expm1(test.diff)) * 100.0 > minimum_pct
    if p >= (alpha if beyond else min(alpha, rules.SMALL_CHANGE_ALPHA)):
        return NO_CHANGE
    return SLOWER if test.diff > 0 else FASTER


# --- the delta -------------------------------------------------------------------------------


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def step_delta(
    baseline: Side,
    other: Side,
    *,
    detectable: float = rules.DETECTABLE_CHANGE,
    resamples: int = rules.RESAMPLES,
    seed: int = rules.SEED,
    alpha: float = rules.ALPHA,
) -> StepDelta:
    """``other`` minus ``baseline`` (see the module docstring); ``detectable``: the relative
    change the power and the runs needed are given for."""
    a = [r.step_ns() for r in baseline.runs]
    b = [r.step_ns() for r in other.runs]
    point = _changes(a, b)
    within: list[Estimate] = [Estimate(float(point[i]), None, None) for i in range(4)]
    if all(r.size > 1 for r in a) and all(r.size > 1 for r in b):
        lo, hi = _within_interval(a, b, resamples, seed)
        within = [Estimate(float(point[i]), _finite(lo[i]), _finite(hi[i])) for i in range(4)]
    test = run_test(_logs(a, np.median), _logs(b, np.median), alpha)
    minimum = minimum_effect_pct(a, b)
    if test is None:
        shown = within
        verdict, method, p = UNTESTED, ONE_RUN, None
        pw, needed, spread = None, None, None
    else:
        shown = _run_estimates(point, test, a, b)
        p = test.p_value
        verdict = run_verdict(test, p, minimum, alpha)
        method = WELCH if min(len(a), len(b)) >= 2 else AGAINST_SPREAD
        pw = power(detectable, test.spread, len(a), len(b), alpha)
        needed, spread = runs_needed(detectable, test.spread, alpha), test.spread
    return StepDelta(
        label=other.label,
        baseline=baseline.label,
        mean_ns=shown[0],
        median_ns=shown[1],
        mean_pct=shown[2],
        median_pct=shown[3],
        within_median_ns=within[1],
        within_median_pct=within[3],
        p_value=p,
        verdict=verdict,
        method=method,
        runs_baseline=len(a),
        runs_side=len(b),
        between_run_pct=None if spread is None else math.expm1(spread) * 100.0,
        minimum_effect_pct=minimum,
        detectable_pct=detectable * 100.0,
        power=pw,
        runs_needed=needed,
        resamples=resamples,
    )


def _logs(runs: Sequence[np.ndarray], pick: Callable[[np.ndarray], Any]) -> list[float]:
    """log of each run's level (its median or mean step; a level of 0 counts as 1 ns)."""
    return [math.log(max(float(pick(r)), 1.0)) for r in runs]


def _run_estimates(
    point: np.ndarray, test: RunTest, a: Sequence[np.ndarray], b: Sequence[np.ndarray]
) -> list[Estimate]:
    """The median's change with the run-level t interval (ns: the ratio's interval times
    A's level); the mean's with the same test run on log run means."""
    out: list[Estimate] = []
    for stat, index in (("mean", 0), ("median", 1)):
        pick = np.median if stat == "median" else np.mean
        t = (test if stat == "median"
             else run_test(_logs(a, pick), _logs(b, pick)) or test)  # fmt: skip
        level_a = float(np.exp(_log_level(a, stat)))
        pct = Estimate(float(point[index + 2]), math.expm1(t.low) * 100.0,
                       math.expm1(t.high) * 100.0)  # fmt: skip
        ns = Estimate(float(point[index]), level_a * math.expm1(t.low),
                      level_a * math.expm1(t.high))  # fmt: skip
        out.append(ns)
        out.append(pct)
    mean_ns, mean_pct, median_ns, median_pct = out
    return [mean_ns, median_ns, mean_pct, median_pct]
