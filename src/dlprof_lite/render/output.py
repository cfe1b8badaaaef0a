"""Where reports go, and their files: a report folder written whole or not at all.

- A default report folder is a new name next to the input (``run.dlprof``, ``run.dlprof-2``,
  ...); an existing folder is never overwritten unless the user passed ``--force``.
- ``--force`` only replaces a folder that is empty or holds a dlprof-lite report
  (:func:`check_target`).
- Staging, atomic files and sweeping are :mod:`dlprof_lite.staging`'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path

import pandas as pd

from dlprof_lite.errors import OutputError
from dlprof_lite.forked import Forked, worth_forking
from dlprof_lite.render.writers import WRITERS, Table
from dlprof_lite.report.model import TABLES, WINDOWED, Report
from dlprof_lite.rules.inputs import INPUT_SUFFIXES
from dlprof_lite.rules.outputs import TABLE_FORMATS
from dlprof_lite.staging import atomic_write, unique_dir
from dlprof_lite.staging import staged_folder as _staged_folder

REPORT_SUFFIX = ".dlprof"
REPORT_MARKERS = ("summary.json", "summary.csv")
GRAPH_FILE = "layers.dot"
PAGE_FILE = "report.html"
TRACE_FILE = "trace.json"


def report_stem(path: Path) -> str:
    """``run.nsys-rep.sqlite`` -> ``run``: the input name without its nsys suffixes."""
    name = path.name
    while suffix := next((s for s in INPUT_SUFFIXES if name.lower().endswith(s)), ""):
        name = name[: -len(suffix)]
    return name or "report"


def default_report_dir(path: Path) -> Path:
    """A new folder next to the input: ``<stem>.dlprof`` or the next free ``-N`` name."""
    return unique_dir(path.absolute().parent, report_stem(path) + REPORT_SUFFIX)


def check_target(target: Path, *, force: bool) -> None:
    """Refuse a target that exists (without ``force``) or that ``force`` must not replace."""
    if not os.path.lexists(target):
        return
    if not force:
        raise OutputError(f"{target} already exists; pass --force (force=True) to replace it")
    if target.is_symlink() or not target.is_dir():
        raise OutputError(f"{target} exists and is not a folder; refusing to replace it")
    entries = [p.name for p in target.iterdir()]
    if entries and not any(m in entries for m in REPORT_MARKERS):
        raise OutputError(
            f"{target} is not a dlprof-lite report folder (no summary.json or summary.csv); "
            "refusing to replace it even with --force"
        )


def staged_folder(target: Path, *, force: bool = False) -> AbstractContextManager[Path]:
    """A staging folder that becomes the report folder ``target`` when complete
    (:func:`dlprof_lite.staging.staged_folder`, refusing what :func:`check_target` does)."""
    return _staged_folder(target, _check, force=force)


def _check(target: Path, force: bool) -> None:
    check_target(target, force=force)


def report_tables(report: Report) -> list[Table]:
    tables = []
    # The tables cut to the analysed window say which (the summary's window_* fields).
    window = {k: v for k, v in report.summary.window.items() if k.startswith("window_")}
    for name in TABLES:
        document = report.summary.document() if name == "summary" else None
        cut = window if name in WINDOWED else None
        if name == "timeline":  # its one iteration, not the tables' window
            cut = {"timeline_iteration": report.summary.window.timeline_iteration}
        tables.append(Table(name, report.table(name), document, window=cut))
    return tables


def write_tables(tables: Iterable[Table], folder: Path, formats: Iterable[str]) -> list[Path]:
    """Write each table in each format into ``folder`` (one atomic file each)."""
    written = []
    for table in tables:
        for fmt in formats:
            writer = WRITERS[fmt]
            path = folder / f"{table.stem}.{writer.suffix}"
            atomic_write(path, writer.render(table))
            written.append(path)
    return written


def write_graph(report: Report, folder: Path) -> Path:
    """``layers.dot``: the module tree with each layer's time per step (render/graph.py),
    whatever the formats (it is no table)."""
    from dlprof_lite.render.graph import report_graph

    path = folder / GRAPH_FILE
    atomic_write(path, report_graph(report))
    return path


def write_page(report: Report, folder: Path) -> Path:
    """``report.html``: the one self-contained page of the report (render/page/html.py)."""
    from dlprof_lite.render.page.html import report_page

    path = folder / PAGE_FILE
    atomic_write(path, report_page(report))
    return path


def write_trace(report: Report, folder: Path, events: pd.DataFrame | None = None) -> Path:
    """``trace.json`` (Chrome trace-event format) of ``events``, by default the report's
    timeline (its one steady iteration)."""
    from dlprof_lite.render.trace import trace_text

    chosen = report.timeline if events is None else events
    iterations = sorted(int(i) for i in pd.unique(chosen["iteration"].dropna()))
    meta: dict[str, object] = {"source": report.summary.system.source, "iterations": iterations}
    if len(chosen) and not iterations:  # no iterations: the session's busiest stretch
        meta["stretch_ns"] = [int(chosen["start_ns"].min()), int(chosen["end_ns"].max())]
    path = folder / TRACE_FILE
    critical = report.critical_path if events is None else None  # the timeline's iteration's
    atomic_write(path, trace_text(chosen, metadata=meta, critical=critical))
    return path


def summary_formats(formats: Iterable[str]) -> list[str]:
    """The table formats among ``formats`` for a combined summary (of several inputs or
    ranks), CSV when none is chosen: such a table is always written."""
    return [f for f in formats if f in TABLE_FORMATS] or ["csv"]


def write_contents(
    report: Report, folder: Path, formats: Iterable[str], *, trace: pd.DataFrame | None = None,
    parallel: bool = False,
) -> None:  # fmt: skip
    """Everything a report folder holds: the tables in each table format, ``layers.dot``,
    ``trace.json`` (of ``trace``'s events, else the report's timeline) and, with ``html``
    among the formats, ``report.html`` (``parallel``: written by a forked copy meanwhile
    where it may, forked.py)."""
    chosen = tuple(formats)
    page = "html" in chosen
    totals = report.summary.totals
    ops = sum(int(n or 0) for n in (totals.kernel_count, totals.memcpy_count,
                                    totals.memset_count))  # fmt: skip
    with Forked(lambda: write_page(report, folder) if page else None,
                fork=parallel and page and worth_forking(ops)) as writing:  # fmt: skip
        write_tables(report_tables(report), folder, [f for f in chosen if f in TABLE_FORMATS])
        write_graph(report, folder)
        write_trace(report, folder, trace)
        writing.result()


def write_report(
    report: Report, target: Path, formats: Iterable[str], *, force: bool,
    trace: pd.DataFrame | None = None,
) -> Path:  # fmt: skip
    """Write a complete report folder at ``target`` (staged, then renamed into place)."""
    with staged_folder(target, force=force) as stage:
        write_contents(report, stage, formats, trace=trace)
    return target.absolute()
