"""Reading a written report folder back into a :class:`Report` (``dlprof_lite.open_report``).

A report folder may come from anyone, so it is read as untrusted input (issue 40): only
regular files inside the folder are read (a symbolic link, FIFO or device where a report file
belongs is refused), each within a size limit before a byte is parsed, and every table and
summary field is checked against the writer's own schema (:mod:`dlprof_lite.render.read_schema`):
its columns, dtypes, types and domains. Anything else is one :class:`InputError` line naming
the file and the field; nothing outside the schema is shown.

The JSON files are the faithful form: each table's ``dtypes`` (and ``categories``) give the
frame back with the dtypes it was written with, floats keep every digit, and ``summary.json``
holds every list of the :class:`Summary`. A folder written with ``csv`` only is read from the
CSV files (:mod:`dlprof_lite.render.csv_reader`); their dtypes follow from the cells, and the
summary's GPU list is not in them.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.render import read_schema as rs
from dlprof_lite.report.metrics import SCHEMA
from dlprof_lite.report.model import (
    TABLES,
    Report,
    empty_collective_layers,
    empty_collective_ops,
    empty_collectives,
    empty_critical,
    empty_critical_path,
    empty_idle,
    empty_ranks,
    empty_report,
    empty_timeline,
)
from dlprof_lite.report.summary_types import Summary

# Tables a report folder may lack (written by an older dlprof-lite): how to read their absence.
OPTIONAL: dict[str, Callable[[], pd.DataFrame]] = {
    "timeline": empty_timeline, "ranks": empty_ranks, "idle": empty_idle,
    "critical": empty_critical, "critical_path": empty_critical_path,
    "collectives": empty_collectives, "collective_ops": empty_collective_ops,
    "collective_layers": empty_collective_layers,
}  # fmt: skip
# The keys of a table's JSON document besides the summary's fields (writers.JsonWriter).
HEAD = ("schema", "table", "definitions", "window")
TABLE_KEYS = frozenset({*HEAD, "dtypes", "categories", "rows"})


def open_report(folder: str | Path) -> Report:
    """The report written in ``folder`` (by ``Report.save`` or the command line)."""
    files = ReportFiles(Path(folder))
    if not files.present("summary.json") and not files.present("summary.csv"):
        raise InputError(f"{files.root}: not a dlprof-lite report folder (no summary.json or .csv)")
    tables = [name for name in TABLES if name != "summary" and name not in OPTIONAL]
    frames = {name: _read_table(files, name) for name in tables}
    for name, empty in OPTIONAL.items():
        present = any(files.present(f"{name}.{s}") for s in ("json", "csv"))
        frames[name] = _read_table(files, name) if present else empty()
    summary = _read_summary(files, frames["advice"])
    _consistent(summary, frames, files.root)
    return Report(summary=summary, **frames)


class ReportFiles:
    """The regular files of one report folder, read within :mod:`read_schema`'s limits."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise InputError(f"{root}: no such report folder")
        self.root = root
        self.read_bytes = 0

    def present(self, name: str) -> bool:
        """Whether ``name`` is there, as anything (a link to nowhere included)."""
        return os.path.lexists(self.root / name)

    def read(self, name: str) -> str:
        """The text of ``name``: a regular file inside the folder, UTF-8, within limits."""
        path = self.root / name
        table = name.rpartition(".")[0]
        limit = rs.MAX_SMALL_BYTES if table in rs.SMALL_TABLES else rs.MAX_TABLE_BYTES
        data = read_regular(path, limit)
        self.read_bytes += len(data)
        if self.read_bytes > rs.MAX_FOLDER_BYTES:
            raise InputError(f"{self.root}: more than {rs.MAX_FOLDER_BYTES >> 20} MiB of report "
                             "files, more than dlprof-lite writes")  # fmt: skip
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InputError(f"{path}: not UTF-8 text (byte {err.start})") from None


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISDIR, "a folder"))  # fmt: skip


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link to one) of at most ``limit``
    bytes; else one :class:`InputError`. Opened without following a link and without
    blocking, then checked again on the open file (it may have been swapped meanwhile)."""
    try:
        _check_kind(path, os.lstat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{path}: a symbolic link where a report file belongs; "
                             "only regular files inside the folder are read") from None  # fmt: skip
        raise InputError(f"{path}: cannot be read ({err.strerror or err})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        _check_kind(path, info)
        if info.st_size > limit:
            raise _too_big(path, limit)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise _too_big(path, limit)
    return data


def _check_kind(path: Path, info: os.stat_result) -> None:
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return
    what = next((word for test, word in _KINDS if test(mode)), "not a regular file")
    raise InputError(f"{path}: {what} where a report file belongs; only regular files inside "
                     "the folder are read")  # fmt: skip


def _too_big(path: Path, limit: int) -> InputError:
    return InputError(f"{path}: larger than {limit >> 20} MiB, more than dlprof-lite writes "
                      "for this file")  # fmt: skip


def _document(files: ReportFiles, name: str, keys: frozenset[str] | None) -> dict[str, Any]:
    """A table's JSON document, its head checked (schema version, table name, keys)."""
    path = files.root / f"{name}.json"
    small = name in rs.SMALL_TABLES
    doc = rs.load_json(files.read(path.name), str(path),
                       rs.MAX_JSON_VALUES // 8 if small else rs.MAX_JSON_VALUES)  # fmt: skip
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a {SCHEMA} {name!r} table")
    if doc.get("schema") != SCHEMA:
        found = str(doc.get("schema"))[:40]
        raise InputError(f"{path}: schema {found!r}, not {SCHEMA!r} (written by another "
                         "version of dlprof-lite, or not by dlprof-lite)")  # fmt: skip
    if doc.get("table") != name:
        raise InputError(f"{path}: not a {SCHEMA} {name!r} table")
    if keys is not None and not set(doc) <= keys:
        extra = sorted(set(doc) - keys)[0]
        raise InputError(f"{path}: {extra[:60]!r} is not part of a {name} table")
    for key in ("definitions", "window"):
        if not isinstance(doc.get(key, {}), dict):
            raise InputError(f"{path}: {key!r} is not an object")
    return doc


def _read_table(files: ReportFiles, name: str) -> pd.DataFrame:
    if files.present(f"{name}.json"):
        doc = _document(files, name, TABLE_KEYS)
        where = str(files.root / f"{name}.json")
        missing = [k for k in ("dtypes", "categories", "rows") if k not in doc]
        if missing:
            raise InputError(f"{where}: no {missing[0]!r}")
        return rs.typed_frame(name, doc["dtypes"], doc["categories"], doc["rows"], where)
    if not files.present(f"{name}.csv"):
        raise InputError(f"{files.root}: incomplete report, no {name}.json or {name}.csv")
    from dlprof_lite.render.csv_reader import csv_table

    path = files.root / f"{name}.csv"
    frame = csv_table(name, files.read(path.name), str(path))
    return frame if len(frame) else _empty(name)


def _empty(name: str) -> pd.DataFrame:
    return OPTIONAL[name]() if name in OPTIONAL else empty_report(name)


def _read_summary(files: ReportFiles, advice: pd.DataFrame) -> Summary:
    if files.present("summary.json"):
        doc = _document(files, "summary", None)
        body = {k: v for k, v in doc.items() if k not in HEAD}
        return rs.summary(body, str(files.root / "summary.json"))
    from dlprof_lite.render.csv_reader import csv_summary

    path = files.root / "summary.csv"
    return csv_summary(files.read(path.name), advice, str(path))


def _consistent(summary: Summary, frames: dict[str, pd.DataFrame], root: Path) -> None:
    """The row counts the summary states (a table cut short at a line end parses)."""
    counts = {"iterations": summary.iterations.iterations_count, "advice": len(summary.advice)}
    for table, count in counts.items():
        if isinstance(count, int) and len(frames[table]) != count:
            raise InputError(f"{root}: {table} has {len(frames[table])} rows but the summary "
                             f"counts {count} (a truncated or edited file)")  # fmt: skip
