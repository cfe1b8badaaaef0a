"""Where a profiled program came from: its script and the git state of the script's repository.

Place in the pipeline: launch. The run store records the commit and whether the working tree
had uncommitted changes, so a comparison can say which code each run measured. Git is asked
with an argument list and a short timeout; no git, no repository or a slow file system give
``None`` (unknown), never an error: provenance must not stop a profiling run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class GitState:
    commit: str | None = None
    dirty: bool | None = None


def script_of(cmd: Sequence[str]) -> str | None:
    """The program's script as given: the first argument ending in ``.py``, else the module of
    ``-m``, else the program itself (``None`` for an empty command)."""
    for word in cmd:
        if word.endswith(".py"):
            return word
    if "-m" in cmd[:-1]:
        return cmd[list(cmd).index("-m") + 1]
    return cmd[0] if cmd else None


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True,
            timeout=GIT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(path: str | Path | None) -> GitState:
    """The commit checked out in the repository holding ``path`` (a file or folder; the
    current folder when None) and whether tracked files differ from it."""
    where = Path(path) if path is not None else Path.cwd()
    folder = where if where.is_dir() else where.parent
    if not folder.is_dir():
        return GitState()
    head = _git(folder, "rev-parse", "--verify", "HEAD")
    if head is None:
        return GitState()
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return GitState(head.strip(), None if status is None else bool(status.strip()))
