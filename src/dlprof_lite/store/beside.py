"""The run store opened in a process of its own while the analysis runs.

Recording a small export's report costs ~0.15 s, nearly all of it importing SQLAlchemy: a
fifth of the command. :func:`start` forks, before the analysis imports pandas, a process
that imports the store's modules on the other core and then waits for the run;
:meth:`Beside.record` hands it the finished run (pickled through a pipe) and returns the id
the run was stored under. Nothing else changes: the child opens the store only once it is
handed a run (a failed analysis creates no store), its errors are the parent's
:class:`StoreError` with the same one line, and a report is recorded whole or not at all,
as before (one transaction).

:func:`start` returns None, and the caller records in its own process as before, where
``fork`` does not exist (not POSIX) or where the process already runs threads: a fork copies
only the thread that calls it, and a lock another thread holds stays held in the child
forever (a test calling ``main()`` after numpy started its pool, say). The command line
forks before anything starts a thread.

The child writes nothing to the terminal, ignores Ctrl-C (the parent's to handle: the
child ends when its pipe closes, which happens when the parent ends, however it ends) and
leaves through ``os._exit``: the parent's buffered output and exit handlers never run twice.
"""

from __future__ import annotations

import os
import pickle
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlprof_lite.errors import DlprofError, StoreError
from dlprof_lite.forked import other_threads, read_all, write_all

if TYPE_CHECKING:
    from dlprof_lite.store.record import RunRecord


@dataclass
class Beside:
    """The child process: its pid and the parent's ends of the two pipes."""

    pid: int
    to_child: int
    from_child: int
    done: bool = False

    def record(self, url: str | None, run: RunRecord) -> int:
        """Record ``run`` in the store at ``url`` (None: the default store) through the
        child, which receives it as plain values (:mod:`~.prepared`); its run id. A store
        error is raised here as :class:`StoreError`, as :meth:`RunStore.record` raises it;
        so is a child that is gone."""
        if self.done:
            raise ValueError("this run store process has ended")
        from dlprof_lite.store.rows import prepare

        payload = pickle.dumps((url, prepare(run)), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            write_all(self.to_child, payload)
        except BrokenPipeError:
            pass  # the child is gone: its pipe gives no answer below
        finally:
            os.close(self.to_child)
        try:
            reply = read_all(self.from_child)
        finally:
            self._end()
        if not reply:
            raise StoreError("the run store's process ended before recording the run")
        kind, value = pickle.loads(reply)  # our own child's answer
        if kind == "ok":
            return int(value)
        if kind == "error":
            raise StoreError(str(value))
        raise RuntimeError(f"in the run store's process: {value}")

    def stop(self) -> None:
        """End the child without recording (it has not touched the store); idempotent."""
        if self.done:
            return
        os.close(self.to_child)
        os.kill(self.pid, signal.SIGKILL)  # it may still be importing: no need to wait
        self._end()

    def _end(self) -> None:
        self.done = True
        os.close(self.from_child)
        os.waitpid(self.pid, 0)


def can_fork() -> bool:
    """Whether forking is safe here: POSIX, and this process runs no thread but this one
    (forked.other_threads: native pools count too; unknown without /proc: no fork)."""
    found = other_threads()
    return hasattr(os, "fork") and found is not None and not found[1]


def start() -> Beside | None:
    """Fork the run store's process (None where :func:`can_fork` is false, or the fork
    fails: then record in this process)."""
    if not can_fork():
        return None
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (down_r, down_w, up_r, up_w):
            os.close(fd)
        return None
    if pid == 0:  # pragma: no cover  # the child: measured by the tests through its effects
        os.close(down_w)
        os.close(up_r)
        _child(down_r, up_w)
    os.close(down_r)
    os.close(up_w)
    return Beside(pid, down_w, up_r)


def _child(from_parent: int, to_parent: int) -> None:  # pragma: no cover  # see start
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        from dlprof_lite.store.database import RunStore  # SQLAlchemy; no pandas

        payload = read_all(from_parent)
        if not payload:  # the parent ended or stopped us: nothing to record
            return
        url, run = pickle.loads(payload)  # our own parent's run
        try:
            with RunStore(url) as store:
                reply: tuple[str, object] = ("ok", store.insert(run))
        except DlprofError as err:
            reply = ("error", str(err))
        except Exception as err:  # a bug: the parent reports it as one
            reply = ("bug", f"{type(err).__name__}: {err}")
        write_all(to_parent, pickle.dumps(reply))
    except BaseException:  # nothing to tell: the parent sees no answer
        pass
    finally:
        os._exit(0)
