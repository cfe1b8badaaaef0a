"""torch.distributed collectives, each call in a range that says what it moves.

Place in the pipeline: annotate. The one documented exception to "never patch torch"
(DESIGN.md, Collectives): torch offers no hook that sees every collective on every backend,
so the public functions of ``torch.distributed`` named in :data:`~dlprof_lite.rules.collectives.OPS`
are replaced, in ``torch.distributed`` and ``torch.distributed.distributed_c10d`` alike, by
wrappers with their signatures (``functools.wraps``) and results unchanged; :func:`install`
returns the function that puts the originals back.

Each call writes one ``collective`` fact, on its own thread, just before its range opens:
``op``, ``group`` (the group's ranks, ``0-3`` or ``0,2``), ``seq`` (the call's number among the
collectives of that group in this process, from 1: every rank calls a group's collectives in
the same order, so the same number on every rank is the same instance), ``bytes`` (nccl-tests'
size, rules/collectives.py), ``dtype``, ``async`` and, for sends and receives, ``peer``; a
send or receive is numbered on its own directed pair (``seq`` among the transfers from the
sender to the receiver, :func:`~dlprof_lite.rules.collectives.pair_text`), never in its group:
stages of a pipeline send different numbers of tensors, and would otherwise number the
group's collectives differently.
A collective an FSDP unit issued (FSDP1 or ``fully_shard``: its owner on the calling stack,
rules/collectives.py) also names ``unit`` (the layer of the unit's first module) and ``pass``
(``forward`` or ``backward``, from the unit's training state: a prefetched unit's is the pass
that prefetched it).
The range, ``coll:<op>`` in the dlprof-lite domain, is a push/pop range around a blocking
call; for ``async_op=True`` (and ``isend``/``irecv``) it is a start/end range from the call to
the completion of the returned Work (a callback on its future), so the time is the
collective's, not the call's. A Work without a future ends its range when the call returns.

Calls made while tracing (``torch.compile``), from inside another wrapped call, or before
the default group exists pass straight through.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from dlprof_lite.annotate.backend import Backend
from dlprof_lite.rules.collectives import (
    FACT_KEY,
    FAMILY,
    FSDP_FAMILIES,
    FSDP_OWNER_LOCALS,
    FSDP_OWNERS,
    FSDP_STACK_DEPTH,
    OPS,
    POINT_TO_POINT,
    SENDS,
    SIZE_OF,
    fsdp_pass,
    pair_text,
    range_name,
    ranks_text,
)
from dlprof_lite.rules.facts import fact_text

LayerOf = Callable[[Any], "str | None"]  # a module's layer name (annotate/modules.py)

_C10D = "torch.distributed.distributed_c10d"
_MARK = "_dlprof_lite_collective"  # set on our wrappers (torch's own use functools.wraps too)


class Collectives:
    """The wrappers' shared state: sequence numbers per group and the group ranks seen."""

    def __init__(self, backend: Backend, layer_of: LayerOf | None = None) -> None:
        self._backend = backend
        self._layer_of = layer_of
        self._lock = threading.Lock()
        self._seq: dict[str, int] = {}
        self._groups: dict[int, tuple[Any, str]] = {}  # id(group) -> (group, ranks text)
        self._inside = threading.local()

    def group_text(self, dist: Any, group: Any) -> str:
        key = id(group)
        known = self._groups.get(key)
        if known is not None and known[0] is group:
            return known[1]
        text = ranks_text(list(dist.get_process_group_ranks(group or dist.group.WORLD)))
        self._groups[key] = (group, text)
        return text

    def next_seq(self, group: str) -> int:
        with self._lock:
            self._seq[group] = self._seq.get(group, 0) + 1
            return self._seq[group]

    def wrap(self, dist: Any, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        name = range_name(op)
        backend = self._backend
        compiling = _is_compiling()

        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._inside, "busy", False) or compiling() or not dist.is_initialized():
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # the call is wrong: let torch say so
                return original(*args, **kwargs)
            given = bound.arguments
            asynchronous = bool(given.get("async_op", False)) or op in ("isend", "irecv")
            try:
                fact = self._fact(dist, op, given, asynchronous)
            except Exception:  # never let the annotation break a collective
                return original(*args, **kwargs)
            backend.mark(fact)
            self._inside.busy = True
            if not asynchronous:
                backend.push(name)
                try:
                    return original(*args, **kwargs)
                finally:
                    backend.pop()
                    self._inside.busy = False
            range_id = backend.start(name)
            try:
                work = original(*args, **kwargs)
            except BaseException:
                backend.end(range_id)
                raise
            finally:
                self._inside.busy = False
            _end_on_completion(work, lambda: backend.end(range_id))
            return work

        setattr(call, _MARK, True)
        return call

    def _fact(self, dist: Any, op: str, given: dict[str, Any], asynchronous: bool) -> str:
        group = self.group_text(dist, given.get("group"))
        peer = given.get("dst", given.get("src")) if op in POINT_TO_POINT else None
        counted = group
        if isinstance(peer, int):
            me = int(dist.get_rank())
            counted = pair_text(me, peer) if op in SENDS else pair_text(peer, me)
        value: dict[str, Any] = {"op": op, "group": group, "seq": self.next_seq(counted),
                                 "bytes": 0, "dtype": None, "async": asynchronous}  # fmt: skip
        held = SIZE_OF[op]
        if held is not None:
            data = given.get(held)
            given_tensors: list[Any] = list(data) if isinstance(data, (list, tuple)) else [data]
            tensors: list[Any] = [t for t in given_tensors if hasattr(t, "element_size")]
            value["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
            value["dtype"] = str(tensors[0].dtype).removeprefix("torch.") if tensors else None
        if op in POINT_TO_POINT:
            value["peer"] = peer
        if self._layer_of is not None and FAMILY.get(op, op) in FSDP_FAMILIES:
            unit = fsdp_unit(self._layer_of)
            if unit is not None:
                value["unit"], value["pass"] = unit
        return fact_text(FACT_KEY, value)


def fsdp_unit(layer_of: LayerOf) -> tuple[str, str | None] | None:
    """The layer and pass of the FSDP unit whose method called the wrapped collective (its
    owner on the stack, rules/collectives.py), else None."""
    import sys
    from types import FrameType

    frame: FrameType | None = sys._getframe(3)  # above: this, the fact's and the wrapper's
    for _ in range(FSDP_STACK_DEPTH):
        if frame is None:
            return None
        for local in FSDP_OWNER_LOCALS:
            owner = frame.f_locals.get(local)
            attribute = FSDP_OWNERS.get(type(owner).__name__) if owner is not None else None
            if attribute is None:
                continue
            modules = getattr(owner, attribute, None)
            first = modules[0] if isinstance(modules, (list, tuple)) and modules else modules
            layer = layer_of(first) if first is not None else None
            if layer is None:
                return None
            state = getattr(getattr(owner, "_training_state", None), "name", "")
            return layer, fsdp_pass(str(state))
        frame = frame.f_back
    return None


def _end_on_completion(work: Any, end: Callable[[], None]) -> None:
    """Call ``end`` once ``work`` completes (now, when it cannot say when)."""
    if work is None:
        end()
        return
    try:
        future = work.get_future()
    except Exception:  # a backend without futures for this op
        end()
        return

    def done(_: Any) -> None:
        end()

    future.add_done_callback(done)


def _is_compiling() -> Callable[[], bool]:
    import torch

    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    return check if callable(check) else (lambda: False)


def install(backend: Backend, layer_of: LayerOf | None = None) -> Callable[[], None]:
    """Wrap the collectives of ``torch.distributed`` (when this torch has it); returns the
    function that restores torch's own. ``layer_of`` names an FSDP unit's module."""
    import sys

    import torch

    if not torch.distributed.is_available():
        return lambda: None
    dist = torch.distributed
    c10d = sys.modules.get(_C10D)
    state = Collectives(backend, layer_of)
    restored: list[tuple[Any, str, Any]] = []
    for op in OPS:
        original = getattr(dist, op, None)
        if original is None or getattr(original, _MARK, False):
            continue  # missing in this torch, or wrapped already
        wrapper = state.wrap(dist, op, original)
        for module in (dist, c10d):
            if module is not None and getattr(module, op, None) is original:
                setattr(module, op, wrapper)
                restored.append((module, op, original))

    def remove() -> None:
        for module, op, original in restored:
            setattr(module, op, original)
        restored.clear()

    return remove
