"""One input through the pipeline: read and analyse (ingest), tabulate (report), write.

The command line (:mod:`dlprof_lite.cli`) and the process pool or Dask cluster of
:mod:`dlprof_lite.batch` call the same functions here; :func:`analyze_row` is top-level and
takes plain values so that a worker process can be handed it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlprof_lite.report.build import Report
    from dlprof_lite.report.summary_types import Scalar

FORMATS = ("csv", "json")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class AnalyzeOptions:
    """What :func:`analyze_one` needs; plain values so a process pool can pickle it."""

    formats: tuple[str, ...] = FORMATS
    force: bool = False
    key_range: str | None = None
    iter_start: int | None = None
    iter_stop: int | None = None


def analyze_profile(
    path: Path, options: AnalyzeOptions, progress: Progress | None = None
) -> Report:
    """Read, analyse and tabulate one input (ingest, then report); returns a Report."""
    from dlprof_lite.ingest.load import load
    from dlprof_lite.report.build import build_report

    profile = load(
        path,
        key_range=options.key_range,
        iter_start=options.iter_start,
        iter_stop=options.iter_stop,
        **({"progress": progress} if progress is not None else {}),
    )
    if progress is not None:
        progress("writing reports")
    return build_report(profile)


@dataclass(frozen=True)
class PipelineResult:
    """One input's report and the folder it was written to."""

    source: str
    report_dir: Path
    report: Report

    def row(self) -> dict[str, Scalar]:
        """The flat summary row of the combined ``summary.csv``, with its report folder."""
        return {**self.report.summary.row(), "report_dir": str(self.report_dir), "error": None}


def analyze_one(
    path: Path, out_dir: Path, options: AnalyzeOptions, progress: Progress | None = None
) -> PipelineResult:
    """Analyse one input and write its complete report folder at ``out_dir``.

    Top-level and free of open resources so that a process pool can call it.
    """
    from dlprof_lite.report.output import write_report

    report = analyze_profile(Path(path), options, progress)
    final = write_report(report, Path(out_dir), options.formats, force=options.force)
    return PipelineResult(str(path), final, report)


def analyze_row(path: Path, out_dir: Path, options: AnalyzeOptions) -> dict[str, Scalar]:
    """:func:`analyze_one` for a worker process: returns only the summary row (picklable)."""
    return analyze_one(path, out_dir, options).row()


def has_annotation(report: Report) -> bool:
    """Whether any range of the annotation layer's domain reached the analysed profile."""
    from dlprof_lite.annotate.names import DOMAIN

    return bool((report.ranges["domain"].astype(str) == DOMAIN).any())
