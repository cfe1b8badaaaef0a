"""Compiled modules: ranges and phase events without adding graph breaks or recompiles.

Inside a region Dynamo traces, the module hooks do nothing (``torch.compiler.is_compiling()``
is their first test, which Dynamo folds to a constant): a lock, an NVTX call or a
``grad_fn`` read there would break the graph or add guards. So a compiled region is one
opaque call, annotated from outside:

- ``torch.compile(model)`` returns an ``OptimizedModule`` whose own ``__call__`` runs
  eagerly with the global hooks: it gets the root ``fwd:``/``bwd:`` ranges and the
  forward/backward phase events, named as the wrapped model (binding and class).
- ``model.compile()`` compiles ``model._call_impl`` itself, hooks included, so no hook of
  the model runs eagerly. Its call goes through ``Module._wrapped_call_impl``, which calls
  the instance attribute ``_compiled_call_impl`` when set. :class:`CompiledRoots` replaces
  that attribute on the instance (never on a class, never a torch function) by
  :class:`_RootCall`, which runs the root forward hooks around the compiled call, eagerly;
  removal puts the original back. The module is found when Dynamo starts compiling it:
  Dynamo's compile-start callback walks the calling frames for ``_wrapped_call_impl``. So
  the first call (the one that compiles) has no module range; later calls do.
  The callback is registered when ``torch._dynamo.callback`` is imported (an import hook;
  importing Dynamo ourselves would cost seconds).

What a compiled region shows: one ``fwd:`` range (the root, or the module given to
``torch.compile``) around the compiled forward, one ``bwd:`` range around its compiled
backward (``CompiledFunctionBackward``), and the forward/backward phases; the kernels
launched inside are attributed to those ranges. Submodules inside the region get no ranges
(Inductor fuses across them, so a per-layer split would be invented), and a graph break
inside the region runs the code between graphs eagerly without module ranges either.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import Any, Protocol

import torch

from dlprof_lite.annotate.after_import import AfterImport


class ModuleRanges(Protocol):
    """What a compiled region's hooks call on their owner (:class:`~.modules.ModuleRanges`)."""

    def forward_pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None: ...

    def forward_post(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None: ...

_CALLBACK_MODULE = "torch._dynamo.callback"
_WRAPPED_CODE = torch.nn.Module._wrapped_call_impl.__code__


class _RootCall:
    """``_compiled_call_impl`` of one module: the root hooks around the compiled call."""

    __slots__ = ("module", "original", "ranges")

    def __init__(self, ranges: ModuleRanges, module: torch.nn.Module, original: Any) -> None:
        self.ranges = ranges
        self.module = weakref.ref(module)  # the module holds us: no strong cycle
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self.module()
        if module is None or torch.compiler.is_compiling():
            return self.original(*args, **kwargs)
        self.ranges.forward_pre(module, args)
        output = None
        try:
            output = self.original(*args, **kwargs)
            return output
        finally:
            self.ranges.forward_post(module, args, kwargs, output)


class CompiledRoots:
    """Finds modules compiled with ``model.compile()`` and wraps their compiled call."""

    def __init__(self, ranges: ModuleRanges) -> None:
        self._ranges = ranges
        self._wrapped: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._handler: Any = None
        self._finder: AfterImport | None = None
        # OptimizedModule warns, per call site, that global hooks fire for it too: that is
        # what gives it its range (inner hooks do nothing while Dynamo traces).
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there")

    def start(self) -> None:
        if _CALLBACK_MODULE in sys.modules:
            self._register()
        else:
            self._finder = AfterImport(_CALLBACK_MODULE, self._register)
            sys.meta_path.insert(0, self._finder)

    def _register(self) -> None:
        self._handler = sys.modules[_CALLBACK_MODULE].callback_handler
        self._handler.register_start_callback(self._on_compile)

    def _on_compile(self, _args: Any = None) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is _WRAPPED_CODE:
                module = frame.f_locals.get("self")
                if isinstance(module, torch.nn.Module):
                    self.wrap(module)
            frame = frame.f_back  # type: ignore[assignment]

    def wrap(self, module: torch.nn.Module) -> None:
        original = module.__dict__.get("_compiled_call_impl")
        if original is None or isinstance(original, _RootCall):
            return
        module._compiled_call_impl = _RootCall(self._ranges, module, original)
        self._wrapped.add(module)

    def remove(self) -> None:
        """Put every original ``_compiled_call_impl`` back and drop the callback."""
        for module in list(self._wrapped):
            current = module.__dict__.get("_compiled_call_impl")
            if isinstance(current, _RootCall):
                module._compiled_call_impl = current.original
        self._wrapped = weakref.WeakSet()
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        if self._handler is not None and self._on_compile in self._handler.start_callbacks:
            self._handler.start_callbacks.remove(self._on_compile)
        self._handler = None
