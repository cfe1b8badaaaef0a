"""The per-user folders of dlprof-lite: its data (the run store) and its cache (plotly.js packed).

A shared leaf: any stage may import it, it imports no stage. Linux and other Unix systems
follow the XDG base directory specification (``$XDG_DATA_HOME``, ``$XDG_CACHE_HOME``; a
relative value is ignored, as the specification says), macOS its Library folders, Windows
``%LOCALAPPDATA%``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

_XDG = {"data": ("XDG_DATA_HOME", (".local", "share")), "cache": ("XDG_CACHE_HOME", (".cache",))}
_MACOS = {"data": "Application Support", "cache": "Caches"}


def user_dir(kind: Literal["data", "cache"]) -> Path:
    """The ``dlprof-lite`` folder for per-user ``kind`` files (not created here)."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / _MACOS[kind]
    else:
        variable, default = _XDG[kind]
        value = os.environ.get(variable, "")
        base = Path(value) if os.path.isabs(value) else Path.home().joinpath(*default)
    return base / "dlprof-lite"
