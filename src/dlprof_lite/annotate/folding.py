"""Adaptive depth: after the warm-up step, modules too short to time are folded into their parent.

The rule and its numbers are in :mod:`dlprof_lite.rules.folding`. While warming up, the
module-range hooks (:class:`~.modules.ModuleRanges`) hand each call to :class:`Warmup`,
which reads the thread's CPU clock as its forward starts and ends (not the wall clock: on a
loaded machine one call's wall time may be another process's), so each module's forward
call durations are known when the warm-up step ends (nothing is timed after; the samples are
a few ints per module, no object per call). The hooks registered with torch stay the same:
Dynamo guards on the global hooks, so swapping them would recompile compiled code. Warm-up
ends:

- at the end of the first optimizer step (the global step post-hook; most scripts);
- at the end of the first inference iteration (a root model called with grad off before any
  backward or step: the tracker's iteration 0);
- when a root model starts its ``WARMUP_FORWARDS``-th forward with grad on and no optimizer
  has stepped (gradient accumulation, a hand-written update): before that forward starts.

Then :meth:`Warmup.finish` takes the timing off the hook path, measures the cost of one
annotated call (:meth:`~.modules.ModuleRanges.hook_cost`, a short measurement: it runs in
the warm-up step's tail), picks the folds (:func:`choose_folds`, on each module's calls less
the annotation of the calls inside them; the warm-up step's forward time is its root
forwards, summed), folds each module and records the ``folded`` fact (which modules, their
median call, the threshold, the layer whose self time holds each, the module called just
before each).

Folding a module marks its name folded (the range hooks return at once for it: no range, no
backward record, so its forward and backward time is in the nearest annotated ancestor's
self time). When it has no hook of its own and no one else registered global module hooks,
its ``_compiled_call_impl`` instance attribute is also set to :class:`_Folded`, which calls
its ``forward`` directly: ``Module._wrapped_call_impl`` calls that attribute instead of
``_call_impl``, so torch's hook dispatch (about 2 µs per call with any global hook
registered) is skipped too, and a folded call costs no more than an unannotated one. The
same instance attribute carries ``model.compile()``'s compiled call (:mod:`.compiled`); it is
set only where it is unset. A hook registered on the module later, ``torch.jit`` tracing or
Dynamo compiling it send the call through ``_call_impl`` as before. ``Module.__getstate__``
drops the attribute, so a saved or deep-copied model carries no fold, and
:meth:`Warmup.remove` takes it off again.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import torch
from torch.nn.modules import module as nn_module

from dlprof_lite.annotate import facts
from dlprof_lite.annotate.calibrate import QUICK_ROUNDS
from dlprof_lite.rules.folding import (
    DOMINANT_SHARE,
    FOLD_FACTOR,
    FOLD_SAMPLES,
    FOLDED_PER_FACT,
    WARMUP_FORWARDS,
)
from dlprof_lite.rules.gemm import is_tc_eligible
from dlprof_lite.rules.names import FOLDED

if TYPE_CHECKING:
    from dlprof_lite.annotate.module_names import ModuleName, ModuleNames
    from dlprof_lite.annotate.phases import PhaseTracker



class ModuleRanges(Protocol):
    """What the warm-up reads and sets on its owner (:class:`~.modules.ModuleRanges`)."""

    names: ModuleNames
    calls: int
    warmup: Warmup | None
    warm_up: dict[str, int]

    def hook_cost(self, rounds: int = ...) -> int: ...


# The calling thread's CPU time: a call's own work, not the time another process held the
# core (on a loaded machine a wall-clock sample of one call may be preemption). Warm-up only.
_clock = time.thread_time_ns
_compiling = torch.compiler.is_compiling
_tracing = torch._C._get_tracing_state
_grad_enabled = torch.is_grad_enabled


class Timed(NamedTuple):
    """One module's warm-up: its layer, median and total forward call time, and whether the
    rule must keep it (a root, a wrapper's module, a Tensor Core eligible module on a GPU)."""

    layer: str
    median_ns: int
    total_ns: int
    kept: bool = False


def choose_folds(timed: Iterable[Timed], threshold_ns: float, forward_ns: float) -> list[Timed]:
    """The modules to fold: median call below ``threshold_ns``, calls adding up to less than
    ``DOMINANT_SHARE`` of the warm-up step's forward time (``forward_ns``), not kept; in the
    order given."""
    dominant = DOMINANT_SHARE * forward_ns
    return [t for t in timed
            if not t.kept and t.median_ns < threshold_ns and t.total_ns < dominant]  # fmt: skip


class Fold(NamedTuple):
    """A folded module: its layer, median forward call in warm-up, the layer whose self time
    holds its calls from then on, the module first called just before it (network order)."""

    layer: str
    median_ns: int
    into: str | None
    after: str | None


def fold_facts(folds: list[Fold], hook_ns: int, threshold_ns: int) -> list[dict[str, Any]]:
    """The ``folded`` fact values for ``folds``, ``FOLDED_PER_FACT`` modules each."""
    return [
        {"factor": FOLD_FACTOR, "hook_ns": hook_ns, "threshold_ns": threshold_ns,
         "modules": [list(f) for f in folds[i : i + FOLDED_PER_FACT]]}
        for i in range(0, len(folds), FOLDED_PER_FACT)
    ]  # fmt: skip


class _Folded:
    """``_compiled_call_impl`` of a folded module: its ``forward``, without hook dispatch."""

    __slots__ = ("module",)
    folded = True  # no compiled call: what .tensor_bytes looks for to tell them apart

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = weakref.ref(module)  # the module holds us: no strong cycle

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module: Any = self.module()
        # What _call_impl would do differently: hooks of its own, tracing, compiling.
        if (module._forward_pre_hooks or module._forward_hooks or module._backward_pre_hooks
                or module._backward_hooks or _tracing() or _compiling()):  # fmt: skip
            return module._call_impl(*args, **kwargs)
        return module.forward(*args, **kwargs)


class _Stack(threading.local):
    """The modules whose forward runs on this thread, and when each started."""

    def __init__(self) -> None:
        self.modules: list[torch.nn.Module] = []
        self.starts: list[int] = []


class Warmup:
    """Times forward calls until the warm-up step ends, then folds the modules too short.

    :class:`~.modules.ModuleRanges` calls it while its ``warmup`` attribute holds it (the
    same global hooks stay registered throughout: Dynamo guards on them, so swapping them
    would recompile compiled code): :meth:`started` as a timed call's pre-hook ends,
    :meth:`ended` as its post-hook starts, :meth:`root_starts` and :meth:`root_done` around a
    root's forward; :meth:`after_step` from the optimizer step post-hook.
    """

    def __init__(self, ranges: ModuleRanges, tracker: PhaseTracker) -> None:
        self._ranges = ranges
        self._tracker = tracker
        self._stack = _Stack()
        self._samples: dict[int, list[int]] = {}
        self._totals: dict[int, int] = {}
        self._counts: dict[int, int] = {}
        self._extra: dict[int, int] = {}  # annotation work timed inside each module's calls
        self._clock_ns = _clock_cost()  # one clock read: two of them time each inner call
        # Each module's parent at its first call, in first-call (network) order.
        self._parents: dict[int, int | None] = {}
        self._forwards: dict[int, int] = {}  # grad-on forwards of each root model
        self._lock = threading.Lock()
        self._shortcuts: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self.done = False
        self.folds: list[Fold] = []

    # --- timing ------------------------------------------------------------------------

    def started(self, module: torch.nn.Module) -> None:
        """A call's pre-hook is done: its forward starts now."""
        stack = self._stack
        modules = stack.modules
        key = id(module)
        if key not in self._parents:
            self._parents[key] = id(modules[-1]) if modules else None
        modules.append(module)
        stack.starts.append(_clock())

    def ended(self, module: torch.nn.Module) -> None:
        """A call's forward returned (or raised): record its duration."""
        end = _clock()
        stack = self._stack
        modules = stack.modules
        for index in range(len(modules) - 1, -1, -1):  # the last one, but for a raise
            if modules[index] is module:
                self._record(id(module), end - stack.starts[index])
                del modules[index:], stack.starts[index:]
                return

    @staticmethod
    def now() -> int:
        return _clock()

    def annotated(self, start: int) -> None:
        """The annotation's own first-call work (a ``module`` fact) ran since ``start``
        (:meth:`now`) inside the modules whose forward runs on this thread: not theirs."""
        ns = _clock() - start + self._clock_ns
        extra = self._extra
        for module in self._stack.modules:
            key = id(module)
            extra[key] = extra.get(key, 0) + ns

    def _record(self, key: int, ns: int) -> None:
        samples = self._samples.get(key)
        if samples is None:
            samples = self._samples[key] = []
        if len(samples) < FOLD_SAMPLES:
            samples.append(ns)
        self._totals[key] = self._totals.get(key, 0) + ns
        self._counts[key] = self._counts.get(key, 0) + 1

    # --- the end of warm-up ------------------------------------------------------------

    def root_starts(self, module: torch.nn.Module) -> None:
        """A root forward starts outside backward (before its phase event): a root model's
        ``WARMUP_FORWARDS``-th with grad on and no optimizer step yet ends warm-up first."""
        seen = self._forwards.get(id(module), 0)
        if seen and seen >= WARMUP_FORWARDS - 1 and not self._tracker.steps and _grad_enabled():
            self.finish()

    def root_done(self, module: torch.nn.Module, grad: bool) -> None:
        """A root forward returned (after its phase event): count a root model's grad-on
        forward; the end of the first inference iteration ends warm-up."""
        if self._tracker.inference_calls:
            self.finish()
            return
        name = self._ranges.names.known(module)
        if grad and name is not None and name.model:
            key = id(module)
            self._forwards[key] = self._forwards.get(key, 0) + 1

    def after_step(self) -> None:
        """The optimizer step post-hook: the first step's end ends warm-up."""
        if not self.done and self._tracker.steps:
            self.finish()

    # --- the decision ------------------------------------------------------------------

    def finish(self) -> None:
        """Warm-up is over: plain hooks from now on, fold the modules too short to time."""
        with self._lock:
            if self.done:
                return
            self.done = True
        ranges = self._ranges
        if ranges.warmup is self:
            ranges.warmup = None  # the plain hook path from now on
        ranges.warm_up = {"warmup_calls": ranges.calls, "warmup_steps": self._tracker.steps}
        self._stack.modules.clear()
        self._stack.starts.clear()
        hook_ns = ranges.hook_cost(QUICK_ROUNDS)  # ~6 ms, in the warm-up step's tail
        threshold_ns = FOLD_FACTOR * hook_ns
        timed = dict(self._timed(hook_ns))
        # The warm-up step's forward time: its root forwards, summed (the step's first
        # optimizer step and first calls hold one-off work: a module's share of the forward
        # is its share of the step).
        forward_ns = sum(t.total_ns for k, t in timed.items() if self._parents[k] is None)
        chosen = set(choose_folds(timed.values(), threshold_ns, forward_ns))
        keys = [key for key, t in timed.items() if t in chosen]
        self._fold(keys, timed)
        for value in fold_facts(self.folds, hook_ns, threshold_ns):
            facts.record(FOLDED, value)
        self._samples.clear()
        self._totals.clear()
        self._counts.clear()
        self._extra.clear()

    def _timed(self, hook_ns: int) -> Iterator[tuple[int, Timed]]:
        """Each timed module's warm-up calls, less the annotation of the calls inside them
        (its descendants' calls x ``hook_ns``, and the ``module`` facts written inside them,
        as timed): what it takes unannotated. A container's calls hold its children's hooks;
        judged on them, a block of tiny modules that are folded themselves would be kept for
        the cost of annotating them."""
        names = self._ranges.names.table
        inner = self._inner_calls()
        for key, parent in self._parents.items():
            samples = self._samples.get(key)
            name = names.get(key)
            module = name.ref() if name is not None else None
            if not samples or name is None or module is None:
                continue
            per_call = hook_ns + 2 * self._clock_ns
            annotation = inner.get(key, 0) * per_call + self._extra.get(key, 0)  # all calls
            median = sorted(samples)[len(samples) // 2] - annotation // self._counts[key]
            total = self._totals[key] - annotation
            kept = parent is None or name.alias or name.depth == 0 or _gpu_matmul(module, name)
            yield key, Timed(name.qualname, max(median, 0), max(total, 0), kept)

    def _inner_calls(self) -> dict[int, int]:
        """Per module, the calls of the modules inside it (by their first call's parent)."""
        inner: dict[int, int] = {}
        for key, count in self._counts.items():
            up = self._parents.get(key)
            while up is not None:  # a parent's first call started before its child's
                inner[up] = inner.get(up, 0) + count
                up = self._parents.get(up)
        return inner

    def _fold(self, keys: list[int], timed: dict[int, Timed]) -> None:
        names = self._ranges.names.table
        folded = set(keys)
        shortcut = _only_our_global_hooks()
        order = list(self._parents)  # first calls: network order
        before = dict(zip(order[1:], order[:-1], strict=True))
        for key in keys:
            name = names[key]
            name.folded = True
            module = name.ref()
            if shortcut and module is not None and _plain(module):
                module._compiled_call_impl = _Folded(module)
                self._shortcuts.add(module)
            parent = self._parents.get(key)
            while parent is not None and parent in folded:
                parent = self._parents.get(parent)
            self.folds.append(Fold(name.qualname, timed[key].median_ns,
                                   _qualname(names, parent), _qualname(names, before.get(key))))

    def remove(self) -> None:
        """Take every fold shortcut off again (the names' flags go with their ranges)."""
        for module in list(self._shortcuts):
            if isinstance(module.__dict__.get("_compiled_call_impl"), _Folded):
                del module.__dict__["_compiled_call_impl"]
        self._shortcuts = weakref.WeakSet()


def _clock_cost(reads: int = 200) -> int:
    """ns of one read of the warm-up clock (a system call where the C library has no faster
    path): the median of three batches."""
    batches = []
    for _ in range(3):
        start = _clock()
        for _ in range(reads):
            _clock()
        batches.append((_clock() - start) // (reads + 1))
    return sorted(batches)[1]


def _qualname(names: dict[int, ModuleName], key: int | None) -> str | None:
    name = names.get(key) if key is not None else None
    return name.qualname if name is not None and name.ref() is not None else None


def _gpu_matmul(module: torch.nn.Module, name: ModuleName) -> bool:
    """A Tensor Core eligible module with parameters on a GPU: its host call is a launch,
    its GPU time is timed by its kernels, and the advice is about its Tensor Core use."""
    if not is_tc_eligible(name.type):
        return False
    param = next(module.parameters(recurse=False), None)
    return param is not None and param.device.type != "cpu"


def _only_our_global_hooks() -> bool:
    """No global module hooks but our forward pre and post hook: the shortcut skips only ours."""
    return (len(nn_module._global_forward_pre_hooks) <= 1
            and len(nn_module._global_forward_hooks) <= 1
            and not nn_module._global_backward_pre_hooks
            and not nn_module._global_backward_hooks)  # fmt: skip


def _plain(module: torch.nn.Module) -> bool:
    """No hook of its own, no compiled call, a plain ``nn.Module`` call: the shortcut may
    stand for ``_call_impl``."""
    return (
        module.__dict__.get("_compiled_call_impl") is None
        and type(module).__call__ is torch.nn.Module.__call__
        and type(module)._call_impl is torch.nn.Module._call_impl
        and not isinstance(module, torch.jit.ScriptModule)
        and not (module._forward_pre_hooks or module._forward_hooks
                 or module._backward_pre_hooks or module._backward_hooks)
    )  # fmt: skip
