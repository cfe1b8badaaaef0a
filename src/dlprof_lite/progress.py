"""Progress on stderr for long work: a bar over the pipeline's stages, one per input.

Silent unless stderr is a terminal, and always silent with ``--quiet``; the reports and
the console summary never depend on it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

# The stages ``ingest.load`` announces, then the report stage's own.
STAGES = ("reading", "nesting NVTX ranges", "correlating", "analysing", "writing reports")


class StageProgress(Protocol):
    def __call__(self, stage: str) -> None: ...


@contextmanager
def stage_progress(label: str, *, quiet: bool = False) -> Iterator[StageProgress | None]:
    """Yield a callback that advances a bar to the named stage (``None`` when silent)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=len(STAGES))

        def advance(stage: str) -> None:
            done = STAGES.index(stage) if stage in STAGES else 0
            # Drawn at once: a stage shorter than the refresh interval is still shown.
            bar.update(task, completed=done, description=f"{label}: {stage}", refresh=True)

        yield advance
        bar.update(task, completed=len(STAGES))
