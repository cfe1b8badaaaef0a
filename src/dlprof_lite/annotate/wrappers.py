"""Model wrappers (DDP, FSDP, ``torch.compile``, Lightning, DeepSpeed) seen through, by type.

Place in the pipeline: annotate. The rule table is :mod:`dlprof_lite.rules.wrappers`: a class
is matched by the defining module and qualified name of each class in its MRO, so nothing
is imported and a user's attribute called ``module`` is never taken for a wrapper. A wrapper
and the module it wraps are one layer: the wrapper's range carries the name and the wrapped
module's class (``fwd:model:ResNet`` for ``DistributedDataParallel(resnet)``), the wrapped
module's own call inside it pushes no second range (:class:`Named` ``alias``), and its
children are named without the wrapper's attribute (``layer1.0.conv1``, not
``module.layer1.0.conv1``). Which wrappers a layer had is kept as words (``names``) for the
``module`` fact's ``wrapper`` field. Classes are classified once each (a dict per class).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import torch

from dlprof_lite.rules.wrappers import SWAPS, WRAPS, wrapper_rules

_MAX_CHAIN = 16  # wrappers around wrappers (a cycle would be a bug in the framework)


class Wrapping(NamedTuple):
    """What a class is: ``attrs`` where it holds the module it wraps (empty: none); ``names``
    its words for the ``wrapper`` column; ``type_name`` the class name its ranges show."""

    attrs: tuple[str, ...]
    names: tuple[str, ...]
    type_name: str


class Named(NamedTuple):
    """One module of a model, as :func:`walk` finds it: ``qual`` its qualified name below the
    model without wrappers' attributes; ``alias``: a wrapper's wrapped module (one layer with
    it); ``names``: the wrappers around it and its ancestors, outermost first."""

    qual: str
    module: torch.nn.Module
    alias: bool
    names: tuple[str, ...]
    type_name: str


_classes: dict[type, Wrapping] = {}


def wrapping(module: torch.nn.Module) -> Wrapping:
    """The rules ``module``'s class matches (cached per class)."""
    cls = type(module)
    found = _classes.get(cls)
    if found is None:
        found = _classes[cls] = _classify(cls)
    return found


def _classify(cls: type) -> Wrapping:
    rules = wrapper_rules((c.__module__, c.__qualname__) for c in cls.__mro__)
    attrs = next((rule.attrs for rule in rules if rule.kind == WRAPS), ())
    type_name = cls.__name__
    if any(rule.kind == SWAPS for rule in rules):
        # fully_shard's FSDP<Name>(FSDPModule, <Name>): the class it had before
        plain = [b for b in cls.__bases__ if not wrapper_rules([(b.__module__, b.__qualname__)])]
        type_name = plain[0].__name__ if plain else type_name
    return Wrapping(attrs, tuple(dict.fromkeys(rule.name for rule in rules)), type_name)


def inner_of(module: torch.nn.Module) -> torch.nn.Module | None:
    """The module ``module`` wraps, or None when it is no wrapper (or wraps nothing yet)."""
    for attr in wrapping(module).attrs:
        inner = module._modules.get(attr)
        if inner is not None:
            return inner
    return None


def chain(module: torch.nn.Module) -> list[torch.nn.Module]:
    """``module``, the module it wraps, the one that wraps, ... down to the user's model."""
    found = [module]
    inner = inner_of(module)
    while inner is not None and len(found) < _MAX_CHAIN and inner not in found:
        found.append(inner)
        inner = inner_of(inner)
    return found


def unwrapped(module: torch.nn.Module) -> torch.nn.Module:
    """The user's model inside ``module``'s wrappers (``module`` itself when none)."""
    return chain(module)[-1]


def type_name(module: torch.nn.Module) -> str:
    """The class name ``module``'s ranges show: a wrapper shows the wrapped model's."""
    return wrapping(unwrapped(module)).type_name


def words(names: tuple[str, ...]) -> str | None:
    """The ``wrapper`` field: ``DistributedDataParallel, Lightning``; None without any."""
    return ", ".join(names) or None


def walk(model: torch.nn.Module, names: tuple[str, ...] = ()) -> Iterator[Named]:
    """Every module of ``model`` once, in ``named_modules`` order, named without wrappers'
    attributes; ``names``: the wrappers known around ``model`` already."""
    seen: set[int] = set()
    stack: list[tuple[str, torch.nn.Module, bool, tuple[str, ...]]] = [("", model, False, names)]
    while stack:
        qual, module, alias, above = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        # A wrapper is one layer with what it wraps: it carries the whole chain's names.
        own = tuple(dict.fromkeys((*above, *(n for m in chain(module) for n in wrapping(m).names))))
        yield Named(qual, module, alias, own, type_name(module))
        inner = inner_of(module)
        children = [
            (qual, child, True, own)
            if child is inner
            else (f"{qual}.{key}" if qual else key, child, False, own)
            for key, child in module._modules.items()
            if child is not None
        ]
        stack.extend(reversed(children))
