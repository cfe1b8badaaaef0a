"""Stage 1, annotate: a ``gc:<generation>`` range around each garbage collection.

A collection of Python's cyclic garbage collector stops the program for micro- to
milliseconds, during which the GPU may starve; a push/pop range around it lets the report
book that host time and that GPU idle time to ``gc`` (:mod:`dlprof_lite.rules.idle`). The
range is written from a ``gc.callbacks`` entry, on the thread that runs the collection (the
one that triggered it), in the annotation's domain (:mod:`dlprof_lite.rules.names`).

:func:`~dlprof_lite.annotate.hooks.install` registers it when annotation is on; the
:class:`~dlprof_lite.annotate.hooks.Annotation` it returns removes it. No torch here.

Named ``gc_ranges``, not ``gc``: a submodule ``gc`` would become the package attribute
``dlprof_lite.annotate.gc``, and a folder on ``sys.path`` holding a ``gc.py`` hides the
standard module.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from dlprof_lite.annotate.backend import Backend
from dlprof_lite.rules.names import GC_RANGE_PREFIX

# CPython's generations (0 young .. 2 full); a later interpreter's other numbers still work.
_GENERATIONS = 3


class GcRanges:
    """The ``gc.callbacks`` entry: pushes ``gc:<generation>`` at "start", pops it at "stop".

    Collections never overlap: CPython (free-threaded builds too) runs one at a time, and
    reports its start and stop from one call on one thread; so one flag says whether the
    range now open on that thread is ours. A "stop" with no "start" of ours (registered
    mid-collection, or our push failed) pops nothing: the innermost range there is someone
    else's.
    """

    __slots__ = ("_names", "_open", "_pop", "_push")

    def __init__(self, backend: Backend) -> None:
        # Names and their NVTX attributes made once, here: a collection then costs two
        # calls into the NVTX library and allocates nothing of ours.
        self._names = tuple(f"{GC_RANGE_PREFIX}{g}" for g in range(_GENERATIONS))
        backend.prepare(*self._names)
        self._push: Callable[[str], None] = backend.push
        self._pop: Callable[[], None] = backend.pop
        self._open = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # Never raise: the collector prints "Exception ignored in ..." for each exception of
        # a callback (at interpreter exit nvtx may already be torn down). Exception only: a
        # Ctrl-C landing here is then reported by the collector, not silently lost.
        try:
            if phase == "start":
                generation = info["generation"]
                names = self._names
                name = (names[generation] if 0 <= generation < len(names)
                        else f"{GC_RANGE_PREFIX}{generation}")  # fmt: skip
                self._push(name)
                self._open = True
            elif phase == "stop" and self._open:
                self._open = False  # first: a failing pop must not make the next stop pop
                self._pop()
        except Exception:
            pass

    @property
    def open(self) -> bool:
        """Whether a collection's range pushed by this entry is open now."""
        return self._open


def install(backend: Backend) -> Callable[[], None]:
    """Register a :class:`GcRanges` for ``backend``; returns the function that removes it.

    A range still open at removal (removed from a finalizer, mid-collection) stays open:
    popping it there could close the finalizer's own range instead.
    """
    entry = GcRanges(backend)
    gc.callbacks.append(entry)

    def remove() -> None:
        # By identity: ``list.remove`` compares with ==, and must not take another entry.
        for index, callback in enumerate(gc.callbacks):
            if callback is entry:
                del gc.callbacks[index]
                return

    return remove
