"""Errors every stage raises; only ``cli.py`` turns them into a message and an exit code.

Each error's ``str()`` is the one line the user sees after ``dlprof-lite: error:``, so it
names the file and the problem.
"""

from __future__ import annotations

import errno


class DlprofError(Exception):
    """Base of every error dlprof-lite raises on purpose (a user error or a bad input)."""

    exit_code: int = 2


class InputError(DlprofError):
    """The input file is missing, unreadable, not SQLite, not an nsys export, or corrupt."""


class NsysError(DlprofError):
    """nsys is missing, too old for a report, failed, or timed out."""

    exit_code = 3


class OutputError(DlprofError):
    """The output folder exists (and no ``--force``), or cannot be written."""

    @classmethod
    def from_os_error(cls, err: OSError, folder: object) -> OutputError:
        """The one line for a write that failed: a full disk, a file-size limit (``ulimit
        -f``; Python ignores SIGXFSZ, so the write fails with EFBIG), a quota, a read-only
        or vanished folder, each with what to do."""
        hint = _WRITE_HINTS.get(err.errno or 0, "check the folder and try again")
        reason = err.strerror or type(err).__name__
        return cls(f"cannot write the report in {folder}: {reason}; {hint}")

    @staticmethod
    def is_write_failure(err: OSError) -> bool:
        """A failure of writing itself (space, size limit, quota, permission), not a bug."""
        return err.errno in _WRITE_HINTS


_WRITE_HINTS = {
    errno.ENOSPC: "free some space there, or write elsewhere with -o",
    errno.EDQUOT: "your disk quota is used up: free some space, or write elsewhere with -o",
    errno.EFBIG: "a file-size limit (ulimit -f) stops the report; raise it or write less "
    "(--formats)",
    errno.EROFS: "the file system is read-only: write elsewhere with -o",
    errno.EACCES: "no permission to write there: write elsewhere with -o",
}


class StoreError(DlprofError):
    """The run database cannot be opened, read or written: a bad URL, a missing driver, an
    unreachable server, a file that is not a database, a schema newer than this tool.

    Exit code 2 as for other bad inputs (``compare --gate`` keeps 1 for a regression).
    """


class SchemaError(DlprofError):
    """A DataFrame broke the column contract of :mod:`dlprof_lite.ingest.columns`."""

    exit_code = 70
