"""dlprof-lite: where a training step's GPU time goes, layer by layer, from Nsight Systems.

The notebook API::

    import dlprof_lite
    report = dlprof_lite.analyze("run.nsys-rep")   # a Report: summary + tables
    report.save("run.dlprof")                      # the folder the command line writes
    again = dlprof_lite.open_report("run.dlprof")  # the same Report, read back
    profile = dlprof_lite.load("run.sqlite")       # the raw, enriched frames (a Profile)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dlprof_lite.ingest.profile import Profile
    from dlprof_lite.report.build import Report

__all__ = ["__version__", "analyze", "load", "open_report"]


def load(
    path: str | Path,
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
) -> Profile:
    """Read an nsys ``.sqlite`` export (or ``.nsys-rep``) into an analysed :class:`Profile`."""
    from dlprof_lite.ingest.load import load as _load

    return _load(path, key_range=key_range, iter_start=iter_start, iter_stop=iter_stop)


def analyze(
    path: str | Path,
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
) -> Report:
    """Analyse one nsys export (or report) into a :class:`Report`, as ``dlprof-lite analyze``
    does, without writing anything (``Report.save`` writes the folder)."""
    from dlprof_lite.pipeline import AnalyzeOptions, analyze_profile

    options = AnalyzeOptions(key_range=key_range, iter_start=iter_start, iter_stop=iter_stop)
    return analyze_profile(Path(path), options)


def open_report(folder: str | Path) -> Report:
    """Read a report folder written by ``Report.save`` or the command line back."""
    from dlprof_lite.report.reader import open_report as _open

    return _open(folder)
