"""Step-time statistics of compare, checked against the distributions that generated them.

Oracles: the generating parameters (known difference, known within/between-run spread), the
Python ``statistics`` module for the descriptive figures, and the coverage a 95 % interval
must have over many seeded samples.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from compare_builders import MS, normal_side, normal_steps, run, side
from dlprof_lite.compare.checks import CompareError
from dlprof_lite.compare.comparison import compare_sides
from dlprof_lite.compare.gate import gate
from dlprof_lite.compare.stats import (
    BOOTSTRAP,
    FASTER,
    HIERARCHICAL,
    NO_CHANGE,
    SLOWER,
    Estimate,
    step_delta,
    step_stats,
    verdict,
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


def test_known_difference_inside_the_intervals_and_slower() -> None:
    a = normal_side("A", 100, 4, 60, seed=1)
    b = normal_side("B", 106, 4, 60, seed=2)
    d = step_delta(a, b)
    assert d.method == BOOTSTRAP
    for est in (d.mean_ns, d.median_ns):
        assert est.low is not None and est.high is not None
        assert est.low < KNOWN < est.high
        assert est.low > 0  # and the interval says "slower"
    for pct in (d.mean_pct, d.median_pct):
        assert pct.low is not None and pct.high is not None
        assert pct.low < 6.0 < pct.high
    assert d.p_value is not None and d.p_value < 0.05
    assert d.verdict == SLOWER

    swapped = step_delta(b, a)
    assert swapped.verdict == FASTER
    assert swapped.median_ns.low is not None and swapped.median_ns.high is not None
    assert swapped.median_ns.low < -KNOWN < swapped.median_ns.high


def test_interval_coverage_over_seeded_samples() -> None:
    """A 95 % interval holds the true difference in about 95 % of samples: at least 88 of
    100 (fewer has a chance of 0.15 % for a true 95 % interval), and not every time (all
    100: 0.6 %; intervals far too wide). Measured: 95 of 100 for the mean and the median."""
    hits_mean = hits_median = 0
    for trial in range(100):
        a = normal_side("A", 100, 4, 60, seed=1000 + trial)
        b = normal_side("B", 106, 4, 60, seed=5000 + trial)
        d = step_delta(a, b, resamples=500, seed=trial)
        assert d.mean_ns.low is not None and d.mean_ns.high is not None
        assert d.median_ns.low is not None and d.median_ns.high is not None
        hits_mean += d.mean_ns.low < KNOWN < d.mean_ns.high
        hits_median += d.median_ns.low < KNOWN < d.median_ns.high
    assert 88 <= hits_mean <= 99
    assert 88 <= hits_median <= 99


def test_same_distribution_is_no_significant_change_in_95_percent_of_trials() -> None:
    """500 seeded pairs from one distribution: at most 25 (5 %) may be called a change. The
    rule's rate measured over 2000 pairs is 2.75 % (p < 0.05 alone: 5.4 %), so 500 trials
    keep the bound about 3 standard deviations away: no flaky pass or fail on a seed."""
    changes = 0
    for trial in range(500):
        a = normal_side("A", 100, 4, 60, seed=10_000 + trial)
        b = normal_side("B", 100, 4, 60, seed=20_000 + trial)
        changes += step_delta(a, b, resamples=300, seed=trial).verdict != NO_CHANGE
    assert changes <= 25  # >= 95 % of the trials say "no significant change"


def test_verdict_needs_both_the_test_and_the_interval() -> None:
    up = Estimate(5.0, 1.0, 9.0)
    straddles = Estimate(5.0, -1.0, 9.0)
    down = Estimate(-5.0, -9.0, -1.0)
    assert verdict(0.01, up) == SLOWER
    assert verdict(0.01, down) == FASTER
    assert verdict(0.01, straddles) == NO_CHANGE  # p alone is not enough
    assert verdict(0.2, up) == NO_CHANGE  # nor the interval alone
    assert verdict(None, up) == NO_CHANGE
    assert verdict(0.01, Estimate(5.0, None, None)) == NO_CHANGE


def test_intervals_are_reproducible() -> None:
    a = normal_side("A", 100, 4, 40, seed=3)
    b = normal_side("B", 101, 4, 40, seed=4)
    assert step_delta(a, b) == step_delta(a, b)
    assert step_delta(a, b, seed=1) != step_delta(a, b, seed=2)


RUN_MEANS_MS = (90.0, 95.0, 100.0, 105.0, 110.0)
WITHIN_MS = 2.0


def _pooled_side(label: str) -> tuple:
    runs = [run(normal_steps(m, WITHIN_MS, 200, seed=i)) for i, m in enumerate(RUN_MEANS_MS)]
    return side(label, *runs), side(label, run(np.concatenate([r.step_ns() for r in runs])))


def test_pooled_runs_report_within_and_between_spread() -> None:
    pooled, _ = _pooled_side("P")
    stats = step_stats(pooled)
    assert stats.runs == 5 and stats.n == 1000
    assert stats.within_run_std_ns == pytest.approx(WITHIN_MS * MS, rel=0.1)
    assert stats.between_run_std_ns == pytest.approx(statistics.stdev(RUN_MEANS_MS) * MS, rel=0.1)


def test_pooled_side_interval_holds_the_between_run_spread() -> None:
    pooled, flat = _pooled_side("P")
    base = normal_side("A", 100, WITHIN_MS, 1000, seed=99)
    hier, naive = step_delta(base, pooled), step_delta(base, flat)
    assert hier.method == HIERARCHICAL and naive.method == BOOTSTRAP
    assert hier.mean_ns.value == pytest.approx(naive.mean_ns.value)  # the same steps
    # Run means 90-110 ms: their standard error (7.9 / sqrt(5) = 3.5 ms) dominates the
    # steps' (0.24 ms), so the two-stage interval is many times wider, about the normal
    # theory's 2 x 1.96 x 3.5 ms (the bootstrap of 5 runs runs a little narrow).
    assert _width(hier.mean_ns) > 5 * _width(naive.mean_ns)
    normal_width = 2 * 1.96 * statistics.stdev(RUN_MEANS_MS) * MS / np.sqrt(len(RUN_MEANS_MS))
    assert 0.6 * normal_width < _width(hier.mean_ns) < 1.4 * normal_width


def _width(est: Estimate) -> float:
    assert est.low is not None and est.high is not None
    return est.high - est.low


def _gate_sides(b_mean: float, b_std: float = 1.0, n: int = 60) -> list:
    return [normal_side("A", 100, 1.0, n, seed=7), normal_side("B", b_mean, b_std, n, seed=8)]


def test_gate_fails_on_a_significant_slowdown_beyond_the_limit() -> None:
    result = gate(compare_sides(_gate_sides(110), resamples=500), 5.0)
    assert result.failed
    assert "B" in result.line and "10." in result.line


def test_gate_passes_a_slowdown_within_the_limit() -> None:
    c = compare_sides(_gate_sides(103), resamples=500)
    assert c.steps[0].verdict == SLOWER  # significant, but 3 % < 5 %
    assert not gate(c, 5.0).failed


def test_gate_passes_a_slowdown_it_cannot_tell_from_noise() -> None:
    # 10 % slower in the median, but a spread of 40 ms over 6 steps: not significant.
    sides = [
        side("A", run([100 * MS] * 6)),
        side("B", run([x * MS for x in (30, 200, 120, 60, 180, 100)])),
    ]
    c = compare_sides(sides, resamples=500)
    assert c.steps[0].median_pct.value > 5.0
    assert c.steps[0].verdict == NO_CHANGE
    assert not gate(c, 5.0).failed


def test_gate_passes_faster_and_rejects_a_bad_limit() -> None:
    c = compare_sides(_gate_sides(90), resamples=500)
    assert c.steps[0].verdict == FASTER
    assert not gate(c, 0.0).failed
    with pytest.raises(CompareError):
        gate(c, -1.0)
    with pytest.raises(CompareError):
        gate(c, float("nan"))
