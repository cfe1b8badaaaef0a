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

_TAIL_BYTES = 64 * 1024
# Run by the interpreter (-I -S: no site, no user paths) before the program replaces it
# with exec, so the program keeps the wrapper's pid. A missing program: one line, code 127.
REDIRECT = (
    "import os, sys\n"
    "out, err = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.dup2(out, 1); os.dup2(err, 2); os.close(out); os.close(err)\n"
    "try:\n"
    "    os.execvp(sys.argv[3], sys.argv[3:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'dlprof-lite: error: cannot run {sys.argv[3]}: {exc.strerror}\\n')\n"
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


def redirected(program: list[str], fds: tuple[int, int] | None) -> list[str]:
    """``program`` behind the wrapper that gives it ``fds`` as stdout and stderr."""
    if fds is None:
        return program
    return [sys.executable, "-I", "-S", "-c", REDIRECT, str(fds[0]), str(fds[1]), *program]


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


def supervise(
    args: list[str],
    *,
    ended: Callable[[], bool],
    pids: Callable[[], list[int]],
    timeout: float | None,
    finalize: float,
    tees: tuple[IO[Any] | None, IO[Any] | None, IO[Any] | None, bool],
    pass_fds: tuple[int, ...] = (),
) -> Outcome:
    """Run nsys; stop it when it outlives the program by ``finalize`` s or runs past ``timeout``.

    ``ended`` tells when the program has ended, ``pids`` its processes (stopped with nsys);
    ``tees`` is (program stdout sink, program stderr sink, nsys sink, mixed).
    """
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, pass_fds=pass_fds,
        )  # fmt: skip
    except OSError as exc:
        raise NsysError(f"nsys could not start: {exc}") from None
    out_sink, err_sink, nsys_sink, mixed = tees
    readers = [Tee(cast(IO[bytes], proc.stdout), out_sink, nsys_sink, mixed),
               Tee(cast(IO[bytes], proc.stderr), err_sink, nsys_sink, mixed)]  # fmt: skip
    for reader in readers:
        reader.start()
    warnings = _wait(proc, ended, pids, timeout, finalize)
    for reader in readers:
        reader.join(timeout=10)
    tail = b"".join(bytes(reader.tail) for reader in readers).decode(errors="replace")
    return Outcome(proc.returncode if proc.returncode is not None else -9, tail, warnings)


def _wait(
    proc: subprocess.Popen[bytes],
    ended: Callable[[], bool],
    pids: Callable[[], list[int]],
    timeout: float | None,
    finalize: float,
) -> list[str]:
    warnings: list[str] = []
    started = time.monotonic()
    ended_at: float | None = None
    interrupted = False
    while True:
        try:
            proc.wait(timeout=0.25)
            return warnings
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt:
            if interrupted:
                stop(proc, pids())
                raise
            interrupted = True  # let nsys stop collecting and write what it has
            signal_group(proc.pid, signal.SIGINT)
        now = time.monotonic()
        if ended_at is None and ended():
            ended_at = now
        if ended_at is not None and now - ended_at > finalize:
            warnings.append(f"nsys was still running {finalize:g} s after the program ended; "
                            "it was stopped and its report recovered if possible")  # fmt: skip
            stop(proc, pids())
            return warnings
        if timeout is not None and now - started > timeout:
            warnings.append(f"the run was stopped after --timeout {timeout:g} s")
            stop(proc, pids())
            return warnings


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
