"""One analysed run as the run store keeps it and ``compare`` reads it: a :class:`RunRecord`.

Place in the pipeline: store (right of report). A record is built from a finished
:class:`~dlprof_lite.report.build.Report` plus the :class:`RunContext` only the command line
knows (the command, its folder, the git state of the script, the tag); the store writes it and
reads it back equal; ``compare`` reads step times, phases, idle causes, layers and kernels from
it and never needs to know how the Report was computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.model import analysed
from dlprof_lite.report.summary_types import Summary
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, cause_column

if TYPE_CHECKING:
    from dlprof_lite.report.model import Report


@dataclass(frozen=True)
class RunContext:
    """What the command line knows of a run and the profile does not.

    ``command``: the profiled program and its arguments (empty for ``analyze`` of an existing
    export); ``group``: the ``--repeat`` group the run belongs to (its runs are pooled by
    ``compare``), with ``repeat_index`` its 0-based place in the group.
    """

    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    tag: str | None = None
    group: str | None = None
    repeat_index: int | None = None
    command: tuple[str, ...] = ()
    cwd: str | None = None
    script: str | None = None
    host: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    report_dir: str | None = None
    tool_version: str | None = None


@dataclass(frozen=True)
class RunRecord:
    """A run: its context, its summary and the report tables of its analysed window.

    ``iterations`` is the report's whole iterations table (``in_window``/``warmup`` say which
    rows are the analysed steps); ``layers`` and ``kernels`` are the report's tables (they
    already cover the analysed window). ``run_id`` is the store's id, None when not stored.
    """

    context: RunContext
    summary: Summary
    iterations: pd.DataFrame
    layers: pd.DataFrame
    kernels: pd.DataFrame
    run_id: int | None = None

    @classmethod
    def from_report(cls, report: Report, context: RunContext) -> RunRecord:
        return cls(context, report.summary, report.iterations, report.layers, report.kernels)

    def analysed(self) -> pd.DataFrame:
        """The iterations rows of the analysed steps (in the window, not warm-up)."""
        return analysed(self.iterations)

    def step_ns(self) -> np.ndarray:
        """Wall time of each analysed step, ns (float64), in iteration order."""
        return self.analysed()["wall_ns"].to_numpy(dtype=np.float64)

    def phases(self, stat: str = "mean") -> pd.DataFrame:
        """Each phase per analysed step, as the mean (or ``stat="median"``) over the steps:
        ``phase``, ``gpu_ns`` (device time running the phase's GPU ops), ``wall_ns`` (host
        time in the phase's ranges; ``other``: outside every phase), ``host_gap_ns``
        (host-bound GPU gaps before the phase's ops)."""
        if stat not in ("mean", "median"):
            raise ValueError(f"stat must be mean or median, not {stat!r}")
        steps = self.analysed()
        rows = []
        for phase in PHASE_COLUMNS:
            rows.append({
                "phase": phase,
                "gpu_ns": _stat(steps, f"phase_{phase}_ns", stat),
                "wall_ns": _stat(steps, f"{phase}_wall_ns", stat),
                "host_gap_ns": _stat(steps, f"phase_{phase}_host_gap_ns", stat),
            })  # fmt: skip
        return pd.DataFrame(rows, columns=["phase", "gpu_ns", "wall_ns", "host_gap_ns"])

    def idle(self, stat: str = "mean") -> pd.DataFrame:
        """Each idle cause (:data:`~dlprof_lite.rules.idle.DEVICE_CAUSES`) per analysed step,
        as the mean (or ``stat="median"``) over the steps: ``cause``, ``device_ns`` (device
        idle time booked to it, summed over the GPU timelines: ``idle_<cause>_ns``),
        ``host_ns`` (the main thread's step time in it: ``host_<cause>_ns``; None for a cause
        the host never has, such as ``queued``). No rows for a run recorded before the idle
        partition (its iterations lack the columns, or, read back from the store, hold them
        empty), nor for one without analysed steps: 0 would claim a change."""
        if stat not in ("mean", "median"):
            raise ValueError(f"stat must be mean or median, not {stat!r}")
        steps = self.analysed()
        rows = [{
            "cause": cause,
            "device_ns": _stat(steps, cause_column(DEVICE, cause), stat),
            "host_ns": _stat(steps, cause_column(HOST, cause), stat),  # None: no such column
        } for cause in DEVICE_CAUSES]  # fmt: skip
        if all(row["device_ns"] is None for row in rows):
            rows = []
        return pd.DataFrame(rows, columns=["cause", "device_ns", "host_ns"])


def _stat(frame: pd.DataFrame, column: str, stat: str) -> float | None:
    if frame.empty or column not in frame:
        return None
    values = pd.to_numeric(frame[column], errors="coerce").dropna()
    if values.empty:
        return None
    return float(values.median() if stat == "median" else values.mean())
