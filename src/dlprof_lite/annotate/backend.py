"""The NVTX calls of the annotation layer: one domain, cached event attributes, one switch.

Everything the annotation layer emits goes through :func:`get_backend`. When no tool is
attached to the process (nsys sets ``NVTX_INJECTION64_PATH`` in the profiled process), it
returns ``None`` and the callers install no hooks at all, so an annotated script run without
a profiler pays nothing (not even the import of ``nvtx``). ``DLPROF_LITE_NVTX`` overrides the
detection: ``on`` annotates even without a tool (benchmarks, tests), ``off`` never annotates.

Range names are registered once per name and their attributes cached, so a push is one call
into the NVTX C library. Only push/pop (per-thread stack) and start/end (process-wide) ranges
are used; the analysis reads both.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from dlprof_lite.rules.names import DOMAIN

ENV_SWITCH = "DLPROF_LITE_NVTX"
_INJECTION_VARS = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")

# Colours shown by the nsys GUI; names from nvtx's built-in table (no matplotlib needed).
_COLORS = {
    "iteration": "darkgreen",
    "data": "yellow",
    "forward": "blue",
    "backward": "orange",
    "optimizer": "purple",
    "fwd": "cyan",
    "bwd": "red",
}


def tool_attached() -> bool:
    """True when an NVTX tool (nsys, Nsight Compute) is injected into this process."""
    return any(os.environ.get(var) for var in _INJECTION_VARS)


def enabled() -> bool:
    """Whether annotation is on: ``DLPROF_LITE_NVTX`` (on/off), else whether a tool is attached."""
    switch = os.environ.get(ENV_SWITCH, "auto").strip().lower()
    if switch in ("on", "1", "true", "force"):
        return True
    if switch in ("off", "0", "false"):
        return False
    return tool_attached()


class Backend:
    """NVTX push/pop and start/end ranges in the ``dlprof-lite`` domain."""

    def __init__(self) -> None:
        import nvtx
        from nvtx import _lib

        self.nvtx_version: str = getattr(nvtx, "__version__", "") or _distribution_version()
        self._domain = nvtx.get_domain(DOMAIN)
        self._handle = self._domain.handle
        self._push = _lib.push_range
        self._pop = _lib.pop_range
        self._start = _lib.start_range
        self._end = _lib.end_range
        self._mark = _lib.mark
        self._attributes: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _attrs(self, name: str) -> Any:
        attrs = self._attributes.get(name)
        if attrs is None:
            with self._lock:
                kind = name.split(":", 1)[0]
                attrs = self._domain.get_event_attributes(name, _COLORS.get(kind, "white"))
                self._attributes[name] = attrs
        return attrs

    def prepare(self, *names: str) -> None:
        """Make the event attributes of ``names`` now (a module's first call, timed as the
        annotation's own work: see .folding), not at their first push."""
        for name in names:
            self._attrs(name)

    def push(self, name: str) -> None:
        """Open a push/pop range on the calling thread."""
        self._push(self._attrs(name), self._handle)

    def pop(self) -> None:
        """Close the innermost push/pop range of the calling thread."""
        self._pop(self._handle)

    def start(self, name: str, payload: int | None = None) -> Any:
        """Open a start/end range (any thread may end it); returns its id for :meth:`end`."""
        if payload is None:
            return self._start(self._attrs(name), self._handle)
        attrs = self._domain.get_event_attributes(name, _COLORS.get(name, "white"), None, payload)
        return self._start(attrs, self._handle)

    def end(self, range_id: Any) -> None:
        self._end(range_id)

    def mark(self, message: str) -> None:
        """An instantaneous NVTX mark (run facts, see :mod:`.facts`); not cached."""
        self._mark(self._domain.get_event_attributes(message, "white"), self._handle)


def _distribution_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvtx")
    except PackageNotFoundError:
        return ""


_backend: Backend | None = None
_decided = False
_backend_lock = threading.Lock()


def get_backend() -> Backend | None:
    """The process's backend, or ``None`` when annotation is off (decided once, on first use)."""
    global _backend, _decided
    if not _decided:
        with _backend_lock:
            if not _decided:
                _backend = Backend() if enabled() else None
                _decided = True
    return _backend
