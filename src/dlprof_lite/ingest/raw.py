"""What the reader hands to the analysis steps: base frames, before any correlation."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from dlprof_lite.ingest.columns import check_frame
from dlprof_lite.ingest.profile import Meta

# Launch columns are filled by correlate.attach_launches, not by the reader.
LAUNCH_COLUMNS = ("tid", "api_name", "api_start_ns", "api_end_ns")


@dataclass(frozen=True)
class RawExport:
    """Base columns of each table, read and decoded; nothing derived.

    ``kernels`` and ``memops`` hold every base column except :data:`LAUNCH_COLUMNS`.
    """

    kernels: pd.DataFrame
    memops: pd.DataFrame
    api: pd.DataFrame
    nvtx: pd.DataFrame
    marks: pd.DataFrame
    gpus: pd.DataFrame
    meta: Meta

    def __post_init__(self) -> None:
        check_frame(self.api, "api", derived=False)
        check_frame(self.nvtx, "nvtx_events", derived=False)
        check_frame(self.marks, "marks", derived=False)
        check_frame(self.gpus, "gpus", derived=False)
