"""When the annotation stops timing a module: the numbers of the fold rule.

Read by the annotation (:mod:`dlprof_lite.annotate.folding`, which applies the rule in the
profiled process) and by the report (the advice that names the folded modules). Plain
numbers, no imports.

The rule: after the warm-up step, a module whose median forward call (the thread's CPU
time, less the annotation of the calls inside it: a container's calls hold its children's
hooks) is shorter than
:data:`FOLD_FACTOR` times the measured cost of annotating one call is *folded* into its
parent: its hooks do nothing from then on, so its time is in the parent's self time. Roots,
modules whose calls add up to :data:`DOMINANT_SHARE` of the warm-up step's forward time,
and Tensor Core eligible modules on a GPU are never folded.
"""

from __future__ import annotations

# A module is folded when its median forward call is below this many times the measured
# per-call cost of the annotation (forward and backward hooks, ``annotation`` fact's
# ns_per_call). At 20x the hooks of a call cost at most 5 % of its forward time (about 2 %
# of forward plus backward), below the run-to-run spread of a CPU step; a shorter module's
# range mostly times the annotation, and its hooks are what make a model of many tiny
# modules (deep400 in docs/performance.md) run twice as long annotated. dlprof-lite choice.
FOLD_FACTOR = 20

# A module whose forward calls in the warm-up step add up to this share of the step's forward
# time (its root forwards, summed: the first optimizer step's one-off work is left out) is
# never folded, however short each call: it dominates the step, and the layers table must
# show it. dlprof-lite choice.
DOMINANT_SHARE = 0.05

# Forward call durations kept per module while warming up (the median is of these; a module
# called more often in the warm-up step is judged on its first calls, its total counts all).
FOLD_SAMPLES = 64

# Without an optimizer step (a hand-written update, gradient accumulation over several
# batches), warm-up ends when a root model starts its forward with grad on for this many-th
# time: the forwards before it are the warm-up step's.
WARMUP_FORWARDS = 2

# Folded modules listed per ``folded`` fact mark (a mark is a trace event: several small
# marks, not one of every module of a large model).
FOLDED_PER_FACT = 100
