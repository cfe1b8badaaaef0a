"""Model wrappers: which classes wrap a user's model, under which attribute, and their names.

Read by annotate (layer names without the wrapper's attribute, :mod:`dlprof_lite.annotate.wrappers`)
and compare (runs named before wrappers were removed, :func:`without_wrappers`). A class is
recognised by its defining module and qualified name, anywhere in its MRO (so subclasses
count), never by the name of the attribute a user's code binds it to (user models often have
an attribute called ``module``), and never by importing the framework.

A rule is one of three kinds:

- ``wraps``: the class holds the user's module under ``attrs`` (the first one set wins); the
  wrapper and the module it wraps are one layer, named without the attribute;
- ``drives``: a framework's base class of the user's own model (``LightningModule``): nothing
  to remove, its names only say which framework ran it;
- ``swaps``: the framework replaced the module's class by a subclass of its own
  (``fully_shard`` makes ``FSDP<Name>`` from ``(FSDPModule, <Name>)``): the layer keeps its
  plain name and its own class name.

Sources (the attribute each class stores its module in, read in the named file):

- ``torch.nn.parallel.distributed.DistributedDataParallel``: ``self.module = module``
  (torch ``torch/nn/parallel/distributed.py``); ``DataParallel`` likewise
  (``torch/nn/parallel/data_parallel.py``);
- ``torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel`` (FSDP1):
  ``self._fsdp_wrapped_module = module`` (``FSDP_WRAPPED_MODULE`` in
  ``torch/distributed/fsdp/_common_utils.py``);
- ``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.ActivationWrapper`` (base of
  ``CheckpointWrapper`` and ``OffloadWrapper``, which FSDP1 recipes apply per block):
  ``_checkpoint_wrapped_module`` (``_CHECKPOINT_WRAPPED_MODULE`` in that file);
- ``torch._dynamo.eval_frame.OptimizedModule`` (``torch.compile(model)``): ``_orig_mod``;
- ``FSDPModule`` (FSDP2 ``fully_shard``), defined in
  ``torch.distributed.fsdp._fully_shard._fully_shard`` (torch 2.6 on; torch 2.4-2.5:
  ``torch.distributed._composable.fsdp.fully_shard``) and shown as ``torch.distributed.fsdp``
  (its ``__module__`` is set to the public package): swaps the class (``_fsdp_init.py``:
  ``type(f"FSDP{cls.__name__}", (FSDPModule, cls), ...)``);
- Lightning 2.0 ``lightning.pytorch.overrides.base._LightningModuleWrapperBase``:
  ``self._forward_module`` (a LightningModule or a precision wrapper), and
  ``_LightningPrecisionModuleWrapperBase``: ``self.module``; the same classes in the
  ``pytorch_lightning`` package (1.x stored the module as ``self.module``); Lightning 2.1
  removed both (CHANGELOG: "removing the ``_LightningModuleWrapperBase`` wrapper module",
  PR #17531) and wraps the LightningModule directly in DDP/FSDP;
- ``lightning.pytorch.core.module.LightningModule`` (and ``pytorch_lightning.core.module``,
  ``pytorch_lightning.core.lightning`` before 1.7): the user's model itself;
- Lightning Fabric ``lightning.fabric.wrappers._FabricModule`` (also ``lightning_fabric``):
  ``self._forward_module`` (the strategy's wrapper, e.g. DDP, or the module itself);
- DeepSpeed ``deepspeed.runtime.engine.DeepSpeedEngine`` (``deepspeed.initialize``'s engine,
  ``PipelineEngine`` a subclass): ``self.module`` (``deepspeed/runtime/engine.py``).

``FRAMEWORK_PACKAGES``: packages whose own code calls the model; the local and attribute
names in their frames (Lightning's strategy holds the model as ``_lightning_module``) are
theirs, not the user's, so a root is never named after one (:mod:`dlprof_lite.annotate.roots`).

``LEGACY_SEGMENTS``: what layer names carried before wrappers were removed (dlprof-lite
before issue 24): each wrapper's attribute, and ``_lightning_module`` (the root name a
Lightning run got from its strategy's attribute). Compare matches names that differ only by
them (:func:`without_wrappers`, :func:`adds_wrappers`).

Tested on the real classes where the packages are installed (tests/test_annotate_wrappers.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from dlprof_lite.rules.names import ROOT_MODULE

WRAPS, DRIVES, SWAPS = "wraps", "drives", "swaps"


class Wrapper(NamedTuple):
    """One class: ``module`` and ``qualname`` define it; ``kind`` as in the module docstring;
    ``attrs``: where a ``wraps`` class holds the wrapped module; ``name``: the ``wrapper``
    column's word for it."""

    module: str
    qualname: str
    kind: str
    attrs: tuple[str, ...]
    name: str


_DDP = "DistributedDataParallel"
_LIGHTNING = "Lightning"
_LIGHTNING_WRAPPER = "_LightningModuleWrapperBase"
_LIGHTNING_PRECISION = "_LightningPrecisionModuleWrapperBase"

# fmt: off
WRAPPERS = (
    Wrapper("torch.nn.parallel.distributed", _DDP, WRAPS, ("module",), _DDP),
    Wrapper("torch.nn.parallel.data_parallel", "DataParallel", WRAPS, ("module",), "DataParallel"),
    Wrapper("torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel",
            WRAPS, ("_fsdp_wrapped_module",), "FullyShardedDataParallel"),
    Wrapper("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "ActivationWrapper",
            WRAPS, ("_checkpoint_wrapped_module",), "checkpoint_wrapper"),
    Wrapper("torch._dynamo.eval_frame", "OptimizedModule", WRAPS, ("_orig_mod",), "torch.compile"),
    Wrapper("torch.distributed.fsdp", "FSDPModule", SWAPS, (), "fully_shard"),
    Wrapper("torch.distributed.fsdp._fully_shard._fully_shard", "FSDPModule", SWAPS, (),
            "fully_shard"),
    Wrapper("torch.distributed._composable.fsdp.fully_shard", "FSDPModule", SWAPS, (),
            "fully_shard"),
    Wrapper("lightning.pytorch.overrides.base", _LIGHTNING_WRAPPER, WRAPS,
            ("_forward_module", "module"), _LIGHTNING),
    Wrapper("pytorch_lightning.overrides.base", _LIGHTNING_WRAPPER, WRAPS,
            ("_forward_module", "module"), _LIGHTNING),
    Wrapper("lightning.pytorch.overrides.base", _LIGHTNING_PRECISION, WRAPS, ("module",),
            _LIGHTNING),
    Wrapper("pytorch_lightning.overrides.base", _LIGHTNING_PRECISION, WRAPS, ("module",),
            _LIGHTNING),
    Wrapper("lightning.pytorch.core.module", "LightningModule", DRIVES, (), _LIGHTNING),
    Wrapper("pytorch_lightning.core.module", "LightningModule", DRIVES, (), _LIGHTNING),
    Wrapper("pytorch_lightning.core.lightning", "LightningModule", DRIVES, (), _LIGHTNING),
    Wrapper("lightning.fabric.wrappers", "_FabricModule", WRAPS, ("_forward_module",), "Fabric"),
    Wrapper("lightning_fabric.wrappers", "_FabricModule", WRAPS, ("_forward_module",), "Fabric"),
    Wrapper("deepspeed.runtime.engine", "DeepSpeedEngine", WRAPS, ("module",), "DeepSpeed"),
)
# fmt: on
_BY_CLASS = {(w.module, w.qualname): w for w in WRAPPERS}

FRAMEWORK_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric", "deepspeed")

LEGACY_SEGMENTS = frozenset({attr for w in WRAPPERS for attr in w.attrs} | {"_lightning_module"})


def wrapper_rules(classes: Iterable[tuple[str, str]]) -> tuple[Wrapper, ...]:
    """The rules that ``(module, qualname)`` pairs (a class's MRO, in order) match."""
    return tuple(w for w in map(_BY_CLASS.get, classes) if w is not None)


def without_wrappers(layer: str) -> str:
    """``layer`` without the segments wrappers used to add (``module.layer1.0`` ->
    ``layer1.0``; ``_lightning_module`` alone -> ``model``)."""
    kept = [part for part in layer.split(".") if part not in LEGACY_SEGMENTS]
    return ".".join(kept) or ROOT_MODULE


def adds_wrappers(longer: str, shorter: str) -> bool:
    """Whether ``longer`` is ``shorter`` with wrapper segments added (``module.module`` and
    ``module``: a user's attribute ``module`` under DDP); ``model``, a root, has none."""
    short = [] if shorter == ROOT_MODULE else shorter.split(".")
    matched = 0
    for part in longer.split("."):
        if matched < len(short) and part == short[matched]:
            matched += 1
        elif part not in LEGACY_SEGMENTS:
            return False
    return matched == len(short) and longer != shorter
