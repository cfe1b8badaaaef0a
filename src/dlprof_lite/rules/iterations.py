"""Iteration rules shared by ingest (finding steps) and report (their statistics).

Key-range sources say where the iteration boundaries came from (DLProf's key-node rule,
docs/design.md "Iterations"); the thresholds say when step times vary too much to trust a mean.
"""

from __future__ import annotations

# Variance is "high" when the standard deviation of iteration wall times is at least 10 % of
# their mean — the threshold at which pyperf (psf/pyperf, pyperf/_cli.py ``format_checks``)
# warns "the benchmark result may be unstable". The same 10 % around the median bounds the
# suggested steady window.
HIGH_VARIANCE_CV = 0.10
STEADY_TOLERANCE = 0.10
# A steady window shorter than this is no window worth suggesting: the figures it feeds (a
# mean, a p90, a spread) need a handful of steps, and below five one slow step still moves
# the window's mean by a fifth of its own size.
STEADY_MIN_ITERATIONS = 5
# Default warm-up: with no explicit window and at least this many iterations, iteration 0
# (CUDA context, cuDNN autotuning, allocator growth) is reported separately as warm-up.
DEFAULT_WARMUP_MIN_ITERATIONS = 3

SOURCES = (
    "key-range", "numbered-ranges", "annotation", "forward-backward", "root-model-calls",
    "most-repeated", "none",
)  # fmt: skip
# Key rules that guess which range is the step: the summary warns and names --key-range.
GUESSED = ("numbered-ranges", "root-model-calls", "most-repeated")

# A guessed key range (GUESSED) is accepted only when it looks like a step (ingest/step_guess.py,
# dlprof-lite choices from issue 26, measured on the corpus: cuDF's null_count has a median of
# 1.5 µs and a CV of 5.6, nvFuser's FusionCache::get holds 1 % of the GPU time): its iterations
# after the first hold at least this share of the GPU busy time (CPU-only profiles: of the main
# thread's annotated time) ...
GUESS_MIN_COVERAGE = 0.50
# ... their median wall time is at least this long ...
GUESS_MIN_MEDIAN_NS = 100_000
# ... their coefficient of variation (sample std / mean) at most this ...
GUESS_MAX_CV = 1.0
# ... and the range is no library's own (rules/libraries.py). The warning of a profile whose
# guesses all fail names at most this many of them, with the --key-range of each.
GUESS_SHOWN = 3
