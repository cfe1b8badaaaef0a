"""One piece of work done by a forked copy of this process while this one goes on.

The report's tables are numpy and pandas passes that hold the GIL too often for a thread
to help (the critical path in a thread beside the layers table: 1.31 s -> 1.24 s at 1M
kernels), so :class:`Forked` runs a piece of work in a ``fork`` of the process: the copy
sees the whole Profile for free (copy-on-write) and sends back only its small result,
pickled through a pipe.

Only the command line forks, when asked (``analyze -j N`` with N >= 2 calls :func:`allow`):
a notebook or a test that calls the pipeline computes everything in its own process, as
does every caller where :func:`safe_to_fork` is false. The work must be a pure function of
what the process already holds: its result is the same wherever it runs, so the fallback
is to run it here.

Fork-safety: ``fork`` copies only the calling thread, and a lock another thread holds stays
held in the copy. The run store's process forks before any thread exists
(store/beside.py); here, after the analysis, the command line's process holds native
threads of three known kinds, each safe to fork across: OpenBLAS's pool (numpy; shut down
by OpenBLAS's own fork handler), jemalloc's background thread (Arrow; jemalloc's fork
handlers) and ADBC's interrupt watcher (blocked reading a pipe, holding no lock; the copy
never calls the driver). :func:`safe_to_fork` refuses any Python thread besides this one
and any native thread whose name is not one of those kinds (the pool's threads carry the
process's own name). A Python thread of ours that can stop, the progress bar's redraw,
stops (and ends) for the fork and starts again after it (:func:`paused_for_forks`).

The copy ignores Ctrl-C (the parent's to handle; a parent that stops kills it), writes
nothing but its answer and leaves through ``os._exit``: buffered output and exit handlers
run once, in the parent. A copy that fails sends no answer and the parent does the work
itself, so an error is raised by the same code at the same point as without a fork.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")

_CHUNK = 1 << 16
# The op counts (kernels and memops) between which a report's work is worth a fork
# (worth_forking).
FORK_MIN_OPS = 100_000
FORK_MAX_OPS = 4_000_000
# Native threads the command line's process may hold when it forks (module docstring).
FORK_SAFE_THREADS = frozenset({"jemalloc_bg_thd", "AdbcInterrupt"})
_allowed = False
_pauses: list[Callable[[], AbstractContextManager[object]]] = []


@contextmanager
def paused_for_forks(pause: Callable[[], AbstractContextManager[object]]) -> Iterator[None]:
    """Within this block, each fork happens inside ``pause()``: a thread of ours that stops
    (and has stopped) for it, such as the progress bar's redraw, so that no Python thread
    runs when the process forks."""
    _pauses.append(pause)
    try:
        yield
    finally:
        _pauses.remove(pause)


def allow() -> None:
    """Let this process fork helpers (the command line, asked for more than one process)."""
    global _allowed
    _allowed = True


def worth_forking(ops: int) -> bool:
    """Whether a copy pays for a profile of ``ops`` GPU ops: enough that its work outweighs
    the fork (a small export's page and host analyses: the same wall time, 0.06 s more CPU),
    and few enough that the copy's transients beside the parent's stay small (above, memory
    is what limits a run: the copy's would come on top)."""
    return FORK_MIN_OPS <= ops <= FORK_MAX_OPS


def safe_to_fork() -> bool:
    """Whether :class:`Forked` may fork here: allowed, POSIX with ``/proc``, no Python
    thread but this one, and every native thread of a kind in :data:`FORK_SAFE_THREADS`
    or bearing the process's own name. ``DLPROF_LITE_FORK=0`` in the environment forbids
    it (the results are the same; to compare, or where a fork is unwelcome)."""
    if not _allowed or not hasattr(os, "fork") or os.environ.get("DLPROF_LITE_FORK") == "0":
        return False
    if threading.active_count() != 1 or threading.current_thread() is not threading.main_thread():
        return False
    found = other_threads()
    if found is None:
        return False
    own, others = found
    return all(name == own or name in FORK_SAFE_THREADS for name in others)


def other_threads() -> tuple[str, list[str]] | None:
    """The process's name and the names of its threads besides the main one, counted by
    the kernel: numpy's and Arrow's native pools are not Python threads. None where they
    cannot be read (no ``/proc``: macOS; a thread that ended meanwhile): then do not fork."""
    tasks = Path("/proc/self/task")
    try:
        own = Path("/proc/self/comm").read_text().strip()
        others = [(tasks / t / "comm").read_text().strip() for t in os.listdir(tasks)
                  if int(t) != os.getpid()]  # fmt: skip
    except OSError:
        return None
    return own, others


class Forked(Generic[T]):
    """``work()`` computed in a forked copy of this process (``fork``: when it is safe,
    :func:`safe_to_fork`), else here at once; :meth:`result` is its value either way.

    Use it as a context manager: leaving the block early (an error, Ctrl-C) ends the copy.
    """

    def __init__(self, work: Callable[[], T], *, fork: bool) -> None:
        self._work = work
        self._pid: int | None = None
        self._fd = -1
        self._value: tuple[T] | None = None
        if fork and _allowed:
            with ExitStack() as pausing:  # our own threads stop for the fork (paused_for_forks)
                for pause in list(_pauses):
                    pausing.enter_context(pause())
                if safe_to_fork():
                    self._fork()
        if self._pid is None:
            self._value = (work(),)

    def _fork(self) -> None:
        read_end, write_end = os.pipe()
        try:
            with warnings.catch_warnings():  # Python 3.12+ warns of any thread; see above
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return
        if pid == 0:  # pragma: no cover  # the copy: measured by the tests through its answer
            os.close(read_end)
            _copy(self._work, write_end)
        os.close(write_end)
        self._pid, self._fd = pid, read_end

    def result(self) -> T:
        """The work's value: the copy's answer, or the work done here when the copy gave
        none (it failed: the same error is then raised here)."""
        if self._value is None:
            answer = self._collect()
            try:
                self._value = (pickle.loads(answer),)  # our own copy's answer
            except Exception:  # none, or cut short: the copy failed
                self._value = (self._work(),)
        return self._value[0]

    def _collect(self) -> bytes:
        try:
            return read_all(self._fd)
        finally:
            self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        os.close(self._fd)
        if kill:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:  # fmt: skip
        self._end(kill=True)


def _copy(work: Callable[[], T], to_parent: int) -> None:  # pragma: no cover  # see _fork
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        answer = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
        write_all(to_parent, answer)
    except BaseException:  # nothing to tell: the parent does the work itself
        pass
    finally:
        os._exit(0)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the pipe ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:_CHUNK]) :]


def read_all(fd: int) -> bytes:
    """Everything the pipe ``fd`` gives until its writers close it."""
    parts = []
    while chunk := os.read(fd, _CHUNK):
        parts.append(chunk)
    return b"".join(parts)
