"""One report per rank of a multi-process profile (``torchrun``, ``mpirun``, several workers).

nsys follows a launcher's children, so one export holds every rank. Each rank's report is
analysed from the same read frames, filtered to that rank's process before any analysis step
(:func:`dlprof_lite.ingest.load.enrich`), and written as a normal report folder ``rank<R>/``
named by the ``RANK`` the process recorded (``pid<P>/`` when no rank was recorded), beside
the all-ranks report, with a cross-rank ``ranks_summary`` table (one summary row per rank,
the batch ``summary`` table's columns; ``ranks.*`` is the report's own per-rank table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from dlprof_lite.render.writers import Table
    from dlprof_lite.report.model import Report
    from dlprof_lite.report.summary_types import Scalar

RANKS_STEM = "ranks_summary"  # ranks_summary.csv / .json: the cross-rank summary rows


@dataclass(frozen=True)
class RankProcess:
    """One process of the run: its rank (None when it recorded none) and pid."""

    rank: int | None
    pid: int

    @property
    def folder(self) -> str:
        """Its report folder's name inside the run's report folder."""
        return f"rank{self.rank}" if self.rank is not None else f"pid{self.pid}"


@dataclass(frozen=True)
class RankReport:
    """One rank's report, and the trace events of ``--trace-iterations`` when asked."""

    process: RankProcess
    report: Report
    trace: pd.DataFrame | None = None

    def row(self, parent: Path) -> dict[str, Scalar]:
        """Its summary row in the cross-rank table, naming its folder inside ``parent``."""
        return {**self.report.summary.row(), "report_dir": str(parent / self.process.folder),
                "error": None}  # fmt: skip


def rank_processes(facts: pd.DataFrame, ranges: pd.DataFrame) -> list[RankProcess]:
    """The processes to report one by one: those that recorded a rank (two or more), else
    those that each ran the annotation's iteration ranges (two or more); else none.
    ``facts``, ``ranges``: a profile's (``ranges``: or the raw NVTX events, same columns)."""
    from dlprof_lite.report.run_facts import read_run_facts

    ranks = dict(read_run_facts(facts).ranks)
    stepping = _iterating_pids(ranges)
    if len(ranks) >= 2:
        # A recorded rank whose process ran no iteration (it crashed early) still gets its
        # report: its empty steps are what the user needs to see.
        return sorted((RankProcess(r, p) for p, r in ranks.items()), key=lambda x: x.rank or 0)
    if len(stepping) >= 2:
        return [RankProcess(ranks.get(p), p) for p in stepping]
    return []


def _iterating_pids(nvtx: pd.DataFrame) -> list[int]:
    """The pids with at least one iteration range of the annotation's domain."""
    import pandas as pd

    from dlprof_lite.rules.names import DOMAIN, ITERATION

    # Compared as categories (codes), not as a string per range.
    named = (nvtx["name"] == ITERATION).to_numpy(dtype=bool)
    ours = named & (nvtx["domain"] == DOMAIN).to_numpy(dtype=bool)
    return sorted(int(p) for p in pd.unique(nvtx["pid"].to_numpy()[ours]))


def ranks_table_rows(reports: Sequence[RankReport], parent: Path) -> list[dict[str, Scalar]]:
    return [r.row(parent) for r in reports]


def write_ranks(
    reports: Sequence[RankReport], folder: Path, formats: Sequence[str], final: Path
) -> None:
    """Each rank's report folder inside ``folder`` and the cross-rank summary table;
    ``final``: where ``folder`` will be once renamed (the table names the final folders)."""
    from dlprof_lite.render import output as files

    if not reports:
        return
    for item in reports:
        (folder / item.process.folder).mkdir()
        files.write_contents(item.report, folder / item.process.folder, formats,
                             trace=item.trace)  # fmt: skip
    table = ranks_summary_table(ranks_table_rows(reports, final))
    files.write_tables([table], folder, files.summary_formats(formats))


def ranks_summary_table(rows: Sequence[Mapping[str, object]]) -> Table:
    """One summary row per rank: the batch summary's table (the columns of summary.*),
    written as ranks_summary.*."""
    from dlprof_lite.render.writers import combined_table

    return replace(combined_table(rows), file=RANKS_STEM)


def rank_lines(reports: Sequence[RankReport], parent: Path) -> list[str]:
    """The console's cross-rank view: per rank its steps, median step time, data-loading
    time per step (synchronous ranks share one step time: a slow rank shows in its data or
    compute time, the others in their waiting) and folder."""
    lines = []
    for item in reports:
        row = item.report.summary.row()
        steps = row.get("iterations_count")
        who = (f"rank {item.process.rank}" if item.process.rank is not None
               else f"pid {item.process.pid}")  # fmt: skip
        lines.append(f"  {who} (pid {item.process.pid}): {steps or 0} steps, median step "
                     f"{as_ms(row.get('iterations_median_ns'))}, data "
                     f"{as_ms(row.get('step_data_wall_ns'))}/step: "
                     f"{parent / item.process.folder}")  # fmt: skip
    return lines


def as_ms(ns: object) -> str:
    """Nanoseconds as milliseconds for the console, ``n/a`` when not a number."""
    from dlprof_lite.durations import in_ms

    return in_ms(float(ns)) if isinstance(ns, int | float) else "n/a"
