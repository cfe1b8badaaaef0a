"""Step-time statistics of compare, checked against the distributions that generated them.

Oracles: the generating parameters (known difference, known within- and between-run
spread, known autocorrelation), the Python ``statistics`` module for the descriptive
figures, ``scipy.stats.ttest_ind`` for the run-level test, a Monte-Carlo simulation for the
power, and the coverage a 95 % interval must have over many seeded samples.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats as sps

from compare_builders import MS, normal_side, normal_steps, run, side
from dlprof_lite.compare.checks import CompareError
from dlprof_lite.compare.comparison import compare_sides, verdict_line
from dlprof_lite.compare.gate import gate
from dlprof_lite.compare.side import Side
from dlprof_lite.compare.stats import (
    AGAINST_SPREAD,
    FASTER,
    NO_CHANGE,
    ONE_RUN,
    SLOWER,
    UNTESTED,
    WELCH,
    block_length,
    power,
    runs_needed,
    step_delta,
    step_stats,
)

KNOWN = 6 * MS  # B ~ N(106 ms, 4 ms) against A ~ N(100 ms, 4 ms)


def test_descriptive_statistics_match_the_statistics_module() -> None:
    steps = [float(v) for v in (7, 1, 3, 9, 4, 12, 5, 8, 2, 6, 30)]
    stats = step_stats(side("A", run([v * MS for v in steps], warmup=2)))
    q = statistics.quantiles(steps, n=10, method="inclusive")  # linear, as numpy's default
    assert stats.n == len(steps)  # the two warm-up steps are not analysed
    assert stats.runs == 1
    assert stats.mean_ns == pytest.approx(statistics.mean(steps) * MS)
    assert stats.median_ns == pytest.approx(statistics.median(steps) * MS)
    assert stats.std_ns == pytest.approx(statistics.stdev(steps) * MS)
    assert stats.p10_ns == pytest.approx(q[0] * MS)
    assert stats.p90_ns == pytest.approx(q[-1] * MS)
    assert (stats.min_ns, stats.max_ns) == (1 * MS, 30 * MS)
    assert stats.within_run_std_ns is None and stats.between_run_std_ns is None


# --- one run a side ----------------------------------------------------------------------


def test_one_run_a_side_is_not_tested_but_sized_with_its_within_run_interval() -> None:
    a = normal_side("A", 100, 4, 60, seed=1)
    b = normal_side("B", 106, 4, 60, seed=2)
    d = step_delta(a, b)
    assert d.method == ONE_RUN and d.verdict == UNTESTED and not d.tested
    assert d.p_value is None and d.power is None and d.runs_needed is None
    # The effect size is the plain difference of the medians and of the means.
    steps_a, steps_b = a.step_ns(), b.step_ns()
    assert d.median_ns.value == pytest.approx(np.median(steps_b) - np.median(steps_a))
    assert d.mean_ns.value == pytest.approx(steps_b.mean() - steps_a.mean())
    for est in (d.mean_ns, d.median_ns):
        assert est.low is not None and est.high is not None
        assert est.low < KNOWN < est.high
    assert d.median_pct.low is not None and d.median_pct.high is not None
    assert d.median_pct.low < 6.0 < d.median_pct.high
    # The one-run minimum effect: twice the larger side's half p10-p90 range, in % of its
    # median (for N(100, 4) steps about 1.28 x 4 % = 5.1 % each, so about 10 %).
    spread = max((np.percentile(s, 90) - np.percentile(s, 10)) / 2 / np.median(s) * 100
                 for s in (steps_a, steps_b))  # fmt: skip
    assert d.minimum_effect_pct == pytest.approx(2 * spread)
    assert 7 < d.minimum_effect_pct < 13
    line = verdict_line(d)
    assert "not tested (one run a side)" in line and "no significance is claimed" in line
    assert "--repeat 3" in line and "p =" not in line


def test_within_run_interval_coverage_over_seeded_samples() -> None:
    """A 95 % interval holds the true difference in about 95 % of samples: at least 88 of
    100 (fewer has a chance of 0.15 % for a true 95 % interval), and not every time (all
    100: 0.6 %; intervals far too wide). Independent steps: blocks cost little."""
    hits_mean = hits_median = 0
    for trial in range(100):
        a = normal_side("A", 100, 4, 60, seed=1000 + trial)
        b = normal_side("B", 106, 4, 60, seed=5000 + trial)
        d = step_delta(a, b, resamples=500, seed=trial)
        assert d.mean_ns.low is not None and d.mean_ns.high is not None
        assert d.median_ns.low is not None and d.median_ns.high is not None
        hits_mean += d.mean_ns.low < KNOWN < d.mean_ns.high
        hits_median += d.median_ns.low < KNOWN < d.median_ns.high
    assert 86 <= hits_mean <= 99
    assert 86 <= hits_median <= 99


def _ar1(mean_ms: float, sd_ms: float, rho: float, n: int, seed: int) -> np.ndarray:
    """Steps of an AR(1) process: each step keeps ``rho`` of the previous one's deviation
    (a slow stretch lasts); marginal sd ``sd_ms``."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, sd_ms * math.sqrt(1 - rho * rho), n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, sd_ms)
    for i in range(1, n):
        out[i] = rho * out[i - 1] + noise[i]
    return (mean_ms + out) * MS


def test_autocorrelated_steps_widen_the_within_run_interval() -> None:
    """Steps where a slow stretch lasts (AR(1), rho 0.8) carry less information than as many
    independent ones: the variance of their mean is (1 + rho) / (1 - rho) = 9 times larger.
    The moving-block interval holds the true difference in most of 60 trials; resampling
    single steps (blocks of 1, the old rule) would hold it in about half."""
    n, hits = 400, 0
    assert block_length(n) == 7
    for trial in range(60):
        a = side("A", run(_ar1(100, 4, 0.8, n, seed=100 + trial)))
        b = side("B", run(_ar1(102, 4, 0.8, n, seed=900 + trial)))
        d = step_delta(a, b, resamples=400, seed=trial)
        assert d.mean_ns.low is not None and d.mean_ns.high is not None
        hits += d.mean_ns.low < 2 * MS < d.mean_ns.high
    assert hits >= 45  # a true 95 % interval: 57 expected; iid resampling: about 33


# --- runs as the samples -----------------------------------------------------------------


def _runs_side(
    label: str, medians_ms: list[float], seed: int, n: int = 40, sd_ms: float = 0.5
) -> Side:
    return side(label, *(run(normal_steps(m, sd_ms, n, seed=seed + i))
                         for i, m in enumerate(medians_ms)))  # fmt: skip


def _levels(s: Side) -> list[float]:
    return [math.log(float(np.median(r.step_ns()))) for r in s.runs]


def test_runs_are_the_samples_and_the_test_is_welch_on_log_run_medians() -> None:
    a = _runs_side("A", [100, 104, 97, 102], seed=1)
    b = _runs_side("B", [110, 113, 108], seed=10)
    d = step_delta(a, b)
    oracle = sps.ttest_ind(_levels(b), _levels(a), equal_var=False)
    low, high = oracle.confidence_interval()
    assert d.median_pct.low == pytest.approx(math.expm1(low) * 100, rel=1e-9)
    assert d.median_pct.high == pytest.approx(math.expm1(high) * 100, rel=1e-9)
    assert d.method == WELCH and d.tested
    assert d.p_value == pytest.approx(float(oracle.pvalue), rel=1e-9)
    assert d.verdict == SLOWER and d.significant
    geo_a = math.exp(float(np.mean(_levels(a))))
    geo_b = math.exp(float(np.mean(_levels(b))))
    assert d.median_pct.value == pytest.approx((geo_b / geo_a - 1) * 100)
    assert d.median_ns.value == pytest.approx(geo_b - geo_a)
    assert d.median_pct.low is not None and d.median_pct.high is not None
    assert d.median_pct.low < d.median_pct.value < d.median_pct.high
    # The between-run interval is far wider than the within-run one: runs differ by more
    # than their steps do.
    assert d.within_median_pct.low is not None and d.within_median_pct.high is not None
    assert (d.median_pct.high - d.median_pct.low) > 3 * (
        d.within_median_pct.high - d.within_median_pct.low)
    assert verdict_line(d).startswith("B vs A: slower:") and "3 vs 4 runs" in verdict_line(d)


def test_a_single_run_against_several_is_tested_against_their_spread() -> None:
    a = _runs_side("A", [100, 103, 97, 101], seed=1)
    b = _runs_side("B", [118], seed=50)
    d = step_delta(a, b)
    levels_a, (level_b,) = _levels(a), _levels(b)
    s = statistics.stdev(levels_a)
    t = (level_b - statistics.mean(levels_a)) / (s * math.sqrt(1 + 1 / len(levels_a)))
    assert d.method == AGAINST_SPREAD
    assert d.p_value == pytest.approx(2 * float(sps.t.sf(abs(t), len(levels_a) - 1)), rel=1e-9)
    assert d.verdict == SLOWER


def test_unchanged_runs_are_called_a_change_in_at_most_5_percent_of_trials() -> None:
    """400 seeded pairs of 3 runs a side from one distribution whose run levels differ by a
    between-run sd of 8 % (a loaded machine), 40 steps each: a step-level test would call
    most of them a change; the run-level one may call at most 5 % (+ 2 sd of slack)."""
    rng = np.random.default_rng(7)
    changes = 0
    for trial in range(400):
        medians = list(100 * np.exp(rng.normal(0, 0.08, 6)))
        a = _runs_side("A", medians[:3], seed=trial * 10)
        b = _runs_side("B", medians[3:], seed=trial * 10 + 5)
        changes += step_delta(a, b, resamples=50, seed=trial).significant
    assert changes <= 0.05 * 400 + 2 * math.sqrt(400 * 0.05 * 0.95)


def test_a_change_within_the_minimum_effect_needs_p_below_1_percent() -> None:
    """Steps that scatter by 8 ms around 100 ms (half their p10-p90 range about 10 %, so a
    minimum effect of about 20 %) and a +8 % change, 400 steps a run. Runs that scatter
    enough for 0.01 <= p < 0.05 are no evidence of so small a change; runs that agree
    closely (p < 0.01) are. The p-values are Welch's (checked against scipy above)."""
    loose = step_delta(_runs_side("A", [100, 102.5, 97.5], seed=1, n=400, sd_ms=8),
                       _runs_side("B", [108, 110.5, 105.5], seed=10, n=400, sd_ms=8))  # fmt: skip
    tight = step_delta(_runs_side("A", [100, 100, 100], seed=1, n=400, sd_ms=8),
                       _runs_side("B", [108, 108, 108], seed=10, n=400, sd_ms=8))  # fmt: skip
    for d in (loose, tight):
        assert d.minimum_effect_pct is not None and 15 < d.minimum_effect_pct < 25
        assert 0 < d.median_pct.value < d.minimum_effect_pct
    assert loose.p_value is not None and 0.01 <= loose.p_value < 0.05
    assert loose.verdict == NO_CHANGE
    line = verdict_line(loose)
    assert "within the minimum effect" in line and "needs p < 0.01" in line
    assert tight.p_value is not None and tight.p_value < 0.01
    assert tight.verdict == SLOWER and "minimum effect" not in verdict_line(tight)


def test_power_matches_a_simulation_and_runs_needed_reaches_80_percent() -> None:
    """The noncentral-t power of the run-level test against its rejection rate over 2000
    simulated pairs of log run levels (3 runs a side, sd 4 %, a true 10 % change)."""
    rng = np.random.default_rng(11)
    spread, change = 0.04, 0.10
    rejected = 0
    for _ in range(2000):
        la = rng.normal(0, spread, 3)
        lb = rng.normal(math.log1p(change), spread, 3)
        rejected += sps.ttest_ind(lb, la, equal_var=True).pvalue < 0.05
    assert power(change, spread, 3, 3) == pytest.approx(rejected / 2000, abs=0.04)
    n = runs_needed(0.05, spread)
    assert n is not None and power(0.05, spread, n, n) >= 0.8 > power(0.05, spread, n - 1, n - 1)
    assert runs_needed(0.001, 0.5) is None  # beyond the most runs it names
    d = step_delta(_runs_side("A", [100, 104, 97], 1), _runs_side("B", [101, 99, 103], 10))
    assert d.verdict == NO_CHANGE and d.power is not None and d.power < 0.8
    assert d.runs_needed is not None and f"{d.runs_needed} runs a side" in verdict_line(d)


def test_intervals_are_reproducible() -> None:
    a = normal_side("A", 100, 4, 40, seed=3)
    b = normal_side("B", 101, 4, 40, seed=4)
    assert step_delta(a, b) == step_delta(a, b)
    assert step_delta(a, b, seed=1) != step_delta(a, b, seed=2)


RUN_MEANS_MS = (90.0, 95.0, 100.0, 105.0, 110.0)
WITHIN_MS = 2.0


def test_pooled_runs_report_within_and_between_spread() -> None:
    runs = [run(normal_steps(m, WITHIN_MS, 200, seed=i)) for i, m in enumerate(RUN_MEANS_MS)]
    stats = step_stats(side("P", *runs))
    assert stats.runs == 5 and stats.n == 1000
    assert stats.within_run_std_ns == pytest.approx(WITHIN_MS * MS, rel=0.1)
    assert stats.between_run_std_ns == pytest.approx(statistics.stdev(RUN_MEANS_MS) * MS, rel=0.1)


# --- the gate -----------------------------------------------------------------------------


def _tested(b_medians: list[float]) -> list[Side]:
    return [_runs_side("A", [100, 101, 99], seed=1), _runs_side("B", b_medians, seed=10)]


def test_gate_fails_on_a_tested_slowdown_beyond_the_limit() -> None:
    result = gate(compare_sides(_tested([110, 111, 109]), resamples=200), 5.0)
    assert result.failed
    assert "B" in result.line and "9.9 %" in result.line and "3 vs 3 runs" in result.line


def test_gate_passes_a_tested_slowdown_within_the_limit() -> None:
    c = compare_sides(_tested([103, 104, 102]), resamples=200)
    assert c.steps[0].verdict == SLOWER  # significant, but 3 % < 5 %
    assert not gate(c, 5.0).failed


def test_gate_passes_a_slowdown_the_runs_cannot_tell_from_noise() -> None:
    c = compare_sides(_tested([95, 120, 115]), resamples=200)
    assert c.steps[0].median_pct.value > 5.0
    assert c.steps[0].verdict == NO_CHANGE
    assert not gate(c, 5.0).failed


def test_one_run_gate_needs_the_limit_and_the_minimum_effect() -> None:
    clear = [normal_side("A", 100, 1.0, 60, seed=7), normal_side("B", 110, 1.0, 60, seed=8)]
    c = compare_sides(clear, resamples=300)
    result = gate(c, 5.0)
    assert c.steps[0].verdict == UNTESTED and result.failed
    assert "not a significance test" in result.line
    # 10 % slower in the median, but steps spread 30-200 ms: within the minimum effect.
    noisy = [side("A", run([100 * MS] * 6)),
             side("B", run([x * MS for x in (30, 200, 120, 60, 180, 100)]))]  # fmt: skip
    c = compare_sides(noisy, resamples=300)
    d = c.steps[0]
    assert d.median_pct.value > 5.0
    assert d.minimum_effect_pct is not None and d.minimum_effect_pct > d.median_pct.value
    assert not gate(c, 5.0).failed


def test_gate_passes_faster_and_rejects_a_bad_limit() -> None:
    c = compare_sides(_tested([90, 91, 89]), resamples=200)
    assert c.steps[0].verdict == FASTER
    assert not gate(c, 0.0).failed
    with pytest.raises(CompareError):
        gate(c, -1.0)
    with pytest.raises(CompareError):
        gate(c, float("nan"))
