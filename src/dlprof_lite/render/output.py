"""Where reports go, and how they get there without ever leaving half a report behind.

- A default report folder is a new name next to the input (``run.dlprof``, ``run.dlprof-2``,
  ...); an existing folder is never overwritten unless the user passed ``--force``.
- A report is written into a hidden staging folder beside its target and renamed into place
  when complete; on any error the staging folder is removed. With ``--force`` the old folder
  is set aside, the new one renamed in, and only then is the old one deleted.
- Every file is written to a temporary name in its own folder, then ``os.replace``-d.
- ``--force`` only replaces a folder that is empty or holds a dlprof-lite report.
- A run killed hard (SIGKILL, a crash, power loss) leaves its staging folder or temporary
  file behind: the next report written into the same parent sweeps leftovers of exactly our
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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from dlprof_lite.errors import OutputError
from dlprof_lite.render.writers import WRITERS, Table
from dlprof_lite.report.model import TABLES, WINDOWED, Report
from dlprof_lite.rules.inputs import INPUT_SUFFIXES
from dlprof_lite.rules.outputs import TABLE_FORMATS

REPORT_SUFFIX = ".dlprof"
REPORT_MARKERS = ("summary.json", "summary.csv")
GRAPH_FILE = "layers.dot"
PAGE_FILE = "report.html"
TRACE_FILE = "trace.json"
MAX_NAMES = 10_000
# Our staging names (_token: 10 hex digits): .NAME.<token>.partial and .NAME.<token>.old
# folders, .NAME.<token>.tmp files. Nothing else is ever swept.
_STAGING = re.compile(r"^\..+\.[0-9a-f]{10}\.(partial|old|tmp)$")
# A leftover is swept only this long after it last changed, and a staging folder only when
# no run holds its lock: a long profiling run writes nothing into its folder for hours.
STALE_AFTER_S = 3600.0


def report_stem(path: Path) -> str:
    """``run.nsys-rep.sqlite`` -> ``run``: the input name without its nsys suffixes."""
    name = path.name
    while suffix := next((s for s in INPUT_SUFFIXES if name.lower().endswith(s)), ""):
        name = name[: -len(suffix)]
    return name or "report"


def unique_dir(parent: Path, base: str) -> Path:
    """``parent/base``, else ``parent/base-2``, ``-3``, ...: the first name not taken."""
    for n in range(1, MAX_NAMES + 1):
        candidate = parent / (base if n == 1 else f"{base}-{n}")
        if not os.path.lexists(candidate):
            return candidate
    raise OutputError(f"{parent}: no free name for a new report folder {base}-N")


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
def staged_folder(target: Path, *, force: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder; on success it becomes ``target``, on error it goes.

    The folder is locked while in use (see :func:`sweep_stale`, run here first)."""
    target = target.absolute()
    check_target(target, force=force)
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
        _commit(stage, target, force=force)
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


def _commit(stage: Path, target: Path, *, force: bool) -> None:
    check_target(target, force=force)  # again: the target may have appeared meanwhile
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
    meta: dict[str, object] = {"source": report.summary.get("source"), "iterations": iterations}
    if len(chosen) and not iterations:  # no iterations: the session's busiest stretch
        meta["stretch_ns"] = [int(chosen["start_ns"].min()), int(chosen["end_ns"].max())]
    path = folder / TRACE_FILE
    atomic_write(path, trace_text(chosen, metadata=meta))
    return path


def summary_formats(formats: Iterable[str]) -> list[str]:
    """The table formats among ``formats`` for a combined summary (of several inputs or
    ranks), CSV when none is chosen: such a table is always written."""
    return [f for f in formats if f in TABLE_FORMATS] or ["csv"]


def write_contents(
    report: Report, folder: Path, formats: Iterable[str], *, trace: pd.DataFrame | None = None
) -> None:
    """Everything a report folder holds: the tables in each table format, ``layers.dot``,
    ``trace.json`` (of ``trace``'s events, else the report's timeline) and, with ``html``
    among the formats, ``report.html``."""
    chosen = tuple(formats)
    write_tables(report_tables(report), folder, [f for f in chosen if f in TABLE_FORMATS])
    write_graph(report, folder)
    write_trace(report, folder, trace)
    if "html" in chosen:
        write_page(report, folder)


def write_report(
    report: Report, target: Path, formats: Iterable[str], *, force: bool,
    trace: pd.DataFrame | None = None,
) -> Path:  # fmt: skip
    """Write a complete report folder at ``target`` (staged, then renamed into place)."""
    with staged_folder(target, force=force) as stage:
        write_contents(report, stage, formats, trace=trace)
    return target.absolute()
