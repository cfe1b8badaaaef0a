"""``dlprof-lite report FOLDER``: the page and the trace of a report folder, written again.

A report folder holds every table the page and the trace are drawn from (the timeline of
one steady iteration included), so ``report.html`` and ``trace.json`` can be rebuilt
without the profile: after an upgrade of dlprof-lite, or for a folder written with
``--formats csv,json``. An existing file is replaced only with ``--force``, and only a regular
file: a symbolic link (dangling or not), FIFO or folder of that name is never replaced.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

from dlprof_lite.errors import OutputError
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable


def build_report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} report",
        description="Write report.html and/or trace.json of a report folder again, from its "
        "tables (no profile needed).",
    )
    parser.add_argument("folder", type=Path, metavar="FOLDER", help="a report folder")
    parser.add_argument("--html", action="store_true", help="write report.html")
    parser.add_argument("--trace", action="store_true",
                        help="write trace.json (the report's timeline iteration)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace existing files")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser


def cmd_report(args: argparse.Namespace) -> int:
    from dlprof_lite.render.output import PAGE_FILE, TRACE_FILE, write_page, write_trace
    from dlprof_lite.render.reader import open_report

    wanted = {PAGE_FILE: args.html, TRACE_FILE: args.trace}
    if not any(wanted.values()):
        wanted = dict.fromkeys(wanted, True)  # neither named: both
    for name, on in wanted.items():
        if on:
            _check_replaceable(args.folder / name, force=args.force)
    report = open_report(args.folder)
    written = []
    try:
        if wanted[PAGE_FILE]:
            written.append(write_page(report, args.folder))
        if wanted[TRACE_FILE]:
            written.append(write_trace(report, args.folder))
    except OSError as err:
        raise OutputError.from_os_error(err, args.folder) from err
    for path in written:
        print(f"wrote {printable(path)}")
    return 0


def _check_replaceable(path: Path, *, force: bool) -> None:
    """Refuse to write over anything but a regular file, and over that without ``force``."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise OutputError(f"{path}: {err.strerror or err}") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise OutputError(f"{path} is {what}; refusing to replace it (only regular files "
                          "inside the report folder are replaced)")  # fmt: skip
    if not force:
        raise OutputError(f"{path} exists; use --force to replace it")
