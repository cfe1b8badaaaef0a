"""``dlprof-lite analyze``: one input or several, then the console summary."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dlprof_lite.batch import default_jobs
from dlprof_lite.cli_common import analyze_options, console_for, error, progress_bar, warn
from dlprof_lite.cli_store import record_folders, record_report, store_beside
from dlprof_lite.errors import InputError
from dlprof_lite.forked import allow as allow_forks
from dlprof_lite.pipeline import AnalyzeOptions, analyze_many, analyze_one
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from dlprof_lite.cross_ranks import CrossRanks
    from dlprof_lite.ranks_run import RankReport
    from dlprof_lite.report.model import Report
    from dlprof_lite.store.beside import Beside



def _check_input(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not an nsys export (.sqlite, .nsys-rep, .qdrep)")


def cmd_analyze(args: argparse.Namespace) -> int:
    options = analyze_options(args)
    for path in args.paths:
        _check_input(path)
    if len(args.paths) > 1:
        return _analyze_many(args, options)
    with store_beside(args) as beside:  # before pandas is imported: see store/beside.py
        return _analyze_one(args, options, beside)


def _analyze_one(args: argparse.Namespace, options: AnalyzeOptions, beside: Beside | None) -> int:
    from dlprof_lite.render import output as files

    if (args.jobs or 1) > 1:  # asked for: a second process computes part of the report
        allow_forks()

    path = args.paths[0]
    target = args.output or files.default_report_dir(path)
    files.check_target(target.absolute(), force=options.force)  # fail before any work
    with progress_bar(args, path.name) as progress:
        result = analyze_one(path, target, options, progress)
    folder = result.report_dir or target.absolute()  # analyze_one names where it wrote
    run_id = record_report(args, result.report, folder, beside=beside)
    for warning in result.rank_warnings:
        warn(warning)
    show_report(args, result.report, folder, run_id, result.ranks)
    return 0


def show_report(
    args: argparse.Namespace, report: Report, folder: Path, run_id: int | None,
    ranks: Sequence[RankReport] = (),
) -> None:  # fmt: skip
    """The console summary (then the cross-rank view of a multi-process run); with --quiet
    only the warnings (stderr) and the report folder."""
    console = console_for(args)
    if console is None:
        for warning in report.summary.warnings:  # the console summary shows them otherwise
            warn(warning)
        sys.stderr.flush()
        print(f"report: {printable(folder)}", flush=True)
        return
    from dlprof_lite.render.console import render

    render(report, folder, console, top=args.top)
    if ranks:
        from dlprof_lite.ranks_run import RANKS_STEM, rank_lines

        table = printable(folder / f"{RANKS_STEM}.csv")
        print(f"ranks: {len(ranks)} reports, one per process (cross-rank table: {table})",
              flush=True)  # fmt: skip
        for line in rank_lines(ranks, folder):
            print(printable(line), flush=True)
    if run_id is not None:
        print(f"run store: recorded as run {run_id}", flush=True)


def _analyze_many(args: argparse.Namespace, options: AnalyzeOptions) -> int:
    """One report folder per input inside one parent folder, plus a combined summary."""
    result = analyze_many(
        args.paths, args.output, options, jobs=args.jobs or default_jobs(),
        scheduler=args.dask_scheduler,
    )  # fmt: skip
    for failure in result.failures:
        where = "" if failure.source in failure.error else f"{failure.source}: "
        error(where + failure.error, False)
    console = console_for(args)
    for row in result.rows if console is None else ():  # --quiet: warnings, one line per input
        if row.get("warnings"):
            warn(f"{row['source']}: {row['warnings']}")
    record_folders(args, [Path(str(r["report_dir"])) for r in result.rows if not r.get("error")])
    if console is not None:
        from dlprof_lite.render.console import render_many

        render_many(result.rows, console)
    if result.ranks is not None:
        _show_cross_ranks(result.ranks, result.folder, quiet=console is None)
    print(f"reports: {printable(result.folder)}", flush=True)
    return 2 if result.failures else 0  # some inputs failed: the others' reports are written


def _show_cross_ranks(cross: CrossRanks, folder: Path, *, quiet: bool) -> None:
    """The nodes of one job: their ranks side by side (the multi-node recipe)."""
    from dlprof_lite.cross_ranks import lines
    from dlprof_lite.ranks_run import RANKS_STEM

    for warning in cross.warnings:
        warn(warning)
    if quiet:
        return
    table = printable(folder / f"{RANKS_STEM}.csv")
    print(f"ranks: {len(cross.rows)} ranks over {cross.nodes} inputs (cross-rank table: "
          f"{table})", flush=True)  # fmt: skip
    for line in lines(cross):
        print(printable(line), flush=True)
