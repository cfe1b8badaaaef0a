"""FLOPs per layer: which module calls are recorded, and their count after the run.

Place in the pipeline: annotate (the ``flops`` and ``flops_shape`` facts; the analysis:
:mod:`dlprof_lite.report.layers.flops`).

Recorded per input-shape signature of a root forward (:func:`signature`: the tensors' shapes,
dtypes and ``requires_grad`` in its arguments and keyword arguments, the other arguments'
values, grad mode and train/eval), at most :data:`MAX_SHAPES` per root: the first root call
with a new signature is *captured*: each annotated module call inside it (and the root's) is
kept as its input specs (:class:`~.flop_count.TensorSpec`, no tensor is held) with the modes
it ran under. Nothing is counted then: the step's time and the first-call cost stay as they
are. A ``flops_shape`` fact marks each root call whose signature differs from that root's
previous one (shape -1: a signature past the bound, not counted), so the analysis knows the
signature of every root call in every step.

The captured modules are held until the count. After the run (:meth:`FlopCapture.finish`, at
exit), or at the next root call once the program has let go of a captured model (a sweep's
trial, a function's local model), each captured call is counted on fake
tensors (:func:`~.flop_count.count_call`) with the module hooks quiet, and one ``flops`` fact
per (root, signature, layer) gives the layer's calls in that root call, its inclusive forward
and backward FLOPs, self FLOPs (inclusive less that of its captured child calls) and the
inclusive FLOPs by compute dtype; ``unknown`` says why a layer has none. Wrappers are seen
through (DDP's module is counted, never DDP's own forward, which would start collectives); a
sharded model (FSDP) is not countable from its shards, nor a module holding a ``SyncBatchNorm``
(its forward communicates). The count runs the program's Python code again on fake tensors
(module forwards, custom autograd Functions' forward and backward, forward hooks): code there
with side effects (logging, counters) sees one more call per captured call, at exit.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dlprof_lite.annotate.describe import autocast_dtype
from dlprof_lite.annotate.flop_count import NOT_COUNTABLE, CallState, TensorSpec, count_call
from dlprof_lite.annotate.wrappers import unwrapped

MAX_SHAPES = 8  # signatures counted per root; later ones are marked, not counted
MAX_CAPTURED = 20_000  # module calls kept in all
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
          torch.Size, slice, type(Ellipsis))  # fmt: skip
_SHARDED = ("FullyShardedDataParallel", "fully_shard")
# Modules whose forward communicates with other ranks: replaying one on a single rank at exit
# could wait forever for the others.
_COLLECTIVE = frozenset({"SyncBatchNorm"})
_CALL_IMPL = torch.nn.Module._call_impl.__code__
_DEPTH = 8  # nesting levels of inputs looked into
_FRAMES_UP = 6  # the hook, its callers here, then torch's _call_impl
COUNT_SECONDS = 120.0  # counting time in all; calls left after it are unknown, saying so


def signature(
    module: torch.nn.Module, args: Any, kwargs: Any
) -> tuple[tuple[Any, ...], frozenset[int]]:
    """What decides a root call's FLOPs (its inputs' shapes and the modes it runs under), and
    the ids of its inputs that are objects of the program's own (neither tensors nor plain
    values: a cache passed in)."""
    leaves: list[Any] = []
    _leaves((args, kwargs), leaves, _DEPTH)
    parts: list[Any] = [torch.is_grad_enabled(), module.training]
    objects = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append((tuple(leaf.shape), leaf.dtype, leaf.requires_grad))
        elif isinstance(leaf, _PLAIN) and _hashable(leaf):
            parts.append(leaf)
        else:
            parts.append(type(leaf).__qualname__)
            objects.append(id(leaf))
    return tuple(parts), frozenset(objects)


def _leaves(value: Any, out: list[Any], depth: int) -> None:
    """The leaves of nested tuples, lists and dicts (no closure: torch's pytree helpers make
    a reference cycle per call, garbage on every step)."""
    if depth and isinstance(value, (tuple, list)):
        for item in value:
            _leaves(item, out, depth - 1)
    elif depth and isinstance(value, dict):
        for item in value.values():
            _leaves(item, out, depth - 1)
    else:
        out.append(value)


def _replayable(value: Any, outside: frozenset[int], depth: int = _DEPTH) -> Any:
    """``value`` with each tensor as a :class:`TensorSpec`; ``_NotPlain`` for a value that
    cannot be given again (an object of the program's own).

    A key/value cache (a class named ``...Cache`` with ``get_seq_length``: Hugging Face's)
    that the root call made itself (not among the ``outside`` ids it was given) holds no
    earlier tokens: the call's FLOPs are those without it, and it is replayed as None. One
    passed in (generation with a past) is not replayable."""
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype, value.device,
                          value.requires_grad)  # fmt: skip
    if isinstance(value, _PLAIN):
        return value
    if depth and isinstance(value, (tuple, list)):
        items = [_replayable(item, outside, depth - 1) for item in value]
        if hasattr(value, "_make"):  # a named tuple
            return value._make(items)
        return type(value)(items) if type(value) in (tuple, list) else items
    if depth and isinstance(value, dict):
        return {key: _replayable(item, outside, depth - 1) for key, item in value.items()}
    kind = type(value)
    if kind.__name__.endswith("Cache") and hasattr(value, "get_seq_length"):
        if id(value) not in outside:
            return None
        raise _NotPlain(f"a {kind.__qualname__} passed in with earlier tokens cannot be replayed")
    raise _NotPlain(f"an input of type {kind.__qualname__} cannot be replayed")


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def call_kwargs() -> dict[str, Any]:
    """The keyword arguments of the module call whose global forward pre-hook is running.

    torch's global pre-hooks get the positional arguments only; the caller's frame
    (``Module._call_impl(self, *args, **kwargs)``) holds the others. Read at root calls
    only (once per step); ``{}`` where the frame is not that function."""
    frame = sys._getframe(1)
    for _ in range(_FRAMES_UP):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return {}
        if frame.f_code is _CALL_IMPL:
            found = frame.f_locals.get("kwargs")
            return found if isinstance(found, dict) else {}
    return {}


@dataclass
class _Call:
    """One captured module call (post order: children before their parent); ``module`` is
    held until the count (at exit, or once the program has let go of the model)."""

    layer: str
    module: torch.nn.Module | None
    depth: int
    args: Any
    kwargs: Any
    state: CallState
    reason: str | None = None


@dataclass
class _Capture:
    root: str
    shape: int
    outside: frozenset[int]  # ids of the objects the root call was given (signature)
    calls: list[_Call] = field(default_factory=list)
    owner: torch.nn.Module | None = None  # the root call's module (unwrapped)


@dataclass
class _Root:
    shapes: dict[tuple[Any, ...], int] = field(default_factory=dict)
    last: int | None = None


class FlopCapture:
    """Root signatures, captured calls, and their count at exit (see the module doc)."""

    def __init__(
        self, mark: Callable[[str, dict[str, Any]], None], quiet: Callable[[], Any]
    ) -> None:
        self._mark = mark
        self._quiet = quiet  # the module hooks do nothing within it
        self._roots: dict[str, _Root] = {}
        self._captures: list[_Capture] = []
        self._kept = 0
        self._spent = 0.0  # seconds counting so far

    def root_start(self, module: torch.nn.Module, layer: str, args: Any) -> _Capture | None:
        """A root forward starts: mark a signature change; the capture when it is new. First,
        the captures of a model the program has let go of are counted (and let go)."""
        if self._captures:
            self._count(self._dropped())
        kwargs = call_kwargs()
        root = self._roots.get(layer)
        if root is None:
            root = self._roots[layer] = _Root()
        key, outside = signature(module, args, kwargs)
        shape = root.shapes.get(key)
        capture = None
        if shape is None:
            shape = -1
            if len(root.shapes) < MAX_SHAPES and self._kept < MAX_CAPTURED:
                shape = root.shapes[key] = len(root.shapes)
                capture = _Capture(layer, shape, outside)
                self._captures.append(capture)
        if shape != root.last:
            root.last = shape
            self._mark("flops_shape", {"root": layer, "shape": shape})
        return capture

    def record(
        self, capture: _Capture, module: torch.nn.Module, layer: str, depth: int,
        args: Any, kwargs: Any, wrapper: str | None,
    ) -> None:  # fmt: skip
        """A module call inside a captured root call returned."""
        if self._kept >= MAX_CAPTURED:
            return
        self._kept += 1
        reason = None
        if wrapper and any(word in wrapper for word in _SHARDED):
            reason = "sharded parameters (FSDP): not countable from one rank's shards"
        target = unwrapped(module)
        if reason is None and any(type(m).__name__ in _COLLECTIVE for m in target.modules()):
            reason = "runs a collective in its forward: not replayed"
        try:
            specs = (_replayable(tuple(args), capture.outside),
                     _replayable(dict(kwargs or {}), capture.outside))  # fmt: skip
        except _NotPlain as exc:
            specs, reason = ((), {}), reason or str(exc)
        leaves: list[Any] = []
        _leaves(specs, leaves, _DEPTH)
        device = next((s.device.type for s in leaves if isinstance(s, TensorSpec)), "cpu")
        capture.calls.append(_Call(layer, target, depth, specs[0], specs[1], _state(device),
                                   reason))  # fmt: skip
        if depth == 0:  # the root call itself: the last of its capture
            capture.owner = target

    def finish(self) -> None:
        """After the run: count every captured call still waiting."""
        self._count(self._captures)

    def _dropped(self) -> list[_Capture]:
        """The finished captures whose model nothing but these captures refers to any more
        (a sweep's last trial, a model a function built and returned from): counted now
        rather than held to the end. ``sys.getrefcount`` less its argument and our local."""
        held: dict[int, int] = {}
        for capture in self._captures:
            owner = capture.owner
            if owner is not None:
                mine = 1 + sum(call.module is owner for call in capture.calls)
                held[id(owner)] = held.get(id(owner), 0) + mine
        dropped = []
        for capture in self._captures:
            owner = capture.owner
            if owner is not None and sys.getrefcount(owner) - 2 <= held[id(owner)]:
                dropped.append(capture)
            del owner
        return dropped

    def _count(self, ready: list[_Capture]) -> None:
        """Count ``ready`` with the module hooks quiet, write their ``flops`` facts and let
        go of their modules."""
        if not ready:
            return
        self._captures = [c for c in self._captures if c not in ready]
        start = time.monotonic()
        with self._quiet():
            for capture in ready:
                for fact in _layer_facts(capture, start + COUNT_SECONDS - self._spent):
                    self._mark("flops", fact)
                capture.calls.clear()
                capture.owner = None
        self._spent += time.monotonic() - start


class _NotPlain(Exception):
    pass


def _state(device: str) -> CallState:
    dtype = autocast_dtype(device)
    autocast = None if dtype is None else (device, dtype)
    return CallState(torch.is_grad_enabled(), autocast,
                     (device == "cuda" and bool(torch.backends.cuda.matmul.allow_tf32),
                      device == "cuda" and bool(torch.backends.cudnn.allow_tf32)))  # fmt: skip


@dataclass
class _Sum:
    calls: int = 0
    forward: int | None = 0
    backward: int | None = 0
    self_forward: int | None = 0
    self_backward: int | None = 0
    by_dtype: Counter[str] = field(default_factory=Counter)
    reason: str | None = None


def _layer_facts(capture: _Capture, deadline: float) -> list[dict[str, Any]]:
    """One fact per layer of one captured root call: counts summed over its calls."""
    sums: dict[str, _Sum] = {}
    done: list[tuple[int, Counter[str] | None, Counter[str] | None]] = []  # depth, fwd, bwd
    for call in capture.calls:
        module = call.module
        if call.reason is None and time.monotonic() > deadline:
            call.reason = f"the FLOP count stopped after {COUNT_SECONDS:.0f} s in all"
        if call.reason is None and module is not None:
            counted = count_call(module, call.args, call.kwargs, call.state)
            if counted.reason is not None and counted.reason.startswith(NOT_COUNTABLE):
                counted = count_call(module, call.args, call.kwargs, call.state, hooks=True)
            forward, backward, reason = counted.forward, counted.backward, counted.reason
        else:
            forward = backward = None
            reason = call.reason
        children: list[tuple[int, Counter[str] | None, Counter[str] | None]] = []
        while done and done[-1][0] > call.depth:  # its captured children, already counted
            children.append(done.pop())
        done.append((call.depth, forward, backward))
        total = sums.setdefault(call.layer, _Sum())
        total.calls += 1
        total.reason = total.reason or reason
        if forward is None or backward is None:
            total.forward = total.backward = total.self_forward = total.self_backward = None
            continue
        total.forward = _add(total.forward, sum(forward.values()))
        total.backward = _add(total.backward, sum(backward.values()))
        total.self_forward = _add(total.self_forward, _less(forward, [c[1] for c in children]))
        total.self_backward = _add(total.self_backward,
                                   _less(backward, [c[2] for c in children]))  # fmt: skip
        total.by_dtype.update(forward)
        total.by_dtype.update(backward)
    return [
        {"root": capture.root, "shape": capture.shape, "layer": layer, "calls": s.calls,
         "fwd": s.forward, "bwd": s.backward, "self_fwd": s.self_forward,
         "self_bwd": s.self_backward,
         "by_dtype": dict(s.by_dtype) if s.forward is not None else None,
         "unknown": s.reason if s.forward is None else None}
        for layer, s in sums.items()
    ]  # fmt: skip


def _add(total: int | None, value: int | None) -> int | None:
    return None if total is None or value is None else total + value


def _less(own: Counter[str], children: list[Counter[str] | None]) -> int | None:
    if any(c is None for c in children):
        return None
    return max(sum(own.values()) - sum(sum(c.values()) for c in children if c is not None), 0)
