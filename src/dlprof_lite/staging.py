"""Files and folders written so that nothing is ever left half written, and leftovers swept.

A shared leaf (``tests/test_stages.py``): every writer uses it (report folders, comparison
folders, the run store's exports). It imports only :mod:`dlprof_lite.errors`.

- A folder is written into a hidden staging folder beside its target and renamed into place
  when complete (:func:`staged_folder`); on any error the staging folder is removed. With
  ``force`` the old folder is set aside, the new one renamed in, and only then is the old one
  deleted.
- Every file is written to a temporary name in its own folder, then ``os.replace``-d
  (:func:`atomic_write`).
- A run killed hard (SIGKILL, a crash, power loss) leaves its staging folder or temporary
  file behind: the next folder staged in the same parent sweeps leftovers of exactly our
  naming (:func:`sweep_stale`), once they are old and no live run holds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dlprof_lite.errors import OutputError

MAX_NAMES = 10_000
# Our staging names (_token: 10 hex digits): .NAME.<token>.partial and .NAME.<token>.old
# folders, .NAME.<token>.tmp files. Nothing else is ever swept.
_STAGING = re.compile(r"^\..+\.[0-9a-f]{10}\.(partial|old|tmp)$")
# A leftover is swept only this long after it last changed, and a staging folder only when
# no run holds its lock: a long profiling run writes nothing into its folder for hours.
STALE_AFTER_S = 3600.0

# What may not be replaced: raises for a target that exists (without force) or that force
# must not replace. ``staged_folder`` checks before it starts and again before the rename.
Check = Callable[[Path, bool], None]


def unique_dir(parent: Path, base: str) -> Path:
    """``parent/base``, else ``parent/base-2``, ``-3``, ...: the first name not taken."""
    for n in range(1, MAX_NAMES + 1):
        candidate = parent / (base if n == 1 else f"{base}-{n}")
        if not os.path.lexists(candidate):
            return candidate
    raise OutputError(f"{parent}: no free name for a new report folder {base}-N")


def _token() -> str:
    return uuid.uuid4().hex[:10]


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    tmp = path.with_name(f".{path.name}.{_token()}.tmp")
    try:
        # os.open honours the umask (tempfile's 0600 would leave reports unreadable to others).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _lock(folder: Path, *, wait: bool) -> int | None:
    """An open descriptor of ``folder`` holding its exclusive lock (released when closed or
    when the process dies, however), or None when another holds it or locks are unsupported."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep_stale(parent: Path, *, older_than: float = STALE_AFTER_S) -> list[Path]:
    """Remove leftovers of our own staging naming in ``parent`` (never anything else): a
    folder ``.NAME.<token>.partial|.old`` or a file ``.NAME.<token>.tmp``, ours (same user),
    unchanged for ``older_than`` seconds, and for a folder, not locked by a live run.
    Returns what was removed; errors are ignored (sweeping is a courtesy)."""
    swept: list[Path] = []
    try:
        entries = [e for e in os.scandir(parent) if _STAGING.match(e.name)]
    except OSError:
        return swept
    now = time.time()
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)  # a symlink is never ours: kept
        except OSError:
            continue
        if info.st_uid != os.getuid() or now - info.st_mtime < older_than:
            continue
        path = Path(entry.path)
        if entry.name.endswith(".tmp") and stat.S_ISREG(info.st_mode):
            with contextlib.suppress(OSError):
                path.unlink()
                swept.append(path)
        elif not entry.name.endswith(".tmp") and stat.S_ISDIR(info.st_mode):
            fd = _lock(path, wait=False)
            if fd is None:
                continue  # a live run is writing it
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                os.close(fd)
            swept.append(path)
    return swept


@contextmanager
def staged_folder(target: Path, check: Check, *, force: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder; on success it becomes ``target``, on error it goes.
    ``check`` refuses a target that may not be replaced.

    The folder is locked while in use (see :func:`sweep_stale`, run here first)."""
    target = target.absolute()
    check(target, force)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(target.parent)
        stage = target.parent / f".{target.name}.{_token()}.partial"
        stage.mkdir()
    except OSError as err:
        raise OutputError(f"cannot create a report folder in {target.parent}: {err}") from err
    lock = _lock(stage, wait=True)
    try:
        yield stage
        _commit(stage, target, check, force=force)
    except OSError as err:
        shutil.rmtree(stage, ignore_errors=True)
        if OutputError.is_write_failure(err):  # a full disk, ulimit -f, ...: not a bug
            raise OutputError.from_os_error(err, target) from err
        raise
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)


def _commit(stage: Path, target: Path, check: Check, *, force: bool) -> None:
    check(target, force)  # again: the target may have appeared meanwhile
    old = None
    try:
        if os.path.lexists(target):
            old = target.parent / f".{target.name}.{_token()}.old"
            os.rename(target, old)
        try:
            os.rename(stage, target)
        except OSError:
            if old is not None:
                os.rename(old, target)
                old = None
            raise
    except OSError as err:
        raise OutputError(f"cannot move the report into {target}: {err}") from err
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
