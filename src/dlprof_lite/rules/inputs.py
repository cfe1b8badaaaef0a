"""The input files dlprof-lite accepts, by suffix (case-insensitive).

- ``.sqlite``: an ``nsys export --type=sqlite`` file, read directly;
- ``.nsys-rep`` (nsys 2021.4 and later) and ``.qdrep`` (before): reports that the local
  ``nsys export`` turns into SQLite first (Nsight Systems User Guide, "Report File
  Format"); these are also what ``nsys profile`` writes;
- ``.qdstrm``: the raw stream ``nsys profile`` leaves when it could not import it itself
  (``QdstrmImporter`` turns it into a report).
"""

from __future__ import annotations

from pathlib import PurePath

SQLITE_SUFFIX = ".sqlite"
QDSTRM_SUFFIX = ".qdstrm"
# What ``nsys profile`` writes, newest first.
PROFILE_SUFFIXES = (".nsys-rep", ".qdrep")
# Files exported to SQLite with the local nsys before reading.
REPORT_SUFFIXES = (*PROFILE_SUFFIXES, QDSTRM_SUFFIX)
# Every input ``dlprof-lite analyze`` and ``dlprof_lite.load`` take.
INPUT_SUFFIXES = (SQLITE_SUFFIX, *REPORT_SUFFIXES)


def suffix_of(path: str | PurePath) -> str:
    return PurePath(path).suffix.lower()


def is_report(path: str | PurePath) -> bool:
    """An nsys report or stream (needs ``nsys export``), not an SQLite export."""
    return suffix_of(path) in REPORT_SUFFIXES


def is_input(path: str | PurePath) -> bool:
    """A file whose suffix names an nsys export, report or stream."""
    return suffix_of(path) in INPUT_SUFFIXES
