"""One side of a comparison: what the user named and the runs it pools.

Place in the pipeline: compare. A side is a report folder, a stored run id, a tag (all its
runs pooled) or an export analysed first; resolving the name is the command line's business
(:mod:`dlprof_lite.compare.resolve`), the statistics only ever see :class:`Side`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlprof_lite.store.record import RunRecord


@dataclass(frozen=True)
class Side:
    """``label``: as the user named it (shown in every table); ``runs``: one or more."""

    label: str
    runs: tuple[RunRecord, ...]

    def step_ns(self) -> np.ndarray:
        """Every analysed step of every run, pooled, ns."""
        parts = [run.step_ns() for run in self.runs]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float64)
