"""DDP gradient buckets: which layers' gradients each all-reduce carries.

Place in the pipeline: annotate. ``DistributedDataParallel`` all-reduces gradients in
buckets, each launched during the backward pass as soon as every gradient in it is ready.
The trace shows the collective's kernels but not whose gradients they carry. DDP's public
communication-hook API (``register_comm_hook``) is the one place a bucket is handed to user
code with its parameters, so for each DDP model that has no hook of its own the annotation
registers one, at the model's first backward pass, that does what DDP does without a hook
(torch's reference ``allreduce_hook``: divide by the group size, all-reduce the sum) inside a
push/pop range ``ddp:bucket:<id>`` on the thread that launches it: the collective's kernels
nest in it. At the end of a step whose buckets differ from the step before (the first; the
one after DDP rebuilds its buckets in gradient-ready order), one ``ddp_bucket`` fact per
bucket records its id, model, index, generation (one more per new composition) and the
gradient bytes of each layer in it (a parameter's layer: the module that owns it,
by the names of :mod:`.module_names`; the nearest annotated ancestor under ``--depth``).

Left alone, so that the script runs exactly as written: a DDP model with a hook of its own
(Python or built-in, e.g. ``fp16_compress_hook``, PowerSGD, DDP's mixed precision), one on
DDP's Python reducer, and every DDP model when torch has no ``GradBucket``. Their
collectives count in the backward phase. DDP accepts one hook per model: a script that
registers its own after its first backward pass must be run with ``--annotate phases``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from dlprof_lite.annotate.backend import Backend
from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import DDP_BUCKET, ddp_bucket_range

_DDP_MODULE = "torch.nn.parallel.distributed"
_DDP_CLASS = "DistributedDataParallel"

LayerOf = Callable[[torch.nn.Module], "str | None"]


def is_ddp(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``DistributedDataParallel`` (or a subclass), without
    importing ``torch.distributed`` in a script that never uses it."""
    return any(
        cls.__name__ == _DDP_CLASS and cls.__module__ == _DDP_MODULE for cls in type(module).__mro__
    )


class DdpBuckets:
    """The DDP models seen in root forwards, and the hook that tags their buckets."""

    def __init__(self, backend: Backend, layer_of: LayerOf) -> None:
        self._backend = backend
        self._layer_of = layer_of
        self._seen: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self.pending: list[weakref.ref[torch.nn.Module]] = []
        self._ids: dict[tuple[int, ...], int] = {}  # (model, index, parameter ids) -> id
        self._generation = 0

    def seen(self, module: torch.nn.Module) -> None:
        """A root forward of ``module``: remember a DDP model until its first backward."""
        if module in self._seen or not is_ddp(module):
            return
        self._seen.add(module)
        self.pending.append(weakref.ref(module))

    def arm(self) -> None:
        """A backward pass starts: hook the buckets of the DDP models seen before it."""
        pending, self.pending = self.pending, []
        for ref in pending:
            model = ref()
            if model is not None and _hookable(model):
                self._register(model)

    def _register(self, model: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        state = _ModelBuckets(
            self._layer_of(model) or "", _parameter_layers(model.module, self._layer_of)
        )
        backend = self._backend

        def dlprof_lite_bucket_hook(process_group: Any, bucket: Any) -> Any:
            backend.push(self.range_of(state, bucket))
            try:
                return allreduce_hook(process_group, bucket)
            finally:
                backend.pop()

        # DDP checks a hook's annotations against its own types; these are strings here.
        dlprof_lite_bucket_hook.__annotations__ = {}
        model.register_comm_hook(None, dlprof_lite_bucket_hook)

    def range_of(self, model: _ModelBuckets, bucket: Any) -> str:
        """The range name of ``bucket``. DDP hands a step's buckets over in index order; at
        the last one, a composition not seen in the step before is written as facts."""
        params = bucket.parameters()
        index = int(bucket.index())
        key = (id(model), index, *sorted(id(p) for p in params))
        bucket_id = self._ids.get(key)
        if bucket_id is None:
            bucket_id = self._ids[key] = len(self._ids)
        if bucket_id not in model.layers:
            layers: dict[str, int] = {}
            for p in params:
                layer = model.owners.get(id(p)) or model.name
                layers[layer] = layers.get(layer, 0) + p.numel() * p.element_size()
            model.layers[bucket_id] = layers
        model.step.append((bucket_id, index))
        if bucket.is_last():
            self._step_done(model)
        return ddp_bucket_range(bucket_id)

    def _step_done(self, model: _ModelBuckets) -> None:
        step, model.step = tuple(model.step), []
        if step == model.written:
            return
        model.written = step
        self._generation += 1
        for bucket_id, index in step:
            layers = model.layers[bucket_id]
            fact = {"id": bucket_id, "model": model.name, "index": index,
                    "generation": self._generation, "bytes": sum(layers.values()),
                    "layers": layers}  # fmt: skip
            self._backend.mark(fact_text(DDP_BUCKET, fact))


class _ModelBuckets:
    """One hooked DDP model: its name, parameter owners, and the buckets of this step."""

    __slots__ = ("layers", "name", "owners", "step", "written")

    def __init__(self, name: str, owners: dict[int, str | None]) -> None:
        self.name = name
        self.owners = owners
        self.layers: dict[int, dict[str, int]] = {}  # bucket id -> layer -> gradient bytes
        self.step: list[tuple[int, int]] = []  # (bucket id, index) handed over this step
        self.written: tuple[tuple[int, int], ...] = ()  # the composition last written


def _hookable(model: Any) -> bool:
    """A DDP model whose gradients DDP's own all-reduce would carry: no hook of its own."""
    import torch.distributed as dist

    if not hasattr(dist, "GradBucket") or getattr(model, "_use_python_reducer", False):
        return False
    if getattr(model, "_comm_hooks", None) or getattr(model, "mixed_precision", None):
        return False
    try:
        logged = model._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return False
    return not logged.get("comm_hook")  # a built-in hook is only seen here


def _parameter_layers(root: torch.nn.Module, layer_of: LayerOf) -> dict[int, str | None]:
    """Each parameter's layer (by ``id``): the annotated module that owns it."""
    owners: dict[int, str | None] = {}
    for module in root.modules():
        layer = layer_of(module)
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), layer)
    return owners
