"""Errors every stage raises; only ``cli.py`` turns them into a message and an exit code.

Each error's ``str()`` is the one line the user sees after ``dlprof-lite: error:``, so it
names the file and the problem.
"""

from __future__ import annotations


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


class SchemaError(DlprofError):
    """A DataFrame broke the column contract of :mod:`dlprof_lite.ingest.columns`."""

    exit_code = 70
