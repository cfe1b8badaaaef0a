"""Progress on stderr for long work: a bar over the pipeline's stages, one per input.

Silent unless stderr is a terminal, and always silent with ``--quiet``; the reports and
the console summary never depend on it.

:class:`Stage` is the one list of stages: ingest announces the first four, the pipeline the
last one, and the CLI, the process pool and Dask all pass the same members, never strings.
This module imports no stage (rich only when a bar is drawn), so every stage may import it,
like :mod:`dlprof_lite.errors` and :mod:`dlprof_lite.rules`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dlprof_lite.safe_text import printable


class Stage(enum.StrEnum):
    """The pipeline's stages in order; the value is what the bar shows."""

    READING = "reading"
    NESTING = "nesting NVTX ranges"
    CORRELATING = "correlating"
    ANALYSING = "analysing"
    WRITING = "writing reports"


# A stage callback: what ``ingest.load`` and the pipeline call as they advance.
StageProgress = Callable[[Stage], None]


def no_progress(_: Stage) -> None:
    """The callback that shows nothing (the default everywhere)."""


@contextmanager
def stage_progress(label: str, *, quiet: bool = False) -> Iterator[StageProgress | None]:
    """Yield a callback that advances a bar to the given stage (``None`` when silent)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    stages = list(Stage)
    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        label = printable(label)  # a file name is text, never markup or escape codes
        task = bar.add_task(label, total=len(stages))

        def advance(stage: Stage) -> None:
            # Drawn at once: a stage shorter than the refresh interval is still shown.
            bar.update(task, completed=stages.index(stage),
                       description=f"{label}: {stage.value}", refresh=True)  # fmt: skip

        yield advance
        bar.update(task, completed=len(stages))
