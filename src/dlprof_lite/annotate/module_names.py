"""Module names for ranges: qualified names learnt from the models, cached per module id.

Rules in :mod:`.modules` (Names), :mod:`.roots` (a root's own name) and :mod:`.wrappers`
(wrappers seen through).
"""

from __future__ import annotations

import sys
import weakref

import torch

from dlprof_lite.annotate.roots import RootNames, is_model
from dlprof_lite.annotate.wrappers import chain, inner_of, type_name, unwrapped, walk, words
from dlprof_lite.rules.names import BACKWARD, FORWARD, RECOMPUTE, ROOT_MODULE, module_range


class ModuleName:
    """A module's range names and depth (``ref`` tells a reused id apart). ``alias``: the
    module a wrapper wraps, one layer with it (its call inside the wrapper's pushes nothing);
    ``wrapper``: the ``module`` fact's words for the wrappers around it, None without;
    ``folded``: too short to time, its hooks do nothing (:mod:`.folding`)."""

    __slots__ = ("alias", "bwd", "depth", "described", "folded", "fwd", "model", "qualname",
                 "rec", "ref", "type", "wrapper")  # fmt: skip

    def __init__(
        self,
        module: torch.nn.Module,
        qualname: str,
        type_name: str,
        depth: int,
        alias: bool = False,
        wrapper: str | None = None,
    ) -> None:
        self.ref = weakref.ref(module)  # names are keyed by id: this tells a reused id apart
        self.qualname = qualname
        self.depth = depth
        self.type = type_name
        self.alias = alias
        self.wrapper = wrapper
        # The ``module`` fact of its first call is written (a wrapped module's is its wrapper's).
        self.described = alias
        self.folded = False
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

    def name_model(self, model: torch.nn.Module, prefix: str = "", root: str | None = None) -> None:
        """Learn the qualified names of ``model`` and its submodules (known names are kept);
        ``root``: ``model``'s own name when it is not ``prefix``."""
        for found in walk(model):
            module = found.module
            if self.known(module) is not None:
                continue
            qual = found.qual
            if qual:
                full = (f"{prefix}.{qual}" if prefix else qual).replace(":", "_")
            else:
                full = prefix if root is None else root
            depth = qual.count(".") + 1 if qual else 0
            self.table[id(module)] = ModuleName(module, full, found.type_name, depth, found.alias,
                                                words(found.names))  # fmt: skip
        if not prefix:
            self._model_named = True

    def known(self, module: torch.nn.Module) -> ModuleName | None:
        name = self.table.get(id(module))
        return name if name is not None and name.ref() is module else None

    def learn(self, module: torch.nn.Module, parent: torch.nn.Module | None) -> ModuleName:
        if parent is None:
            return self._learn_root(module)
        own_type = type_name(module)
        outer = self.known(parent)
        if outer is not None and inner_of(parent) is module:  # a wrapper's module, seen late
            name = ModuleName(module, outer.qualname, own_type, outer.depth, True, outer.wrapper)
        else:
            qual = f"{outer.qualname}.{own_type}" if outer and outer.qualname else own_type
            depth = outer.depth + 1 if outer else 1
            wrapper = outer.wrapper if outer else None
            name = ModuleName(module, qual, own_type, depth, False, wrapper)
        self.table[id(module)] = name
        return name

    def _learn_root(self, module: torch.nn.Module) -> ModuleName:
        """A root's names (rule in :mod:`.roots`); only ``model``'s children get no prefix."""
        modules = chain(module)
        inner = modules[-1]
        if not is_model(inner):
            own_type = type_name(module)
            root = ModuleName(module, own_type, own_type, 0)  # a loss module: its class
            self.table[id(module)] = root
            return root
        own = self._roots.name(tuple(modules), sys._getframe(2))
        # Plain submodule names (``layer1.0.conv1``) for the one model named ``model``; every
        # other model's carry its name, so two models never share a layer name.
        prefix = "" if own == ROOT_MODULE and not self._model_named else own
        self.name_model(module, prefix, own)
        return self.table[id(module)]
