"""What-if from a report folder or an export: its profile read again, its steps' graph
replayed with chosen durations scaled (report/critical/whatif.py).

A report folder holds tables, not the events a replay needs: the profile it was analysed
from (``summary.source``) is read again with the same key range and iteration window.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from dlprof_lite.errors import InputError

if TYPE_CHECKING:
    from dlprof_lite.report.critical.prediction import Prediction
    from dlprof_lite.report.model import Report


def predict_from(
    target: str | Path | Report,
    scales: Sequence[str],
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    nsys: str | None = None,
) -> Prediction:
    """The prediction of ``scales`` (``layer=conv2:0.5`` ...) for a report (a folder or a
    :class:`Report`) or an nsys export; the options choose the steps of an export."""
    from dlprof_lite.ingest.load import load
    from dlprof_lite.ingest.selection import StepSelection
    from dlprof_lite.report.critical.graph import build_graph
    from dlprof_lite.report.critical.prediction import Scale
    from dlprof_lite.report.critical.whatif import predict
    from dlprof_lite.report.model import Report

    parsed = [Scale.parse(s) for s in scales]
    if not parsed:
        raise InputError("nothing to change: give at least one --scale KIND=WHAT:FACTOR")
    if isinstance(target, Report) or Path(target).is_dir():
        report = target if isinstance(target, Report) else Report.open(target)
        folder = None if isinstance(target, Report) else Path(target)
        source = _source(report, folder)
        w = report.summary.window  # the same steps: a key range the user gave, the window
        given = w.key_range if w.key_range_source == "key-range" else None
        selection = StepSelection(given, w.window_iter_start, w.window_iter_stop)
        pids = _own_rank(report)
    else:
        source = Path(target)
        selection = StepSelection(key_range, iter_start, iter_stop)
        pids = None
    profile = load(source, steps=selection, nsys=nsys, pids=pids)
    meta = profile.meta
    graph = build_graph(profile.kernels, profile.memops, profile.api, profile.ranges,
                        profile.iterations, span=(meta.session_start_ns, meta.session_end_ns))
    first = profile.kernels[["name", "short_name"]].drop_duplicates("name")
    short = dict(zip(first["name"].astype(str), first["short_name"].astype(str), strict=True))
    return predict(graph, parsed, pd.Index([short.get(n, n) for n in graph.names.astype(str)]))


def _own_rank(report: Report) -> list[int] | None:
    """A rank's own report (one row in its ranks table) replays that rank's process only:
    its export holds every rank's."""
    ranks = report.ranks
    if len(ranks) != 1 or ranks["pid"].isna().all():
        return None
    return [int(ranks["pid"].iloc[0])]


def _source(report: Report, folder: Path | None) -> Path:
    """The export the report was analysed from: as recorded, else beside the folder."""
    recorded = report.summary.system.source
    if not recorded:
        raise InputError("the report does not name the profile it was analysed from; give "
                         "the export instead: dlprof-lite whatif PROFILE.sqlite --scale ...")
    path = Path(recorded)
    tries = [path]
    if folder is not None and not path.is_absolute():
        tries += [folder / path, folder.parent / path, folder / path.name]
    for p in tries:
        if p.is_file():
            return p
    raise InputError(f"the report's profile {recorded} is not there any more; give the export "
                     "instead: dlprof-lite whatif PROFILE.sqlite --scale ...")
