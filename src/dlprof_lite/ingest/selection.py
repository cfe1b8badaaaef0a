"""Which steps a report analyses, as the user chose them: one frozen value for every stage.

Light on purpose (no pandas): the command line and the pipeline build it before any
analysis starts, and a process pool pickles it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepSelection:
    """Which steps a report analyses, as the user chose them: ``key_range``, a regular
    expression naming the NVTX range whose instances are the steps (DLProf's key node);
    ``iter_start``/``iter_stop``, the analysed iterations (stop exclusive; earlier ones are
    warm-up); ``all_iterations``: the kernels, ranges and layers tables cover the whole run.
    The default leaves every choice to the rules (ingest/iterations.py, report/steps/window.py)."""

    key_range: str | None = None
    iter_start: int | None = None
    iter_stop: int | None = None
    all_iterations: bool = False

    @property
    def bounded(self) -> bool:
        """The user gave an iteration bound."""
        return self.iter_start is not None or self.iter_stop is not None


EVERY_STEP_BY_RULE = StepSelection()
