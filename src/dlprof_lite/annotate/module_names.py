"""Module names for ranges: qualified names learnt from the models, cached per module id.

Rules in :mod:`.modules` (Names) and :mod:`.roots` (a root's own name).
"""

from __future__ import annotations

import sys
import weakref

import torch

from dlprof_lite.annotate.names import BACKWARD, FORWARD, RECOMPUTE, ROOT_MODULE, module_range
from dlprof_lite.annotate.roots import RootNames, is_model, unwrapped


class ModuleName:
    """A module's range names and depth (``ref`` tells a reused id apart)."""

    __slots__ = ("bwd", "depth", "described", "fwd", "model", "qualname", "rec", "ref", "type")

    def __init__(self, module: torch.nn.Module, qualname: str, type_name: str, depth: int) -> None:
        self.ref = weakref.ref(module)  # names are keyed by id: this tells a reused id apart
        self.qualname = qualname
        self.depth = depth
        self.type = type_name
        self.described = False  # the ``module`` fact of its first call is written
        self.model = is_model(unwrapped(module))  # not a loss module
        self.fwd = module_range(FORWARD, qualname, type_name)
        self.bwd = module_range(BACKWARD, qualname, type_name)
        self.rec = module_range(RECOMPUTE, qualname, type_name)


class ModuleNames:
    """The names of every module seen, keyed by ``id`` (a weak reference checks the id)."""

    def __init__(self) -> None:
        self.table: dict[int, ModuleName] = {}
        self._roots = RootNames()
        self._model_named = False

    def name_model(self, model: torch.nn.Module, prefix: str = "") -> None:
        """Learn the qualified names of ``model`` and its submodules (known names are kept)."""
        for qual, module in model.named_modules():
            if self.known(module) is not None:
                continue
            full = ".".join(part for part in (prefix, qual) if part).replace(":", "_")
            depth = qual.count(".") + 1 if qual else 0
            self.table[id(module)] = ModuleName(module, full, type(module).__name__, depth)
        if not prefix:
            self._model_named = True

    def known(self, module: torch.nn.Module) -> ModuleName | None:
        name = self.table.get(id(module))
        return name if name is not None and name.ref() is module else None

    def learn(self, module: torch.nn.Module, parent: torch.nn.Module | None) -> ModuleName:
        if parent is None:
            return self._learn_root(module)
        type_name = type(module).__name__
        outer = self.known(parent)
        qual = f"{outer.qualname}.{type_name}" if outer and outer.qualname else type_name
        name = ModuleName(module, qual, type_name, outer.depth + 1 if outer else 1)
        self.table[id(module)] = name
        return name

    def _learn_root(self, module: torch.nn.Module) -> ModuleName:
        """A root's names (rule in :mod:`.roots`); only ``model``'s children get no prefix."""
        inner = unwrapped(module)
        type_name = type(inner).__name__
        if not is_model(inner):
            root = ModuleName(module, type_name, type_name, 0)  # a loss module: its class
            self.table[id(module)] = root
            return root
        own = self._roots.name(module, sys._getframe(2))
        # Plain submodule names (``layer1.0.conv1``) for the one model named ``model``; every
        # other model's carry its name, so two models never share a layer name.
        prefix = "" if own == ROOT_MODULE and not self._model_named else own
        self.name_model(inner, prefix)
        root = ModuleName(module, own, type_name, 0)
        self.table[id(module)] = root
        if inner is not module:
            self.table[id(inner)] = ModuleName(inner, root.qualname, type_name, 0)
        return root
