"""The NVTX range names the annotation layer writes and the analysis reads.

This module is the single definition of the naming convention (documented in docs/annotation.md):
it imports nothing heavy, so every stage may read it without torch, nvtx or pandas
(:mod:`dlprof_lite.rules.names` re-exports it for the annotate stage).

- domain: ``dlprof-lite`` for every range the annotation layer pushes;
- one ``iteration`` range per training step (one optimizer step), the default key range;
- phase ranges ``data``, ``forward``, ``backward``, ``optimizer``;
- module ranges ``fwd:<qualified name>:<type>`` and ``bwd:<qualified name>:<type>``,
  e.g. ``fwd:layer1.0.conv1:Conv2d``; roots are named as below (``model`` by default).

How they are written (:mod:`dlprof_lite.annotate`):

- ``iteration`` and the phases are NVTX *start/end* ranges (process-wide: the backward may
  start on an autograd device thread); the iteration's int64 payload is its 0-based index.
  The phases tile their iteration in the order data, forward, backward, optimizer (the
  first iteration has no data phase); an iteration with no ``optimizer`` phase inside is
  incomplete: the program left its loop after fetching a batch, or stopped mid-step;
- module ranges are *push/pop* ranges on the thread that runs them: ``fwd:`` on the
  calling thread, ``bwd:`` on the thread autograd runs the module's backward on;
- a ``:`` in a qualified name (a ``ModuleDict`` key) is written as ``_``; modules without a
  known qualified name get their parent's name plus their class; a root with neither
  submodules nor parameters (a loss module) is named by its class:
  ``fwd:CrossEntropyLoss:CrossEntropyLoss``;
- a root model is named, at its first forward, by the variable or attribute bound to it in
  the calling code (``student``, ``ema_model``, ``self.teacher`` → ``teacher``,
  ``models["gen"]`` → ``gen``; innermost frame first, then globals; a name another live root
  holds is skipped), else ``model``; a model object whose name another root holds (a second
  model of one variable, a model reloaded into it) is ``model#2``, ``model#3``, …; only
  letters, digits, ``_`` and ``-`` in a bound name (anything else becomes ``_``). The
  submodules of the root named ``model`` keep their plain qualified names
  (``layer1.0.conv1``); every other root's are prefixed with its name (``student.fc1``,
  ``model#2.layer1.0.conv1``). A wrapper (DDP, FSDP, ``torch.compile``, Lightning, DeepSpeed:
  :mod:`dlprof_lite.rules.wrappers`) is named as the model it wraps, and no name carries its
  attribute (``module.``, ``_orig_mod.``); modules inside a compiled region get no ranges;
- ``rec:<qualified name>:<type>`` replaces ``fwd:`` for a module forward that runs again
  inside a backward pass (activation-checkpoint recomputation): it is recompute time, not a
  forward call;
- ``compile`` is a phase: a start/end range around Dynamo/Inductor compilation. Inside an
  iteration it tiles like the other phases (the phase it interrupted resumes after it, so
  a phase may appear twice in one iteration); outside an iteration it stands alone;
- ``ddp:bucket:<id>``: a push/pop range around the all-reduce of one DDP gradient bucket,
  inside the backward pass; the ``ddp_bucket`` fact with that id says whose gradients it
  carries (:mod:`dlprof_lite.annotate.ddp`);
- ``gc:<generation>``: a push/pop range around each collection of Python's garbage
  collector, on the thread that runs it (``gc.callbacks``; :mod:`dlprof_lite.annotate.gc_ranges`);
  the idle partition books the time to ``gc`` (:mod:`dlprof_lite.rules.idle`);
- ``update:<n>``: an NVTX mark at the end of each outermost ``optimizer.step()`` (the end of
  an update), ``n`` the optimizer's number (1, 2, ... in the order each first stepped);
  ``backward-end``: a mark at the end of each top-level backward pass;
  ``manual-iteration``: a mark where the script opens an ``iteration()`` of its own (its
  ``iteration`` ranges are then the steps, and no update marks are written inside). Ingest
  decides each step's bounds from these marks and the phase ranges
  (:mod:`dlprof_lite.ingest.step_bounds`);
- run facts are NVTX *marks* in the domain whose text is ``fact:`` and a JSON object, e.g.
  ``fact:{"dataloader": {"num_workers": 4, ...}}``; the keys are listed in :data:`FACT_KEYS`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# NVTX range styles as ``ranges.style`` holds them: push/pop (one thread, nested) or start/end.
PUSH_POP, START_END = "push_pop", "start_end"
PROG = "dlprof-lite"  # the command's name, in usage lines and messages
DOMAIN = "dlprof-lite"  # the NVTX domain of every range the annotation opens
ITERATION = "iteration"
# Training order; ``compile`` last so that the first four keep their positions.
PHASES = ("data", "forward", "backward", "optimizer", "compile")
COMPILE = "compile"
OPTIMIZER = PHASES[3]  # the phase that closes a training step
ROOT_MODULE = "model"
FORWARD = "fwd"
BACKWARD = "bwd"
RECOMPUTE = "rec"
FACT_PREFIX = "fact:"
UPDATE_MARK = "update:"  # + the optimizer's number: the end of one optimizer update
BACKWARD_END_MARK = "backward-end"  # the end of one top-level backward pass
GC_RANGE_PREFIX = "gc:"  # + the generation collected: one collection of the garbage collector
MANUAL_MARK = "manual-iteration"  # the script placed its iterations itself: they are the steps
# What a fact mark may hold (one top-level key per mark, value a JSON object):
# - dataloader: one per DataLoader that fed a data phase: dataset (its class name),
#   num_workers, batch_size, pin_memory, persistent_workers, length (batches per epoch, null
#   when unsized);
# - annotation: at exit: module_calls (hooked forward calls), ns_per_call (measured cost of
#   one annotated module call, forward plus backward), steps (optimizer steps seen);
#   warmup_calls, warmup_steps (module_calls and steps when warm-up ended, rules.folding;
#   absent where nothing is folded: modules-all, --depth);
# - process: at start: rank, local_rank, world_size (null outside a distributed launcher);
# - module: once per module, at its first annotated call: layer (the range's qualified name),
#   type, in_shape (the tensor inputs' shapes, ``8x3x32x32``, several joined by ``, ``),
#   dtype (the first tensor input's), param_dtype (its own first parameter's, null without),
#   autocast (the autocast dtype in force, null when off), tf32 (float32 matmuls may use
#   TF32: ``torch.backends.cuda.matmul.allow_tf32``), tf32_conv (the same for cuDNN
#   convolutions: ``torch.backends.cudnn.allow_tf32``), device (``cuda``, ``cpu``, ...),
#   wrapper (the wrappers its model ran in, outermost first: ``DistributedDataParallel,
#   Lightning``; null without; rules.wrappers);
# - ddp_bucket: one per DDP gradient bucket, at the end of a step whose buckets differ from
#   the step before: id (the N of its ``ddp:bucket:N`` range), model (the DDP root's name),
#   index (DDP's bucket index), generation (1, 2, ...: one more per new set of buckets),
#   bytes, layers (gradient bytes per layer in the bucket);
# - folded: at the end of the warm-up step, when modules were folded (rules.folding; one mark
#   per FOLDED_PER_FACT modules): factor (FOLD_FACTOR), hook_ns (measured cost of one
#   annotated call), threshold_ns (factor x hook_ns), modules (``[layer, median forward call
#   ns in warm-up, the layer whose self time holds it, the module first called just before
#   it]`` each, in network order; null where there is none).
# - collective: one per call of a wrapped torch.distributed collective, on its thread just
#   before its ``coll:<op>`` range opens: op, group (its ranks), seq, bytes, dtype, async,
#   peer (sends and receives); rules/collectives.py, annotate/collectives.py.
DDP_BUCKET = "ddp_bucket"
FOLDED = "folded"
COLLECTIVE = "collective"
FACT_KEYS = ("dataloader", "annotation", "process", "module", DDP_BUCKET, FOLDED, "flops",
             "flops_shape", "memory", "saved", "saved_step", COLLECTIVE)
# A DDP gradient bucket's all-reduce: a push/pop range around DDP's collective for it.
DDP_BUCKET_PREFIX = "ddp:bucket:"
DDP_BUCKET_RE = re.compile(r"^ddp:bucket:(?P<id>\d+)$")


def ddp_bucket_range(bucket_id: int) -> str:
    """The range name of the all-reduce of DDP bucket ``bucket_id`` (see the fact)."""
    return f"{DDP_BUCKET_PREFIX}{bucket_id}"


MODULE_RANGE_RE = re.compile(r"^(?P<dir>fwd|bwd|rec):(?P<layer>[^:]+):(?P<type>[^:]+)$")


def module_range(direction: str, qualname: str, type_name: str) -> str:
    """The range name of one module call in one direction (``fwd`` or ``bwd``)."""
    if direction not in (FORWARD, BACKWARD, RECOMPUTE):
        raise ValueError(f"direction must be fwd, bwd or rec, not {direction!r}")
    return f"{direction}:{qualname or ROOT_MODULE}:{type_name}"


# What a module range's prefix means, in the words the tables use (``rec:`` -> recompute).
DIRECTIONS = ("forward", "backward", "recompute")


class ModuleRange(NamedTuple):
    direction: str
    qualname: str
    type_name: str


def parse_module_range(name: str) -> ModuleRange | None:
    """``fwd:layer1.0.conv1:Conv2d`` -> ``('forward', 'layer1.0.conv1', 'Conv2d')``, else None.

    The direction is the name's own (``rec:`` -> ``recompute``); ingest also makes a ``fwd:``
    range a recompute when it nests in a backward (``ingest.layers.label_ranges``).
    """
    m = MODULE_RANGE_RE.match(name)
    if m is None:
        return None
    direction = {BACKWARD: DIRECTIONS[1], RECOMPUTE: DIRECTIONS[2]}.get(m["dir"], DIRECTIONS[0])
    return ModuleRange(direction, m["layer"], m["type"])
