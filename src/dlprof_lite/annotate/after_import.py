"""Run a callback right after a module is first imported, without importing it ourselves.

The bootstrap installs the hooks right after the program's own ``import torch`` (a script may
set environment variables first), and the compile watch registers Dynamo's callbacks right
after ``torch._dynamo.callback`` is imported (importing Dynamo ourselves costs seconds). Both
put an :class:`AfterImport` first on ``sys.meta_path``; it removes itself on first use.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Calls ``callback`` once, right after the module ``name`` has been executed."""

    def __init__(self, name: str, callback: Callable[[], Any]) -> None:
        self.name = name
        self.callback = callback
        self.loader: Any = None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self.loader is not None:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.callback()

    def __getattr__(self, attr: str) -> Any:  # resource readers and the like
        return getattr(self.loader, attr)
