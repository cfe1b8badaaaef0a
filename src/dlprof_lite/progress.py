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
import threading
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

    from dlprof_lite.forked import paused_for_forks

    stages = list(Stage)
    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
               TimeElapsedColumn())  # fmt: skip
    # Redrawn by a thread of ours, not rich's own: it stops while the analysis forks.
    with Progress(*columns, console=Console(stderr=True), transient=True,
                  auto_refresh=False) as bar, _Redraw(bar.refresh) as redraw:  # fmt: skip
        label = printable(label)  # a file name is text, never markup or escape codes
        task = bar.add_task(label, total=len(stages))

        def advance(stage: Stage) -> None:
            # Drawn at once: a stage shorter than the refresh interval is still shown.
            bar.update(task, completed=stages.index(stage),
                       description=f"{label}: {stage.value}", refresh=True)  # fmt: skip

        with paused_for_forks(redraw.paused):
            yield advance
        bar.update(task, completed=len(stages))


class _Redraw:
    """A thread that calls ``redraw`` ten times a second (the spinner, the elapsed time)
    until the block ends; :meth:`paused` stops it for a while (and waits until it has)."""

    EVERY_S = 0.1

    def __init__(self, redraw: Callable[[], object]) -> None:
        self._redraw = redraw
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Redraw:
        self._start()
        return self

    def __exit__(self, *_: object) -> None:
        self._end()

    def _start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), daemon=True,
                                        name="dlprof-lite progress")  # fmt: skip
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.EVERY_S):
            self._redraw()

    def _end(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        self._end()
        try:
            yield
        finally:
            self._start()
