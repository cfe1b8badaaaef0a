"""What the user named on each side of ``compare``, resolved to a :class:`Side`.

Place in the pipeline: compare. A name is tried as, in this order:

1. an existing path: a report folder (``summary.json`` in it); a folder of report folders
   (``--repeat`` writes one: its runs are pooled); an nsys export (``.sqlite``, ``.nsys-rep``,
   ``.qdrep``), analysed first, in memory;
2. a run id of the run store (``12`` or ``#12``);
3. a tag or ``--repeat`` group of the run store: all its runs, pooled.

Anything else is one clear error naming what was tried.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dlprof_lite.compare.side import Side
from dlprof_lite.errors import InputError
from dlprof_lite.render.output import REPORT_MARKERS
from dlprof_lite.rules.inputs import INPUT_SUFFIXES
from dlprof_lite.store.record import RunContext, RunRecord

if TYPE_CHECKING:
    from dlprof_lite.report.model import Report
    from dlprof_lite.store.database import RunStore

RUN_ID_RE = re.compile(r"^#?(\d+)$")
MAX_INNER = 10_000  # entries of a folder of report folders (render/output.py's MAX_NAMES)
# The store is opened only when a name needs it (a folder-only compare works without one).
StoreOpener = Callable[[], "RunStore"]


def is_report_folder(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in REPORT_MARKERS)


def record_of_report(report: Report, folder: Path | None) -> RunRecord:
    """A record of a report read from a folder or analysed now: what the report knows."""
    command = report.summary.system.command
    context = RunContext(
        command=tuple(shlex.split(command)) if isinstance(command, str) and command else (),
        report_dir=str(folder) if folder is not None else None,
    )
    return RunRecord.from_report(report, context)


def _from_path(name: str, path: Path, nsys: str | None = None) -> Side:
    from dlprof_lite import analyze, open_report

    if is_report_folder(path):
        return Side(name, (record_of_report(open_report(path), path),))
    if path.is_dir():
        inner = _inner_reports(name, path)
        if not inner:
            raise InputError(f"{name}: a folder with no report in it (no summary.json)")
        return Side(name, tuple(record_of_report(open_report(p), p) for p in inner))
    if path.name.lower().endswith(INPUT_SUFFIXES):
        return Side(name, (record_of_report(analyze(path, nsys=nsys), None),))
    raise InputError(f"{name}: not a report folder or an nsys export (.sqlite, .nsys-rep)")


def _inner_reports(name: str, path: Path) -> list[Path]:
    """The report folders inside ``path`` (a ``--repeat`` folder), at most
    :data:`MAX_INNER`; a symbolic link to one is refused (only what is inside is read)."""
    found = []
    for count, inner in enumerate(path.iterdir(), 1):
        if count > MAX_INNER:
            raise InputError(f"{name}: more than {MAX_INNER} entries, more than a --repeat "
                             "folder holds")  # fmt: skip
        if is_report_folder(inner):
            if inner.is_symlink():
                raise InputError(f"{inner}: a symbolic link to a report folder; only report "
                                 "folders inside the folder are read")  # fmt: skip
            found.append(inner)
    return sorted(found)


def resolve(name: str, store: StoreOpener, nsys: str | None = None) -> Side:
    """The side ``name`` stands for (see the module docstring); ``nsys`` exports an
    ``.nsys-rep`` side (default: from PATH)."""
    path = Path(name)
    if path.exists():
        return _from_path(name, path, nsys)
    by_id = RUN_ID_RE.match(name)
    if by_id:
        return Side(name, (store().get(int(by_id.group(1))),))
    runs = store().runs_with_tag(name)
    if not runs:
        raise InputError(
            f"{name}: no report folder, export, run id or tag of that name "
            "(see 'dlprof-lite runs')"
        )
    return Side(name, tuple(runs))
