"""The command line's run-store part: recording every report, and ``dlprof-lite runs``.

Every report the run and ``analyze`` forms write is recorded in the run store
(:mod:`dlprof_lite.store`) unless ``--no-db``; a store that cannot be written (unreachable,
newer than this dlprof-lite, not a database) costs one warning line and nothing else: the
report folder is written first and stays. ``runs`` lists, shows, removes and exports the
recorded runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dlprof_lite import __version__
from dlprof_lite.cli_common import warn
from dlprof_lite.errors import DlprofError, OutputError
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from dlprof_lite.launch.provenance import GitState
    from dlprof_lite.report.model import Report
    from dlprof_lite.store.beside import Beside
    from dlprof_lite.store.database import RunInfo, RunStore

DB_HELP = (
    "run store: any SQLAlchemy URL, e.g. sqlite:///runs.db or "
    "postgresql://user@host/db (default: $DLPROF_LITE_DB, else "
    "$XDG_DATA_HOME/dlprof-lite/runs.db, i.e. ~/.local/share/dlprof-lite/runs.db)"
)


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="URL", help=DB_HELP)


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--tag``, ``--db``, ``--no-db`` of the run and ``analyze`` forms."""
    group = parser.add_argument_group("run store")
    group.add_argument(
        "--tag", metavar="TAG", help="label the run in the run store (compare pools a tag's runs)"
    )
    group.add_argument("--db", metavar="URL", help=DB_HELP)
    group.add_argument("--no-db", action="store_true", help="do not record the run")


def open_store(url: str | None, *, read_only: bool = False) -> RunStore:
    """The run store; ``read_only`` for commands that only read it (``runs list/show/export``,
    ``compare``): a missing or empty store is then an error, never created or written."""
    from dlprof_lite.store.database import RunStore

    if read_only:
        return RunStore(url, create=False, read_only=True)
    return RunStore(url)


def record_report(
    args: argparse.Namespace,
    report: Report,
    folder: Path,
    *,
    command: Sequence[str] = (),
    group: str | None = None,
    repeat_index: int | None = None,
    beside: Beside | None = None,
) -> int | None:
    """Record a written report in the run store; its run id, or None (``--no-db``, or the
    store failed: then one warning, and the report folder stays as written). ``beside``: the
    store's own process (:func:`store_beside`) records it, else this one."""
    if getattr(args, "no_db", False):
        return None
    from dlprof_lite.store.record import RunContext, RunRecord

    script, git = _provenance(command)
    context = RunContext(
        tag=args.tag, group=group, repeat_index=repeat_index, command=tuple(command),
        cwd=os.getcwd() if command else None, script=script or _text(report.summary.system.source),
        host=socket.gethostname() if command else None,  # analyze: the export's host
        git_commit=git.commit if git else None, git_dirty=git.dirty if git else None,
        report_dir=str(folder), tool_version=__version__,
    )  # fmt: skip
    run = RunRecord.from_report(report, context)
    try:
        if beside is not None:
            return beside.record(args.db, run)
        with open_store(args.db) as store:
            run_id: int = store.record(run)
            return run_id
    except DlprofError as err:
        warn(f"run not recorded in the run store: {err}")
        return None


def _provenance(command: Sequence[str]) -> tuple[str | None, GitState | None]:
    """The profiled script and its git state, for the run form (``analyze``: none)."""
    if not command:
        return None, None
    from dlprof_lite.launch.provenance import git_state, script_of

    script = script_of(command)
    return script, git_state(script if script and script.endswith(".py") else None)


@contextlib.contextmanager
def store_beside(args: argparse.Namespace) -> Iterator[Beside | None]:
    """The run store's process (:mod:`dlprof_lite.store.beside`), started now so that it
    imports the store while this one analyses; None with ``--no-db`` or where it cannot
    start. Ended on leaving if nothing was recorded through it."""
    if getattr(args, "no_db", False):
        yield None
        return
    from dlprof_lite.store.beside import start

    beside = start()
    try:
        yield beside
    finally:
        if beside is not None:
            beside.stop()


def record_folders(args: argparse.Namespace, folders: Sequence[Path]) -> None:
    """Record the report folders a batch wrote (read back: the workers return only rows),
    through one store; the first failure is one warning and ends the recording."""
    if getattr(args, "no_db", False) or not folders:
        return
    from dlprof_lite.render.reader import open_report
    from dlprof_lite.store.record import RunContext, RunRecord

    try:
        with open_store(args.db) as store:
            for folder in folders:
                context = RunContext(tag=args.tag, report_dir=str(folder),
                                     tool_version=__version__)  # fmt: skip
                store.record(RunRecord.from_report(open_report(folder), context))
    except DlprofError as err:
        warn(f"runs not recorded in the run store: {err}")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


# --- dlprof-lite runs ---------------------------------------------------------------------


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date or time: {text!r} (e.g. 2026-11-24 or 2026-11-24T13:00)"
        ) from None
    return value if value.tzinfo else value.astimezone(UTC)


def _run_id(text: str) -> int:
    digits = text.removeprefix("#")
    # Any length of digits: an id no store holds (above 2^63) is the store's "no run N".
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 100:
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}")
    return int(digits)


def build_runs_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} runs",
        description="The run store: every analysed report is recorded (unless --no-db).",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = sub.add_parser("list", help="list runs, newest first (the default action)")
    export = sub.add_parser("export", help="write the listed runs as CSV")
    export.add_argument("file", type=Path, help="CSV file to write ('-': standard output)")
    export.add_argument("--force", action="store_true", help="replace an existing file")
    for p in (parser, listing, export):
        p.add_argument("--tag", help="only runs with this tag or --repeat group")
        p.add_argument("--script", help="only runs of this script (its path or name)")
        p.add_argument("--since", type=_when, metavar="DATE", help="only runs from DATE on")
        p.add_argument("--until", type=_when, metavar="DATE", help="only runs before DATE")
        p.add_argument("--limit", type=int, metavar="N", help="at most N runs")
    show = sub.add_parser("show", help="one run: its context and summary")
    show.add_argument("run_id", type=_run_id, metavar="ID")
    remove = sub.add_parser("rm", help="remove runs from the store (report folders stay)")
    remove.add_argument("run_ids", type=_run_id, nargs="+", metavar="ID")
    for p in (parser, listing, show):
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for p in (parser, listing, export, show, remove):
        add_db_option(p)
    return parser


def cmd_runs(args: argparse.Namespace) -> int:
    action = args.action or "list"
    if action == "rm":  # the one command here that writes: a missing store is not created
        from dlprof_lite.store.database import RunStore

        with RunStore(args.db, create=False) as writable:
            removed = writable.remove(args.run_ids)  # every id there, or an error
        print(f"removed {removed} run(s)")
        return 0
    with open_store(args.db, read_only=True) as store:
        if action == "show":
            return _show_run(store, args.run_id, as_json=args.json)
        infos = store.find(tag=args.tag, script=args.script, since=args.since,
                           until=args.until, limit=args.limit)  # fmt: skip
    if action == "export":
        return _export(infos, args.file, force=args.force)
    if args.json:
        print(json.dumps([i.row() for i in infos], indent=1, default=str))
    else:
        _print_runs(infos)
    return 0


def _ms(ns: object) -> str:
    """A duration in the unit it reaches (``1.5 µs``, ``12.30 ms``), never ``0.00``."""
    from dlprof_lite.durations import short

    return short(float(ns)) if isinstance(ns, int | float) else ""


def _print_runs(infos: Sequence[RunInfo]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold")
    right = ("id", "steps", "median step")
    for name in ("id", "time", "tag", "script", "steps", "median step", "git", "report"):
        table.add_column(name, justify="right" if name in right else "left")
    for i in infos:
        git = (i.git_commit or "")[:8] + ("*" if i.git_dirty else "")
        when = i.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        # Every stored text as plain text: no control character, no rich markup acts.
        cells = (str(i.id), when, i.tag or i.group or "", i.script or "", str(i.steps or ""),
                 _ms(i.step_median_ns), git, i.report_dir or "")  # fmt: skip
        table.add_row(*(Text(printable(c)) for c in cells))
    console = Console(highlight=False)
    if not infos:
        console.print("no runs recorded (yet)")
        return
    from dlprof_lite.narrow import print_fitting

    print_fitting(console, table)  # stacked on a narrow terminal: no report path cut


def _show_run(store: RunStore, run_id: int, *, as_json: bool) -> int:
    run = store.get(run_id)
    context = {k: (v.isoformat() if isinstance(v, datetime) else v)
               for k, v in asdict(run.context).items()}  # fmt: skip
    if as_json:
        doc = {"id": run.run_id, "context": context, "summary": run.summary.document()}
        print(json.dumps(doc, indent=1, default=str))
        return 0
    import numpy as np

    steps = run.step_ns()
    lines = [f"run {run.run_id}"]
    for key, value in context.items():
        if value not in (None, (), ""):
            shown = " ".join(value) if isinstance(value, tuple | list) else value
            lines.append(f"  {key:<14}{printable(str(shown))}")
    for key in ("gpu_names", "driver_version", "nsys_version", "torch_version", "cuda_version"):
        value = run.summary.metrics().get(key)
        if value not in (None, ""):
            lines.append(f"  {key:<14}{printable(str(value))}")
    if len(steps):
        median = _ms(float(np.median(steps)))
        lines.append(f"  {'steps':<14}{len(steps)} analysed, median {median}")
    print("\n".join(lines))
    return 0


def _export(infos: Sequence[RunInfo], file: Path, *, force: bool) -> int:
    from dlprof_lite.store.database import export_csv

    buffer = io.StringIO()
    export_csv(infos, buffer)
    if str(file) == "-":
        sys.stdout.write(buffer.getvalue())
        return 0
    from dlprof_lite.staging import atomic_write

    if file.exists() and not force:
        raise OutputError(f"{file} exists; use --force to replace it")
    try:
        atomic_write(file, buffer.getvalue())
    except OSError as err:
        raise OutputError.from_os_error(err, file.parent) from err
    print(f"exported {len(infos)} run(s) to {printable(file)}")
    return 0
