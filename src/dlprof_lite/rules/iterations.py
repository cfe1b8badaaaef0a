"""Iteration rules shared by ingest (finding steps) and report (their statistics).

Key-range sources say where the iteration boundaries came from (DLProf's key-node rule,
DESIGN.md "Iterations"); the thresholds say when step times vary too much to trust a mean.
"""

from __future__ import annotations

# Variance is "high" when the standard deviation of iteration wall times is at least 10 % of
# their mean — the threshold at which pyperf (psf/pyperf, pyperf/_cli.py ``format_checks``)
# warns "the benchmark result may be unstable". The same 10 % around the median bounds the
# suggested steady window.
HIGH_VARIANCE_CV = 0.10
STEADY_TOLERANCE = 0.10
# A steady window shorter than this is no window worth suggesting.
STEADY_MIN_ITERATIONS = 2
# Default warm-up: with no explicit window and at least this many iterations, iteration 0
# (CUDA context, cuDNN autotuning, allocator growth) is reported separately as warm-up.
DEFAULT_WARMUP_MIN_ITERATIONS = 3

SOURCES = (
    "key-range", "numbered-ranges", "annotation", "forward-backward", "root-model-calls",
    "most-repeated", "none",
)  # fmt: skip
# Key rules that guess which range is the step: the summary warns and names --key-range.
GUESSED = ("numbered-ranges", "root-model-calls", "most-repeated")
