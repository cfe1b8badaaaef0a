"""Run ``nsys profile`` bounded, with the program's output kept apart from nsys's messages.

nsys prints its own messages ("Generating ...qdstrm", progress bars, "Generated:") on its
stdout, and with its default ``--show-output=true`` it relays the program's stdout and stderr
through the same pipes, so the two cannot be told apart afterwards. The program is therefore
started through a tiny wrapper (:data:`REDIRECT`) that points its stdout and stderr at
duplicates of ours, passed down as open file descriptors (nsys keeps them open for its
target, checked with nsys 2022.4): the program writes to the user's terminal itself,
unchanged (a terminal stays a terminal, so progress bars still draw), and nsys's pipes carry
only nsys's messages, which are shown with ``show_nsys`` (``--debug``) and kept for errors.

When our streams have no file descriptors (an embedding application, a test capturing
``sys.stdout``) the program's output comes through nsys's pipes; lines that look like nsys's
messages (:data:`NSYS_LINE`) are then held back and the rest is forwarded.

The wrapper also leaves a start marker (its pid, which the program keeps): until it appears
nsys is still starting up, a stage bounded by ``startup`` seconds (a hung agent otherwise
waits forever). An interrupt (SIGINT, or SIGTERM/SIGHUP as :class:`~.signals.Terminated`)
is forwarded so that nsys still writes what it captured; when nsys has ended, every process
left in its session or the program's is stopped (:func:`~.signals.stop_sessions`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, cast

from dlprof_lite.errors import NsysError
from dlprof_lite.launch.signals import (
    deferred_signals,
    set_subreaper,
    signal_of,
    stop_sessions,
)

_TAIL_BYTES = 64 * 1024
# Run by the interpreter (-I -S: no site, no user paths) before the program replaces it
# with exec, so the program keeps the wrapper's pid: it writes that pid to the start marker
# (atomically), points stdout and stderr at the descriptors passed ("-": unchanged), and
# execs the program. A missing program: one line, code 127.
REDIRECT = (
    "import os, sys\n"
    "marker, out, err = sys.argv[1:4]\n"
    "with open(marker + '.tmp', 'w') as fh:\n"
    "    fh.write(str(os.getpid()))\n"
    "os.replace(marker + '.tmp', marker)\n"
    "if out != '-':\n"
    "    os.dup2(int(out), 1); os.dup2(int(err), 2); os.close(int(out)); os.close(int(err))\n"
    "try:\n"
    "    os.execvp(sys.argv[4], sys.argv[4:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'dlprof-lite: error: cannot run {sys.argv[4]}: {exc.strerror}\\n')\n"
    "    sys.exit(127)\n"
)
# What nsys prints itself (2020.3 to 2025): progress, report names, its warnings and errors.
NSYS_LINE = re.compile(
    r"^(\[\d+/\d+\] \[|Generating '|Generated:|\s+/\S+\.(nsys-rep|qdrep|sqlite|qdstrm)$|"
    r"Collecting data\.\.\.|Processing events\.\.\.|Saving temporary|Creating final output|"
    r"Saved report file|Capture range|The target application|The application terminated|"
    r"Importer error status|Exporting |Exported successfully|Stopping |Process is terminated|"
    r"WARNING: |Warning: |Error: |ERROR: |Failed to |Agent launcher failed)"
)
# nsys lines worth a warning even when the run succeeded.
NSYS_NOTICE = re.compile(r"^(WARNING|Warning|ERROR|Error)\b|^Failed to |failed", re.M)


@dataclass
class Outcome:
    """How nsys ended: its exit code, the tail of its own messages, and warnings."""

    returncode: int
    nsys_output: str
    warnings: list[str]
    # The signal that interrupted the run (forwarded; nsys then wrote what it had), or None.
    signal: int | None = None


@contextmanager
def program_streams(echo: bool) -> Iterator[tuple[int, int] | None]:
    """Duplicates of our stdout and stderr for the program, or None (no descriptors)."""
    if not echo:
        yield None
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        fds = (os.dup(sys.stdout.fileno()), os.dup(sys.stderr.fileno()))
    except (AttributeError, OSError, ValueError):
        yield None
        return
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def redirected(program: list[str], fds: tuple[int, int] | None, marker: str) -> list[str]:
    """``program`` behind the wrapper that writes the start ``marker`` and gives it ``fds``
    as stdout and stderr (None: it keeps nsys's pipes)."""
    out, err = (str(fds[0]), str(fds[1])) if fds is not None else ("-", "-")
    return [sys.executable, "-I", "-S", "-c", REDIRECT, marker, out, err, *program]


def started_pid(marker: str) -> int | None:
    """The program's pid from the wrapper's start marker, or None before it started."""
    try:
        with open(marker, encoding="utf-8") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


class Tee(threading.Thread):
    """Drains one of nsys's pipes, keeps its last bytes, forwards what is asked.

    ``program_sink`` is where the program's lines go when they come through this pipe (None
    when the program writes to our streams itself: then every byte here is nsys's);
    ``nsys_sink`` receives nsys's own lines (None: held back).
    """

    def __init__(self, source: IO[bytes], program_sink: IO[Any] | None,
                 nsys_sink: IO[Any] | None, mixed: bool) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.source = source
        self.sinks = {"program": program_sink, "nsys": nsys_sink}
        self.mixed = mixed
        self.tail = bytearray()  # nsys's own output only
        self.pending = b""

    def run(self) -> None:
        fd = self.source.fileno()
        while chunk := os.read(fd, 65536):
            if not self.mixed:
                self._keep(chunk)
                self._write("nsys", chunk)
                continue
            lines = (self.pending + chunk).split(b"\n")
            self.pending = lines.pop()
            for line in lines:
                self._line(line + b"\n")
        if self.pending:
            self._line(self.pending)

    def _line(self, line: bytes) -> None:
        if NSYS_LINE.match(line.decode(errors="replace")):
            self._keep(line)
            self._write("nsys", line)
        else:
            self._write("program", line)

    def _keep(self, data: bytes) -> None:
        self.tail += data
        del self.tail[:-_TAIL_BYTES]

    def _write(self, which: str, data: bytes) -> None:
        sink = self.sinks[which]
        if sink is None:
            return
        try:
            binary = getattr(sink, "buffer", None)
            if binary is not None:
                binary.write(data)
                binary.flush()
            else:
                sink.write(data.decode(errors="replace"))
                sink.flush()
        except (OSError, ValueError):
            self.sinks[which] = None  # that stream went away; keep draining


def nsys_notices(output: str) -> list[str]:
    """nsys's warning and error lines, progress bars left out, each once."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", output)]
    found = [line for line in lines if line and NSYS_NOTICE.search(line)
             and not line.startswith("[")]  # fmt: skip
    return [f"nsys: {line}" for line in dict.fromkeys(found)]


@dataclass
class Limits:
    """How long nsys may take: to start the program (``startup``), after the program ended
    (``finalize``), and the whole run (``timeout``, None: unbounded)."""

    startup: float
    finalize: float
    timeout: float | None = None


@dataclass
class _Watch:
    """What the wait loop learnt: the run's sessions, the program's groups, the interrupt."""

    proc: subprocess.Popen[bytes]
    marker: str
    sessions: set[int]
    groups: set[int]
    signal: int | None = None


def supervise(
    args: list[str],
    *,
    ended: Callable[[], bool],
    pids: Callable[[], list[int]],
    limits: Limits,
    marker: str,
    tees: tuple[IO[Any] | None, IO[Any] | None, IO[Any] | None, bool],
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    """Run nsys within ``limits``; ``marker`` is the wrapper's start marker.

    ``ended`` tells when the program has ended, ``pids`` its processes (stopped with nsys);
    ``tees`` is (program stdout sink, program stderr sink, nsys sink, mixed). Raises
    :class:`NsysError` when nsys never started the program within ``limits.startup``.
    """
    reaper = set_subreaper(True)  # orphans of nsys come to us, to be stopped and reaped
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, pass_fds=pass_fds,
        )  # fmt: skip
    except OSError as exc:
        set_subreaper(False)
        raise NsysError(f"nsys could not start: {exc}") from None
    watch = _Watch(proc, marker, {proc.pid}, set())
    out_sink, err_sink, nsys_sink, mixed = tees
    readers = [Tee(cast(IO[bytes], proc.stdout), out_sink, nsys_sink, mixed),
               Tee(cast(IO[bytes], proc.stderr), err_sink, nsys_sink, mixed)]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        warnings = _wait(watch, ended, pids, limits)
    finally:
        with deferred_signals():  # one more signal must not leave half the run behind
            if proc.poll() is None:  # a time limit, an error or a second interrupt: stop it
                stop(proc, pids())
            stop_sessions(watch.sessions)
            if reaper:
                set_subreaper(False)
            for reader in readers:
                reader.join(timeout=10)
    tail = b"".join(bytes(reader.tail) for reader in readers).decode(errors="replace")
    code = proc.returncode if proc.returncode is not None else -9
    return Outcome(code, tail, warnings, watch.signal)


def _learn(watch: _Watch, pids: list[int]) -> bool:
    """Note the sessions and groups of the program's processes; whether it has started."""
    first = started_pid(watch.marker)
    for pid in ([first] if first else []) + pids:
        with contextlib.suppress(OSError):
            watch.sessions.add(os.getsid(pid))
            watch.groups.add(os.getpgid(pid))
    return first is not None


def _wait(
    watch: _Watch, ended: Callable[[], bool], pids: Callable[[], list[int]], limits: Limits
) -> list[str]:
    proc = watch.proc
    started = time.monotonic()
    ended_at: float | None = None
    running = False
    while True:
        try:
            proc.wait(timeout=0.25)
            return []
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM/SIGHUP as Terminated
            if watch.signal is not None:
                raise  # a second one: stop at once (the caller's finally stops everything)
            watch.signal = signal_of(exc)
            _learn(watch, pids())
            forward(watch, watch.signal)  # let nsys stop collecting and write what it has
        now = time.monotonic()
        running = running or _learn(watch, pids())
        if not running and watch.signal is None and now - started > limits.startup:
            raise NsysError(
                f"nsys hung in the profile start-up stage: the program had not started "
                f"{limits.startup:g} s after 'nsys profile' began, and nsys was stopped; "
                "raise --nsys-timeout (or DLPROF_NSYS_TIMEOUT) if nsys needs longer"
            )
        if ended_at is None and ended():
            ended_at = now
        if ended_at is not None and now - ended_at > limits.finalize:
            return [f"nsys hung in the profile finalize stage: still running "
                    f"{limits.finalize:g} s after the program ended; it was stopped and its "
                    "report recovered if possible"]  # fmt: skip
        if limits.timeout is not None and now - started > limits.timeout:
            return [f"the run was stopped after --timeout {limits.timeout:g} s"]


def forward(watch: _Watch, signum: int) -> None:
    """Pass an interrupt on so that the program ends and nsys writes its report.

    SIGINT goes to nsys, which (2022.4, checked) relays it to the program it started in a
    session of its own, then writes the report. SIGTERM and SIGHUP go to the program's
    process groups instead, and nsys writes when the program has ended: SIGHUP kills nsys
    with its report unwritten, and so does a second SIGTERM (checked), which nsys gets when
    a scheduler signals every process of a job and we relayed it too. Before the program is
    known, nsys gets SIGTERM (it stops the program and writes).
    """
    if signum == signal.SIGINT:
        signal_group(watch.proc.pid, signum)
        return
    groups = watch.groups - {watch.proc.pid}
    for group in groups:
        signal_group(group, signum)
    if not groups:
        signal_group(watch.proc.pid, signal.SIGTERM)


def signal_group(pgid: int, sig: int) -> None:
    if pgid == os.getpgrp():
        return  # never signal our own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop(proc: subprocess.Popen[bytes], pids: list[int]) -> None:
    """SIGTERM nsys's process group and the program's, then SIGKILL after a grace period."""
    groups = {proc.pid}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            signal_group(group, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue
