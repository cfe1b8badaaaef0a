"""Run ``dlprof-lite`` with one of its streams on a pseudo-terminal, as a user's shell would."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path


def run_on_a_terminal(
    args: list[str], *, stream: str = "stderr", cwd: Path | None = None,
    columns: int | None = None, code: str | None = None,
) -> tuple[int, str]:  # fmt: skip
    """Exit code and what reached the terminal; ``stream`` (stdout or stderr) is the pty,
    ``columns`` wide when given (as a terminal window of that size reports itself);
    ``code``: Python that runs the command line with ``args`` instead of ``-m dlprof_lite``."""
    leader, follower = pty.openpty()
    if columns is not None:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
    how = ["-m", "dlprof_lite"] if code is None else ["-c", code]
    proc = subprocess.Popen([sys.executable, *how, *args], cwd=cwd, **streams)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return proc.returncode, b"".join(chunks).decode(errors="replace")
