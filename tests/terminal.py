"""Run ``dlprof-lite`` with one of its streams on a pseudo-terminal, as a user's shell would."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path


def run_on_a_terminal(
    args: list[str], *, stream: str = "stderr", cwd: Path | None = None
) -> tuple[int, str]:
    """Exit code and what reached the terminal; ``stream`` (stdout or stderr) is the pty."""
    leader, follower = pty.openpty()
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
    proc = subprocess.Popen([sys.executable, "-m", "dlprof_lite", *args], cwd=cwd, **streams)
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
