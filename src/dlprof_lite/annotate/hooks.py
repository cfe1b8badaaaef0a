"""Switching the automatic annotation on: global hooks, or the hooks of one model.

:func:`install` is the zero-code-change path the bootstrap uses. It registers torch's global
hooks: module forward pre/post hooks (module ranges, root forwards), optimizer step pre/post
hooks (the optimizer phase, the end of a training step; a closure passed to ``step`` is
wrapped for that call so that its forward and backward are booked as such), Dynamo's compile
start/end callbacks (the compile phase; registered once the script has imported Dynamo), a
``gc.callbacks`` entry (a ``gc:<generation>`` range per garbage collection, :mod:`.gc_ranges`),
and it wraps one method, the DataLoader iterator's ``__next__`` (the data phase, and one
``dataloader`` fact per loader that fed a data phase).

That wrapper is the one place a torch attribute is replaced. torch has no hook for "a batch
is being fetched"; the iterator base class ``_BaseDataLoaderIter`` defines ``__next__`` once
for every loader kind; replacing it on that class (not on ``DataLoader``, and no torch
function or tensor op) costs one Python call per batch, and :meth:`Annotation.remove`
restores the original. A program that defines its own iterator class keeps its own
``__next__`` and simply gets no data phase.

:func:`annotate_model` adds module ranges to one model only, with per-module hooks, for code
that wants ranges without the global hooks; phases then come from the manual
:func:`~dlprof_lite.annotate.phase` / :func:`~dlprof_lite.annotate.iteration`.
Use one or the other: both at once write every module range twice.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dlprof_lite.annotate import collectives, gc_ranges
from dlprof_lite.annotate.backend import get_backend
from dlprof_lite.annotate.phases import PhaseTracker, shared_tracker

if TYPE_CHECKING:
    import torch

# ``modules`` folds the modules too short to time into their parent after the warm-up step
# (.folding); ``modules-all`` keeps a range on every module.
LEVELS = ("none", "phases", "modules", "modules-all")
MODULE_LEVELS = ("modules", "modules-all")


class Annotation:
    """What :func:`install` or :func:`annotate_model` switched on; :meth:`remove` undoes it."""

    def __init__(
        self, undo: list[Callable[[], Any]] | None = None, tracker: PhaseTracker | None = None
    ) -> None:
        self._undo = undo or []
        self.tracker = tracker
        self.on_exit: list[Callable[[], Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._undo)

    def close(self) -> None:
        """End the ranges still open (program exit), keeping the hooks."""
        for step in self.on_exit:
            step()
        if self.tracker is not None:
            self.tracker.close()

    def remove(self) -> None:
        """Close what is open and remove every hook this annotation registered."""
        self.close()
        while self._undo:
            self._undo.pop()()


_installed: Annotation | None = None


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise ValueError(f"annotate level must be one of {', '.join(LEVELS)}, not {level!r}")
    return level


def check_depth(depth: int | None) -> int | None:
    if depth is not None and (not isinstance(depth, int) or depth < 0):
        raise ValueError(f"module depth must be a non-negative int or None, not {depth!r}")
    return depth


def install(level: str = "modules", depth: int | None = None) -> Annotation:
    """Annotate every model, optimizer and DataLoader of this process (torch is imported).

    ``level``: ``modules`` (phases, iterations and module ranges; after the warm-up step the
    modules too short to time are folded into their parent, :mod:`.folding`),
    ``modules-all`` (the same, every module kept), ``phases`` (no module ranges) or
    ``none``. ``depth`` limits module ranges to qualified names with at most that many dots
    plus one (the root model is depth 0), and folds nothing: the depth is the user's choice.
    Returns an inactive handle when no profiler is attached (see
    :func:`~dlprof_lite.annotate.enabled`). A second call replaces the first.
    """
    global _installed
    check_level(level)
    check_depth(depth)
    if _installed is not None:
        _installed.remove()
        _installed = None
    tracker = shared_tracker()
    if level == "none" or tracker is None:
        return Annotation()
    import torch
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim

    from dlprof_lite.annotate.modules import ModuleRanges

    ranges = ModuleRanges(tracker.backend, tracker, ranges=level in MODULE_LEVELS, depth=depth)
    warmup = None
    if level == "modules" and depth is None:
        from dlprof_lite.annotate.folding import Warmup

        warmup = ranges.warmup = Warmup(ranges, tracker)  # times calls until warm-up ends
    handles = [
        nn_module.register_module_forward_pre_hook(ranges.forward_pre),
        nn_module.register_module_forward_hook(
            ranges.forward_post, with_kwargs=True, always_call=True
        ),
        *_optimizer_hooks(torch, optim, tracker, warmup.after_step if warmup else None,
                          ranges.optimizer_stepped),
    ]
    undo: list[Callable[[], Any]] = [handle.remove for handle in handles]
    ranges.compiled.start()  # model.compile(): wraps the instance's compiled call
    undo.append(ranges.remove)
    if warmup is not None:
        undo.append(warmup.remove)
    undo.append(_wrap_dataloader_next(torch, tracker))
    undo.append(_watch_compilation(tracker))
    undo.append(collectives.install(tracker.backend, ranges.layer_of))
    stop_gc = gc_ranges.install(tracker.backend)
    undo.append(stop_gc)  # last in: the first hook removed
    _installed = Annotation(undo, tracker)
    # The program's run ends at exit: collections after it (the FLOP count's, the hook cost's
    # calibration, the interpreter's shutdown) are not its time, and would stretch its end.
    _installed.on_exit.append(stop_gc)
    _installed.on_exit.append(ranges.close)
    return _installed


def _optimizer_hooks(
    torch: Any, optim: Any, tracker: PhaseTracker, after_step: Callable[[], None] | None = None,
    stepped: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Global step pre/post hooks: the optimizer phase, and the end of a training step
    (``after_step`` is called after each, the end of warm-up for :mod:`.folding`;
    ``stepped`` with the optimizer, its first step's bytes for :mod:`.tensor_bytes`).

    The pre-hook also wraps a closure passed to ``step`` (LBFGS, Lightning): the closure runs
    forward and backward inside the step, and only its return hands the phase back to the
    optimizer. That wraps the script's own function, for this one call; torch is untouched.
    Under ``torch.compile`` of a step the hooks do nothing (no lock in traced code).
    """
    compiling = torch.compiler.is_compiling
    tracker.optimizer_base = optim.Optimizer

    def pre(optimizer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if compiling():
            return None
        tracker.on_optimizer_start(optimizer)
        if kwargs.get("closure") is not None:
            return args, {**kwargs, "closure": _handing_back(kwargs["closure"], tracker)}
        # ``args`` holds the optimizer itself first, then what the script passed.
        if len(args) > 1 and callable(args[1]):
            return (args[0], _handing_back(args[1], tracker), *args[2:]), kwargs
        return None

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        if not compiling():
            if stepped is not None:  # inside the optimizer phase: the step's own end
                stepped(optimizer)
            tracker.on_optimizer_end(optimizer)
            if after_step is not None:
                after_step()

    return [optim.register_optimizer_step_pre_hook(pre),
            optim.register_optimizer_step_post_hook(post)]  # fmt: skip


def _handing_back(closure: Callable[..., Any], tracker: PhaseTracker) -> Callable[..., Any]:
    @functools.wraps(closure)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return closure(*args, **kwargs)
        finally:
            tracker.on_closure_end()

    return call


def _watch_compilation(tracker: PhaseTracker) -> Callable[[], None]:
    """The compile phase from Dynamo's compile start/end callbacks; returns their removal.

    Dynamo is slow to import, so it is never imported here: the callbacks are registered
    now if it is already imported, else right after its callback module is imported (an
    import hook; ``torch.compile`` imports it before the compiled model's first call), or
    failing that by the tracker's probe (one ``sys.modules`` lookup per batch, root forward
    or step). The callbacks run outside traced code: no graph break.
    """
    registered: list[Any] = []

    def start(_: Any) -> None:
        tracker.on_compile_start()

    def end(_: Any) -> None:
        tracker.on_compile_end()

    def probe() -> bool:
        if registered:  # two threads may probe at once
            return True
        module = sys.modules.get("torch._dynamo.callback")
        if module is None:
            return False
        handler = module.callback_handler
        handler.register_start_callback(start)
        handler.register_end_callback(end)
        registered.append(handler)
        return True

    finder = None
    if not probe():
        from dlprof_lite.annotate.after_import import AfterImport

        # Right after the import (``model.compile()`` runs no hook of ours before its first
        # compilation); the tracker's probe stays as a fallback.
        finder = AfterImport("torch._dynamo.callback", probe)
        sys.meta_path.insert(0, finder)
        tracker.compile_probe = probe

    def remove() -> None:
        if tracker.compile_probe is probe:
            tracker.compile_probe = None
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for handler in registered:
            for callbacks, callback in ((handler.start_callbacks, start),
                                        (handler.end_callbacks, end)):  # fmt: skip
                if callback in callbacks:
                    callbacks.remove(callback)
        registered.clear()

    return remove


def _wrap_dataloader_next(torch: Any, tracker: PhaseTracker) -> Callable[[], None]:
    """Report each batch fetch to ``tracker``; returns the function that restores torch's."""
    cls = torch.utils.data.dataloader._BaseDataLoaderIter
    original = cls.__dict__["__next__"]
    compiling = torch.compiler.is_compiling

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        if not _will_yield(self) or compiling():
            return original(self)
        tracker.on_data(id(getattr(self, "_dataset", self)), functools.partial(_loader_fact, self))
        try:
            return original(self)
        finally:
            tracker.on_data_end()

    cls.__next__ = __next__

    def restore() -> None:
        if cls.__dict__.get("__next__") is __next__:
            cls.__next__ = original

    return restore


def _loader_fact(iterator: Any) -> dict[str, Any]:
    """The ``dataloader`` fact of the loader an iterator belongs to (read from the iterator)."""
    sampler = getattr(iterator, "_index_sampler", None)
    batch_size = getattr(sampler, "batch_size", None) if getattr(
        iterator, "_auto_collation", False) else None  # fmt: skip
    try:
        length: int | None = len(iterator)
    except TypeError:
        length = None
    dataset = getattr(iterator, "_dataset", None)
    return {
        "dataset": type(dataset).__name__ if dataset is not None else None,
        "num_workers": getattr(iterator, "_num_workers", None),
        "batch_size": batch_size,
        "pin_memory": getattr(iterator, "_pin_memory", None),
        "persistent_workers": getattr(iterator, "_persistent_workers", False),
        "length": length,
    }


def _will_yield(iterator: Any) -> bool:
    """False when a sized loader is exhausted (its next ``next()`` raises StopIteration)."""
    try:
        return bool(iterator._num_yielded < len(iterator))
    except (AttributeError, TypeError):
        return True  # an IterableDataset without a length: assume a batch comes


def annotate_model(
    model: torch.nn.Module, depth: int | None = None, name: str | None = None
) -> Annotation:
    """Module ranges for ``model`` alone: its forward and backward, and its submodules'.

    ``name`` prefixes the qualified names (default: the root is ``model``, a child
    ``layer1.0.conv1``); ``depth`` limits the ranges as in :func:`install`. Every module
    keeps its ranges (no folding: the model and depth are the caller's choice). A no-op
    handle when no profiler is attached.
    """
    check_depth(depth)
    backend = get_backend()
    if backend is None:
        return Annotation()
    from dlprof_lite.annotate.modules import ModuleRanges

    ranges = ModuleRanges(backend, None, depth=depth)
    ranges.name_model(model, name or "")
    undo: list[Callable[[], Any]] = []
    for module in model.modules():
        undo.append(module.register_forward_pre_hook(ranges.forward_pre).remove)
        undo.append(
            module.register_forward_hook(
                ranges.forward_post, with_kwargs=True, always_call=True
            ).remove
        )
    annotation = Annotation(undo)
    annotation.on_exit.append(ranges.close)
    return annotation
