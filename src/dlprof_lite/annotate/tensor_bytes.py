"""Memory per layer: the bytes of its parameters, gradients, optimizer state and saved
activations, as the ``memory`` and ``saved`` facts (the analysis:
:mod:`dlprof_lite.report.layers.memory`).

Place in the pipeline: annotate (in the profiled process).

- **Parameters, gradients, optimizer state**: at the end of each optimizer's first step (its
  state exists from then on, its gradients are still there), the real tensors of the
  parameters it updates: each parameter's bytes, its ``.grad``'s, and the tensors of its
  ``optimizer.state`` entry, booked to the layer that owns the parameter (the first module
  that holds it, in the order modules were first called: a tied weight's second holder says
  ``tied`` and gets no bytes). Every storage is counted once (two views of one buffer: one
  storage; an optimizer's flat ``foreach`` buffers are the state tensors it holds).
- **Saved activations**: during the first analysed training step (the second iteration: the
  one after the warm-up step),
  ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor autograd saves for
  backward: its storage is booked to the innermost annotated module running at save time,
  once (a storage saved again, by that layer or another, is the first saver's); a parameter's
  storage is no activation. A tensor a custom ``autograd.Function`` keeps on ``ctx`` outside
  ``save_for_backward`` is invisible to the hooks. Off for a model that is or holds a
  compiled module (the hooks would break its graph) and under ``torch.func`` transforms (the
  hooks refuse them), with the ``saved_step`` fact saying so.
- **On a GPU**, in the same step: each module's allocated bytes at entry and exit
  (``torch.cuda.memory_allocated``) and the step's allocator peak
  (``max_memory_allocated`` after a reset at the step's first forward), as the ``saved``
  facts' ``cuda`` fields.

Cost: nothing per call outside the measured step; in it, a dict update per saved tensor and
(on a GPU) two allocator queries per module call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

MAX_LAYERS = 10_000  # facts per kind written (a program building modules per step)
STEP_TRIES = 3  # an optimizer's steps looked at for parameters with a layer


Key = tuple[str, int]


def storage_key(tensor: torch.Tensor) -> Key | None:
    """(device, data pointer) of a tensor's storage; None when it has none (a meta, sparse
    or wrapper tensor)."""
    try:
        return str(tensor.device), int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def storage_bytes(tensor: torch.Tensor) -> int:
    try:
        return int(tensor.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        return int(tensor.numel() * tensor.element_size())


def _tensors(value: Any, depth: int = 3) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1)
    elif depth and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth - 1)


class Bytes:
    """Per layer sums of distinct storages (the first booking of a storage wins)."""

    def __init__(self) -> None:
        self.seen: set[Key] = set()
        self.by_layer: dict[str, int] = {}

    def add(self, layer: str, tensor: torch.Tensor) -> None:
        key = storage_key(tensor)
        if key is None or key[1] == 0 or key in self.seen:
            return
        self.seen.add(key)
        self.by_layer[layer] = self.by_layer.get(layer, 0) + storage_bytes(tensor)


def owners(
    modules: Iterable[tuple[str, torch.nn.Module]],
) -> tuple[dict[int, str], dict[str, str]]:
    """Each parameter's owning layer (by ``id``: the first module holding it), and the layers
    that hold a parameter another layer owns (tied) -> that owner."""
    owner: dict[int, str] = {}
    tied: dict[str, str] = {}
    for layer, module in modules:
        for param in module._parameters.values():
            if param is None:
                continue
            first = owner.setdefault(id(param), layer)
            if first != layer:
                tied.setdefault(layer, first)
    return owner, tied


def static_facts(
    optimizer: Any, modules: Iterable[tuple[str, torch.nn.Module]]
) -> list[dict[str, Any]]:
    """One ``memory`` fact per layer with parameters this optimizer updates: parameter,
    gradient and optimizer-state bytes of them (module names as the ranges carry them)."""
    owner, tied = owners(modules)
    params, grads, state = Bytes(), Bytes(), Bytes()
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            layer = owner.get(id(param))
            if layer is None:
                continue
            params.add(layer, param)
            if param.grad is not None:
                grads.add(layer, param.grad)
            for tensor in _tensors(getattr(optimizer, "state", {}).get(param, {})):
                state.add(layer, tensor)  # a step counter tensor too: real memory
    layers = list(dict.fromkeys([*params.by_layer, *tied]))
    return [
        {"layer": layer, "optimizer": type(optimizer).__name__,
         "param_bytes": params.by_layer.get(layer, 0), "grad_bytes": grads.by_layer.get(layer, 0),
         "optimizer_bytes": state.by_layer.get(layer, 0), "tied": tied.get(layer)}
        for layer in layers[:MAX_LAYERS]
    ]  # fmt: skip


class SavedBytes:
    """The saved activations of the measured step, by innermost annotated module (see the
    module doc). ``innermost`` names the layer running on the calling thread (None: none)."""

    def __init__(
        self, innermost: Callable[[], str | None], params: Callable[[], set[Key]]
    ) -> None:
        self._innermost = innermost
        self._params = params
        self.bytes = Bytes()
        self._param_keys: set[Key] | None = None
        self._context: Any = None
        self._thread = 0

    def start(self) -> bool:
        """Push the saved-tensor hooks (False where torch refuses them)."""
        if self._context is not None:
            return True
        if self._param_keys is None:
            self._param_keys = self._params()
            self.bytes.seen |= self._param_keys
        context = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        try:
            context.__enter__()
        except RuntimeError:
            return False
        self._context, self._thread = context, threading.get_ident()
        return True

    def stop(self) -> None:
        """Pop the hooks, on the thread that pushed them: torch keeps them per thread, and a
        module a model runs on a thread of its own (a pool) is a root call there too."""
        if self._context is None or threading.get_ident() != self._thread:
            return
        context, self._context = self._context, None
        context.__exit__(None, None, None)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        layer = self._innermost()
        if layer is not None:
            self.bytes.add(layer, tensor)
        return tensor


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def param_keys(modules: Iterable[tuple[str, torch.nn.Module]]) -> set[Key]:
    """The storages of every parameter of ``modules`` (no activation is one of them)."""
    keys = set()
    for _, module in modules:
        for param in module._parameters.values():
            if param is not None and (key := storage_key(param)) is not None:
                keys.add(key)
    return keys


class MemoryFacts:
    """The measured step's saved activations and allocator figures, and each optimizer's
    first-step bytes (see the module doc); ``mark`` writes a fact, ``modules`` lists the
    known (layer, module) pairs, ``innermost`` the layer running on the calling thread."""

    def __init__(
        self, mark: Callable[[str, dict[str, Any]], None],
        modules: Callable[[], list[tuple[str, torch.nn.Module]]],
        innermost: Callable[[], str | None],
    ) -> None:  # fmt: skip
        self._mark = mark
        self._modules = modules
        self.saved = SavedBytes(innermost, lambda: param_keys(modules()))
        self._stepped: set[int] = set()  # optimizers whose first step was recorded
        self._tries: dict[int, int] = {}  # steps looked at, per optimizer
        self._forwards = 0  # training root forwards (a loop without optimizer)
        self.measuring = False
        self.done = False
        self._off: str | None = None
        self._cuda = False
        self.cuda_in: dict[str, int] = {}
        self.cuda_out: dict[str, int] = {}

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer step ended: its first one writes the ``memory`` facts of its params
        (a later one when none of them had a layer yet: a compiled model is named at its
        second call; at most :data:`STEP_TRIES` steps are looked at)."""
        key = id(optimizer)
        if key in self._stepped or torch.compiler.is_compiling():
            return
        tries = self._tries[key] = self._tries.get(key, 0) + 1
        found = static_facts(optimizer, self._modules())
        if not found and tries < STEP_TRIES:
            return
        self._stepped.add(key)
        for fact in found:
            self._mark("memory", fact)

    def root_start(
        self, module: torch.nn.Module, iterations: int | None, grad: bool, training: bool
    ) -> None:
        """A root forward starts (outside backward). The measured step is the first analysed
        one: the second iteration (``iterations``: how many the tracker has opened, this
        one's included; None without a tracker: the second training forward)."""
        if self.done:
            return
        if grad and training:
            self._forwards += 1
        index = iterations if iterations is not None else self._forwards
        if self.measuring and index > 2:
            self.finish()
            return
        if index != 2 or not (grad and training):
            return
        if not self.measuring:
            self.measuring = True
            self._cuda = _cuda_ready()
            if self._cuda:
                torch.cuda.reset_peak_memory_stats()
        if _compiled(module):
            self._off = self._off or ("a compiled model: saved activations not recorded (the "
                                      "saved-tensor hooks would break its graph)")
        elif torch.compiler.is_compiling() or not self.saved.start():
            self._off = self._off or "torch refused the saved-tensor hooks (a torch.func transform)"

    def root_end(self) -> None:
        self.saved.stop()

    def module_in(self, layer: str) -> None:
        if self._cuda:
            self.cuda_in.setdefault(layer, torch.cuda.memory_allocated())

    def module_out(self, layer: str) -> None:
        if self._cuda:
            self.cuda_out.setdefault(layer, torch.cuda.memory_allocated())

    def finish(self) -> None:
        """The measured step is over (or the run): write its ``saved`` facts."""
        if self.done or not self.measuring:
            return
        self.done, self.measuring = True, False
        self.saved.stop()
        layers = list(dict.fromkeys([*self.saved.bytes.by_layer, *self.cuda_in]))
        for layer in layers[:MAX_LAYERS]:
            fact: dict[str, Any] = {"layer": layer,
                                    "saved_bytes": self.saved.bytes.by_layer.get(layer, 0)}
            if self._cuda:
                fact["cuda_in"] = self.cuda_in.get(layer)
                fact["cuda_out"] = self.cuda_out.get(layer)
            self._mark("saved", fact)
        step: dict[str, Any] = {"off": self._off, "layers": len(layers)}
        if self._cuda:
            step["cuda_peak"] = int(torch.cuda.max_memory_allocated())
        self._mark("saved_step", step)


def _compiled(module: torch.nn.Module) -> bool:
    """Whether ``module`` or a module inside it runs compiled (``torch.compile``'s wrapper,
    ``model.compile()``): hooks on saved tensors would break its graph. Looked at once, at
    the measured step's root forwards."""
    for inner in module.modules():
        call = inner.__dict__.get("_compiled_call_impl")
        if (call is not None and not getattr(call, "folded", False)) or hasattr(inner, "_orig_mod"):
            return True  # a fold's shortcut (.folding) sets that attribute too: no compile
    return False


def _cuda_ready() -> bool:
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())  # type: ignore[no-untyped-call]
    except RuntimeError:
        return False
