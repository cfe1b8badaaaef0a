"""Root modules: the name each one gets, and the start of the backward pass that follows it.

Names. A root is a module called with no annotated forward open on its thread. A root with
neither submodules nor parameters of its own (a loss module) is named by its class. A model
root is named, once, at its first forward, by the variable or attribute it is bound to: the
caller frames outside torch and dlprof-lite are scanned (innermost first, at most
:data:`MAX_FRAMES`) for a local bound to the module object (``student``, ``ema_model``), an
attribute of a ``self`` that is not itself a module (``self.teacher`` → ``teacher``), or a
string-keyed dict entry (``models["gen"]`` → ``gen``); then the same frames' globals. The
first candidate no other live root has taken wins; with none, roots are ``model``,
``model_2``, … in first-call order. Characters other than letters, digits, ``_`` and ``-``
become ``_`` (no ``:`` or ``.`` in a root name). The scan reads dicts in insertion order, so
the same script gets the same names on every run. A ``torch.compile`` wrapper is named as the
module it wraps (its binding, its class).

Backward start. The backward phase must start when autograd starts, before the loss's own
backward nodes run (a functional loss, ``GradScaler.scale(loss)``, two losses summed): torch
has no hook on ``Tensor.backward``, and the loss's nodes do not exist when the root's forward
returns, so no graph hook can be put on them. :class:`BackwardWatch` uses CPython's profile
hook instead (``sys.setprofile``, this thread only), armed from the end of a root forward
with grad on until the next root forward starts: the first call of
``torch.autograd.backward`` (every ``backward()`` goes through it) starts the phase and
disarms it. It is never armed over another profiler's hook, and it disarms itself after
:data:`MAX_EVENTS` events (an evaluation loop with grad on); after :data:`MAX_MISSES` such
windows in a row it stays off. Either way the pre-hook on the root's output nodes still
starts the phase (then later: after the loss's own backward).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

MAX_FRAMES = 8
MAX_EVENTS = 2000
MAX_MISSES = 8
_OWN_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def is_model(module: torch.nn.Module) -> bool:
    """A model, not a loss module: it has submodules or parameters of its own."""
    return next(module.children(), None) is not None or any(
        True for _ in module.parameters(recurse=False)
    )


def unwrapped(module: torch.nn.Module) -> torch.nn.Module:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) wraps, else itself."""
    if type(module).__name__ != "OptimizedModule":
        return module
    inner = module._modules.get("_orig_mod")
    return inner if isinstance(inner, torch.nn.Module) else module


_generated: dict[type, bool] = {}


def generated(module: torch.nn.Module) -> bool:
    """An ``fx`` graph module a compiler made (``aot_eager`` runs one per compiled graph)."""
    cls = type(module)
    found = _generated.get(cls)
    if found is None:
        found = _generated[cls] = cls.__module__.startswith("torch.fx")
    return found


class RootNames:
    """Distinct, stable names for model roots (see the module docstring)."""

    def __init__(self) -> None:
        self._taken: dict[str, weakref.ref[torch.nn.Module]] = {}
        self._counter = itertools.count(1)

    def name(self, module: torch.nn.Module, frame: FrameType | None) -> str:
        targets = (module, unwrapped(module))
        for candidate in binding_names(targets, frame):
            if self._free(candidate):
                return self._take(candidate, module)
        while True:
            number = next(self._counter)
            candidate = "model" if number == 1 else f"model_{number}"
            if self._free(candidate):
                return self._take(candidate, module)

    def _free(self, name: str) -> bool:
        ref = self._taken.get(name)
        return ref is None or ref() is None

    def _take(self, name: str, module: torch.nn.Module) -> str:
        self._taken[name] = weakref.ref(module)
        return name


def binding_names(targets: tuple[object, ...], frame: FrameType | None) -> list[str]:
    """Names bound to one of ``targets`` in the user frames from ``frame`` outwards."""
    frames: list[FrameType] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        if not frame.f_code.co_filename.startswith(_OWN_DIRS):
            frames.append(frame)
        frame = frame.f_back
    found: list[str] = []
    for user in frames:
        space = user.f_locals
        _scan(space, targets, found)
        owner = space.get("self")
        attrs = getattr(owner, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(owner, torch.nn.Module):
            _scan(attrs, targets, found)
    for user in frames:
        if user.f_globals is not user.f_locals:
            _scan(user.f_globals, targets, found)
    return [clean for clean in (_BAD_CHARS.sub("_", name) for name in found) if clean]


def _scan(space: dict[str, Any], targets: tuple[object, ...], found: list[str]) -> None:
    for key, value in list(space.items()):
        if key == "self" or not isinstance(key, str):
            continue
        if any(value is target for target in targets):
            found.append(key)
        elif type(value) is dict and len(value) <= 64:
            found.extend(str(inner) for inner, item in value.items()
                         if isinstance(inner, str) and any(item is t for t in targets))  # fmt: skip


class BackwardWatch:
    """Calls ``on_backward`` when this thread enters ``torch.autograd.backward``, once armed."""

    def __init__(self, on_backward: Callable[[], None]) -> None:
        self._on_backward = on_backward
        self._code = getattr(torch.autograd.backward, "__code__", None)
        self._local = threading.local()
        self._hook = self._profile  # one bound method, so that "is it ours" is an identity test
        self._misses = 0

    def arm(self) -> None:
        if self._code is None or self._misses >= MAX_MISSES or sys.getprofile() is not None:
            return
        self._local.left = MAX_EVENTS
        sys.setprofile(self._hook)

    def disarm(self) -> None:
        if sys.getprofile() is self._hook:
            sys.setprofile(None)

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is self._code:
            sys.setprofile(None)
            self._misses = 0
            self._on_backward()
            return
        local = self._local
        local.left -= 1
        if local.left <= 0:
            sys.setprofile(None)
            self._misses += 1
