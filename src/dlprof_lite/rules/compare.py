"""The rules ``compare`` judges with: significance, intervals, and when a comparison is unfair.

Each value carries where it comes from; our own choices say "dlprof-lite choice" and why.
"""

from __future__ import annotations

# A difference is significant below this two-sided p-value: the conventional 5 % level, the
# one the issue's --gate names ("significant (p < 0.05)").
ALPHA = 0.05
# Confidence level of every bootstrap interval (the 95 % interval that goes with ALPHA).
CONFIDENCE = 0.95
# Bootstrap resamples: Efron & Tibshirani (An Introduction to the Bootstrap, 1993) advise
# 1000-2000 replications for percentile intervals (a few hundred only for a standard error);
# 2000 keeps the 2.5 % tails steady to a few hundredths of a standard error and 10k steps a
# side within a second.
RESAMPLES = 2000
# Fixed seed: the same two sides always give the same intervals (a CI gate must not flap).
SEED = 20_141_114
# "Too few steps": the steps a side needs to detect DETECTABLE_CHANGE of the baseline mean
# with POWER at ALPHA (two-sample normal approximation, n = 2 (z_(1-alpha/2) + z_power)^2
# sigma^2 / delta^2). 80 % power is Cohen's convention (Statistical Power Analysis for the
# Behavioral Sciences, 1988); 5 % is the change a training-speed comparison cares about
# (dlprof-lite choice).
DETECTABLE_CHANGE = 0.05
POWER = 0.80
# The minimum effect: this many times the within-run spread (half the p10-p90 range of the
# steps, in % of their median). A rerun of unchanged code moves the median by about as much
# as the steps scatter, so a smaller change is weak evidence. With runs a side, a change
# within it is called slower or faster only at p < SMALL_CHANGE_ALPHA (a step's and a
# layer's alike): three skewed run medians at one end of their range pass Welch's test at
# 0.05 more often than 5 % (3 of 20 unchanged pairs spread in time, in the study), while
# runs that agree closely (steps that scatter, medians that do not) give p far below 0.01.
# One run a side, no test; the gate fails only on a change beyond its limit *and* beyond it
# (dlprof-lite choice; false alarms and power measured by scripts/compare_study.py and
# stated in docs/compare.md).
MIN_EFFECT_FACTOR = 2.0
SMALL_CHANGE_ALPHA = 0.01
# Layers tested on their runs: only figures of at least this share of a typical step (the
# mean of the sides' median steps). A layer's figure below it cannot move the step by more
# than the share, and every test more widens Holm's adjustment of the others: 26 layer
# directions of LeNet, 9 of them over 1 % (dlprof-lite choice).
MATERIAL_SHARE = 0.01
# The most runs a side "runs needed" names; beyond it the line says "more than".
MAX_RUNS = 100
# Below this many steps a side is too few whatever the spread: the within-run interval of a
# median of 4 steps rests on at most 4^4 = 256 distinct resamples, a median that moves in
# jumps of a whole step (dlprof-lite choice).
MIN_STEPS = 5
# Refuse a side with fewer than 1/FAR_FEWER_RATIO of the other's steps: a window that much
# shorter is a different capture (a run cut short, another --iter-start/--iter-stop, another
# key range) rather than another sample of the same workload, and its per-step layer and
# kernel figures come from a different part of training (dlprof-lite choice).
FAR_FEWER_RATIO = 10.0
# Layer calls per step differ when they differ by more than this share of the larger count
# (a mean over steps: one step missing a call in 60 is a 1.7 % change; dlprof-lite choice).
CALLS_TOLERANCE = 0.01
# Name at most this many layers in a warning line.
WARN_NAMES = 3
