"""The command line's memory settings: keep freed memory for reuse during a large analysis,
hand it back between stages, and run the cyclic collector less often (:func:`tune_process`).

glibc's malloc hands out every block above its mmap threshold (at most 32 MiB) as a fresh
``mmap`` and unmaps it again on ``free``. An analysis of 5M kernels makes many temporary
columns of 40 MB and more, so each one pays its page faults anew, and time grew faster
than the input. Measured with ``/usr/bin/time`` on the benchmark's 5M-kernel export with
6.75M ranges: 39.6 s wall of which 19.1 s in the kernel, against 29.6 s and 10.5 s with
this setting alone; its cost, peak RSS 4.25 → 5.03 GB there, was more than won back by
copies removed elsewhere (the benchmark's table). Serving large blocks from the heap and
not trimming it lets a freed column's pages back the next one.

Only the command line and its own worker processes call this: a notebook that imports the
package keeps its allocator as it was. ``MALLOC_*`` variables in the environment, a user's
own tuning, win; other C libraries than glibc are left alone.

Every thread allocates from the one main arena too. glibc gives each new thread its own
arena, and the reader's two threads (ingest/reader.py) left ~45 MB each in theirs that
``malloc_trim`` did not hand back, under every later stage: 1M kernels peaked at 695 MB,
605 MB with one arena (reading, mostly SQLite stepping outside the allocator, no slower).
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

# mallopt(3) parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: keep up to 2 GiB free at the heap top


def tune_process() -> None:
    """The command line's and its workers' settings: :func:`keep_freed_memory` and
    :func:`collect_less_often`."""
    keep_freed_memory()
    collect_less_often()


# The cyclic collector's thresholds for a command-line process: a young collection every
# 20000 net allocations (Python's default: 700), the older two every 20 of the one before.
COLLECT_THRESHOLDS = (20_000, 20, 20)


def collect_less_often() -> None:
    """Run Python's cyclic garbage collector less often.

    A run's objects are mostly long-lived (imported modules, the report's tables and
    dicts), and with the default thresholds the collector walked them again and again:
    0.10 s of a 0.8 s analyze of a small export (2 full collections, 64 ms; measured with
    ``gc.callbacks``), 0.05 s at 1M kernels. Cycles are still collected; reference counting
    frees everything else at once, as before. Peak memory at 1M kernels was unchanged.
    """
    gc.set_threshold(*COLLECT_THRESHOLDS)


def keep_freed_memory() -> bool:
    """Ask glibc to serve large blocks from the heap, keep what is freed and use one arena
    for every thread, and Arrow to allocate there too (:func:`arrow_from_the_heap`); True
    if set."""
    if not sys.platform.startswith("linux"):
        return False
    if any(name.startswith("MALLOC_") for name in os.environ):
        return False
    try:
        # The process's own symbols, libc's among them: ctypes.util.find_library("c") ran
        # ldconfig in a subprocess at every start (5 ms, and 20 ms of imports).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    kept = all([bool(mallopt(param, value)) for param, value in settings])
    if kept:
        arrow_from_the_heap()
    return kept


def arrow_from_the_heap() -> None:
    """Have Arrow (the reader's columns) allocate from malloc's heap too, not its own
    mimalloc pool: a buffer freed after reading then backs the analysis' next columns
    instead of being handed back and faulted in again. At a million kernels, ``analyze``
    took 5.2-5.4 s instead of 5.9 s with a range per kernel (3.2 s instead of 3.3 s on
    the main shape), peak memory unchanged. A user's ``ARROW_DEFAULT_MEMORY_POOL`` wins;
    read when Arrow first allocates, so this must run before."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def release_freed_memory() -> None:
    """Hand what is free back to the system between stages (read, analyse, tabulate).

    :func:`keep_freed_memory` keeps a stage's freed columns for its own next ones, but
    the next stage then starts on top of all of them, and Arrow's reader keeps its own
    pool: 1M kernels peaked at 790 MB, 730 MB with this between stages, for a few ms.
    """
    if "pyarrow" in sys.modules:  # never imported for this: only a reader that used it
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols, as above
    except (OSError, AttributeError):  # not glibc
        return
    trim.argtypes = (ctypes.c_size_t,)
    trim(0)
