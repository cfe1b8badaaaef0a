"""dlprof-lite: where a training step's GPU time goes, layer by layer, from Nsight Systems.

The notebook API::

    import dlprof_lite
    report = dlprof_lite.analyze("run.nsys-rep")   # a Report: summary + tables
    report.save("run.dlprof")                      # the folder the command line writes
    again = dlprof_lite.Report.open("run.dlprof")  # the same Report, read back
    profile = dlprof_lite.load("run.sqlite")       # the raw, enriched frames (a Profile)
    report = dlprof_lite.build_report(profile)     # ... and its Report
    ranks = dlprof_lite.analyze_ranks("ddp.nsys-rep")  # one Report per rank: {"rank0": ...}
    again.what_if("layer=conv2:0.5")               # the predicted step time, conv2 twice as fast
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dlprof_lite.ingest.profile import Profile
    from dlprof_lite.report.model import Report
    from dlprof_lite.report.summary_types import Summary

__all__ = ["Profile", "Report", "Summary", "__version__", "analyze", "analyze_ranks",
           "build_report", "load", "open_report"]  # fmt: skip

# The types are imported on first use: ``import dlprof_lite`` (which the annotation layer in
# a training script does) must not import pandas.
_TYPES = {
    "Profile": "dlprof_lite.ingest.profile",
    "Report": "dlprof_lite.report.model",
    "Summary": "dlprof_lite.report.summary_types",
}


def __getattr__(name: str) -> object:
    if name in _TYPES:
        import importlib

        return getattr(importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'dlprof_lite' has no attribute {name!r}")


def load(
    path: str | Path,
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    nsys: str | None = None,
) -> Profile:
    """Read an nsys ``.sqlite`` export (or ``.nsys-rep``, exported by ``nsys``: its path,
    default from PATH) into an analysed :class:`Profile`."""
    from dlprof_lite.ingest.load import load as _load
    from dlprof_lite.ingest.selection import StepSelection

    return _load(path, steps=StepSelection(key_range, iter_start, iter_stop), nsys=nsys)


def analyze(
    path: str | Path,
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    all_iterations: bool = False,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    nsys: str | None = None,
) -> Report:
    """Analyse one nsys export (or report) into a :class:`Report`, as ``dlprof-lite analyze``
    does, without writing anything (``Report.save`` writes the folder). The kernels, ranges
    and layers tables cover the analysed iterations (``iter_start``/``iter_stop``, warm-up
    left out); ``all_iterations`` makes them whole-run totals. ``steps_per_epoch`` and
    ``epochs`` set the projected training time (default: the DataLoader's length, 1);
    ``nsys``: the nsys that exports an ``.nsys-rep`` input (default: from PATH)."""
    from dlprof_lite.ingest.selection import StepSelection
    from dlprof_lite.pipeline import AnalyzeOptions, analyze_profile

    steps = StepSelection(key_range, iter_start, iter_stop, all_iterations)
    options = AnalyzeOptions(steps=steps, steps_per_epoch=steps_per_epoch, epochs=epochs,
                             nsys=nsys)  # fmt: skip
    return analyze_profile(Path(path), options)


def analyze_ranks(
    path: str | Path,
    *,
    key_range: str | None = None,
    iter_start: int | None = None,
    iter_stop: int | None = None,
    all_iterations: bool = False,
    nsys: str | None = None,
) -> dict[str, Report]:
    """One Report per rank of a multi-process profile (a ``torchrun`` run), as the command
    line writes them into ``rank0/``, ``rank1/``, ...: keyed by that folder name (``pid<N>``
    for a process that recorded no rank). Empty for a profile of one process. A rank that
    cannot be analysed alone is left out with a warning (``warnings.warn``)."""
    import warnings

    from dlprof_lite.ingest.selection import StepSelection
    from dlprof_lite.pipeline import AnalyzeOptions
    from dlprof_lite.pipeline import analyze_ranks as _ranks

    steps = StepSelection(key_range, iter_start, iter_stop, all_iterations)
    found, problems = _ranks(Path(path), AnalyzeOptions(steps=steps, nsys=nsys))
    for problem in problems:
        warnings.warn(problem, stacklevel=2)
    return {r.process.folder: r.report for r in found}


def build_report(
    profile: Profile,
    *,
    all_iterations: bool = False,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
) -> Report:
    """The Report of a :class:`Profile` (``load``'s), as ``analyze`` builds it."""
    from dlprof_lite.report.build import build_report as _build
    from dlprof_lite.report.steps.projection import ProjectionInput

    return _build(profile, all_iterations=all_iterations,
                  projection=ProjectionInput(steps_per_epoch, epochs))  # fmt: skip


def open_report(folder: str | Path) -> Report:
    """Read a report folder written by ``Report.save`` or the command line back."""
    from dlprof_lite.render.reader import open_report as _open

    return _open(folder)
