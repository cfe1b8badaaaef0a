"""Ranges a script writes by hand: :func:`range`, :func:`phase` and :func:`iteration`.

Each is a context manager and a decorator, and a no-op (one attribute check) when annotation
is off. ``range`` is a push/pop range of any name on the calling thread; ``phase`` and
``iteration`` drive the same tracker as the automatic hooks, so hand-written and automatic
phases never overlap (see :mod:`dlprof_lite.annotate.phases`).
"""

from __future__ import annotations

from contextlib import ContextDecorator
from typing import Any

from dlprof_lite.annotate.backend import get_backend
from dlprof_lite.annotate.phases import check_phase, shared_tracker


class range(ContextDecorator):  # shadows the builtin on purpose: annotate.range("step")
    """A push/pop NVTX range named ``name`` in the ``dlprof-lite`` domain."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a range needs a non-empty name, not {name!r}")
        self.name = name

    def __enter__(self) -> range:
        backend = get_backend()
        if backend is not None:
            backend.push(self.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        backend = get_backend()
        if backend is not None:
            backend.pop()


class phase(ContextDecorator):
    """Mark a phase by hand: ``data``, ``forward``, ``backward``, ``optimizer`` or ``compile``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = check_phase(name)

    def __enter__(self) -> phase:
        tracker = shared_tracker()
        if tracker is not None:
            tracker.enter(self.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        tracker = shared_tracker()
        if tracker is not None:
            tracker.leave(self.name)


class iteration(ContextDecorator):
    """Mark one training iteration by hand; ``index`` (default: a counter) is its payload.

    While it is open, optimizer steps do not close iterations: use it when the automatic
    rule (one iteration per training step, see :mod:`dlprof_lite.annotate.phases`) does not
    fit the loop, e.g. a step that never calls ``optimizer.step()``.
    """

    __slots__ = ("index",)

    def __init__(self, index: int | None = None) -> None:
        if index is not None and not isinstance(index, int):
            raise ValueError(f"an iteration index is an int, not {type(index).__name__}")
        self.index = index

    def __enter__(self) -> iteration:
        tracker = shared_tracker()
        if tracker is not None:
            tracker.begin_iteration(self.index)
        return self

    def __exit__(self, *exc: Any) -> None:
        tracker = shared_tracker()
        if tracker is not None:
            tracker.end_iteration()


__all__ = ["iteration", "phase", "range"]
