"""SIGTERM and SIGHUP handled like SIGINT, and no process of a profiled run left behind.

A job scheduler ends a job with SIGTERM (then SIGKILL after a grace period); a closed
terminal sends SIGHUP. Python's default for both is to die at once, which left nsys, its
agent and the program running in their own sessions, a ``/tmp/dlprof-lite-*`` folder and a
hidden staging folder behind. :func:`signals_as_interrupts` makes them raise
:class:`Terminated`, a ``KeyboardInterrupt``, so every path that already handles Ctrl-C
(forward to the program, let nsys write, clean up on the way out) handles them too.

nsys puts the program in a session of its own and, when nsys itself ends, its launcher and
helpers are orphaned. While a run is supervised this process is the "child subreaper" of
its descendants (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+), so orphans are re-parented
here instead of to init: :func:`stop_sessions` can then stop every process left in the
run's sessions and reap them, zombies included.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGHUP)
_PR_SET_CHILD_SUBREAPER = 36
_GRACE_S = 5.0


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; raised where SIGINT raises ``KeyboardInterrupt``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 129 for SIGHUP


def signal_of(exc: BaseException) -> int:
    """The signal an interrupt stands for: SIGINT for a plain ``KeyboardInterrupt``."""
    return exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT)


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; elsewhere
    Python cannot install handlers, and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP are noted, not acted on, so that a cleanup that
    must finish (stopping every process of the run) is not cut short by one more signal;
    the first one noted is handled as before right after. (Handlers, not a signal mask: a
    mask is per thread, and the output-draining threads would take the signal.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[signal.Signals] = []
    previous = {signum: signal.signal(signum, lambda n, _f: noted.append(signal.Signals(n)))
                for signum in (signal.SIGINT, *HANDLED)}  # fmt: skip
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted:
            _deliver(noted[0], previous[noted[0]])


def _deliver(signum: int, handler: object) -> None:
    """Act on a held-back signal as ``handler`` (what was installed before) would have."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)


def set_subreaper(on: bool) -> bool:
    """Become (or stop being) the subreaper of our descendants; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, sid) of a process from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and ')'
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def session_of(pid: int) -> int | None:
    found = _stat(pid)
    return found[3] if found else None


def members(sessions: Iterable[int]) -> dict[int, str]:
    """Every process (pid: state) in one of ``sessions``, from /proc."""
    wanted = set(sessions)
    found: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = _stat(int(entry))
                if stat and stat[3] in wanted and int(entry) != os.getpid():
                    found[int(entry)] = stat[0]
    return found


def stop_sessions(sessions: Iterable[int]) -> list[int]:
    """SIGTERM, then SIGKILL after a grace period, every live process of ``sessions``
    (never our own session); reap what was ours. Returns the pids that were still alive."""
    wanted = set(sessions) - {os.getsid(0)}
    alive = [pid for pid, state in members(wanted).items() if state not in "ZX"]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (_GRACE_S if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline:
            _reap_ours(wanted)
            if not [p for p, s in members(wanted).items() if s not in "ZX"]:
                break
            time.sleep(0.05)
    _reap_ours(wanted)
    return alive


def _reap_ours(sessions: set[int]) -> None:
    """Reap those of our children that belong to ``sessions`` (never an unrelated child of
    an embedding application)."""
    for pid in members(sessions):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
