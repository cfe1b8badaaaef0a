"""What every command of the command line shares: its error and warning lines, its console,
its progress bar, and the analysis options its flags make."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.pipeline import AnalyzeOptions, Progress
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from rich.console import Console


def error(message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    line = printable(" ".join(message.split()))  # names in it: no control character passes
    print(f"{PROG}: error: {line}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {printable(' '.join(message.split()))}", file=sys.stderr)


def analyze_options(args: argparse.Namespace) -> AnalyzeOptions:
    return AnalyzeOptions(
        formats=tuple(args.formats),
        force=args.force,
        steps=StepSelection(args.key_range, args.iter_start, args.iter_stop,
                            args.all_iterations),
        steps_per_epoch=args.steps_per_epoch,
        epochs=args.epochs,
        trace_iterations=args.trace_iterations,
        nsys=args.nsys,
    )


def console_for(args: argparse.Namespace) -> Console | None:
    if args.quiet:
        return None
    from rich.console import Console

    return Console(highlight=False)


@contextmanager
def progress_bar(args: argparse.Namespace, label: str) -> Iterator[Progress | None]:
    """A bar over the pipeline's stages on stderr, when stderr is a terminal."""
    from dlprof_lite.progress import stage_progress

    with stage_progress(label, quiet=args.quiet) as advance:
        yield advance
