"""Root modules: the name each one gets, and the start of the backward pass that follows it.

Names. A root is a module called with no annotated forward open on its thread. A root with
neither submodules nor parameters of its own (a loss module) is named by its class. A model
root is named, once, at its first forward, by the variable or attribute it is bound to: the
caller frames outside torch, dlprof-lite and the frameworks that call models themselves
(:data:`~dlprof_lite.rules.wrappers.FRAMEWORK_PACKAGES`: Lightning's strategy holds the
model as ``_lightning_module``, a name of its own) are scanned (innermost first, at most
:data:`MAX_FRAMES`) for a local bound to the module object or to the model inside its
wrappers (``student``, ``ema_model``), an attribute of a ``self`` that is not itself a module
(``self.teacher`` → ``teacher``), or a string-keyed dict entry (``models["gen"]`` → ``gen``);
then the same frames' globals. The first candidate no other root has taken wins; with none,
the first candidate (else ``model``) gets the next free number: ``model#2``, ``model#3``, ...
A name is never given twice in a run: each model object is its own root, so a model reloaded
into the same variable (``model = torch.load(...)``) is ``model#2``, its layers
``model#2.layer1...``. Characters other than letters, digits, ``_`` and ``-`` become ``_``
(no ``:``, ``.`` or ``#`` in a bound name). The scan reads dicts in insertion order, so the
same script gets the same names on every run. A wrapper (DDP, FSDP, ``torch.compile``, ...,
see :mod:`.wrappers`) is named as the model it wraps (its binding, its class).

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

import os
import re
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from dlprof_lite.rules.names import ROOT_MODULE
from dlprof_lite.rules.wrappers import FRAMEWORK_PACKAGES

MAX_FRAMES = 8
MAX_EVENTS = 2000
MAX_MISSES = 8
_OWN_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")
NUMBER = "#"  # model#2: a second model object under a name another root holds


def is_model(module: torch.nn.Module) -> bool:
    """A model, not a loss module: it has submodules or parameters of its own."""
    return next(module.children(), None) is not None or any(
        True for _ in module.parameters(recurse=False)
    )


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
        self._taken: set[str] = set()

    def name(self, targets: tuple[torch.nn.Module, ...], frame: FrameType | None) -> str:
        """The name of the root ``targets[0]`` (``targets``: it and the modules it wraps)."""
        found = binding_names(targets, frame)
        for candidate in found:
            if candidate not in self._taken:
                return self._take(candidate)
        base = found[0] if found else ROOT_MODULE
        if base not in self._taken:
            return self._take(base)
        number = 2
        while f"{base}{NUMBER}{number}" in self._taken:
            number += 1
        return self._take(f"{base}{NUMBER}{number}")

    def _take(self, name: str) -> str:
        self._taken.add(name)
        return name


def binding_names(targets: tuple[object, ...], frame: FrameType | None) -> list[str]:
    """Names bound to one of ``targets`` in the user frames from ``frame`` outwards."""
    skipped = _skipped_dirs()
    frames: list[FrameType] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        if not frame.f_code.co_filename.startswith(skipped):
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


def _skipped_dirs() -> tuple[str, ...]:
    """Our own and torch's directories, and those of the frameworks already imported."""
    dirs = list(_OWN_DIRS)
    for package in FRAMEWORK_PACKAGES:
        path = getattr(sys.modules.get(package), "__file__", None)
        if isinstance(path, str):
            dirs.append(os.path.dirname(path) + os.sep)
    return tuple(dirs)


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
