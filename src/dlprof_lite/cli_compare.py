"""``dlprof-lite compare A B [C...]``: is B really faster than A, where, and by how much.

Each side is a report folder, a folder of report folders (``--repeat``), a run id or tag of
the run store, or an nsys export analysed first (:mod:`dlprof_lite.compare.resolve`). The
comparison (:mod:`dlprof_lite.compare`) is printed and written as ``compare.csv`` and
``compare.json`` into a new folder; ``--gate PCT`` turns a significant slowdown of the median
step time by more than PCT % into exit code 1, for CI pipelines.
"""

from __future__ import annotations

import argparse
import re
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from dlprof_lite.cli_store import add_db_option, open_store
from dlprof_lite.rules.names import PROG
from dlprof_lite.rules.outputs import FORMATS
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from dlprof_lite.compare.comparison import Comparison
    from dlprof_lite.store.database import RunStore

COMPARE_DIR = "compare"
PAGE_FILE = "compare.html"


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a percentage >= 0, not {text}")
    return value


def _formats(text: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    if not chosen or set(chosen) - set(FORMATS):
        raise argparse.ArgumentTypeError(
            f"choose from csv,json,html (comma-separated), not {text!r}"
        )
    return chosen


def build_compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} compare",
        description="Compare runs: the change of the step time with its interval, tested "
        "with runs as the samples (one run a side: effect size only, no significance), then "
        "what changed per phase, layer and kernel. The first side is the baseline.",
        epilog="A side is a report folder, a folder of report folders (--repeat), an nsys "
        "export (.sqlite, .nsys-rep), a run id of the run store (12 or '#12'), or a tag "
        "(all its runs pooled).",
    )
    parser.add_argument("sides", nargs="+", metavar="SIDE",
                        help="baseline first, then one or more to compare with it")  # fmt: skip
    parser.add_argument("-o", "--output", type=Path, metavar="DIR",
                        help="folder for compare.csv/compare.json (default: a new 'compare' "
                             "folder here)")  # fmt: skip
    parser.add_argument("--formats", type=_formats, default=FORMATS, metavar="LIST",
                        help="csv,json (compare.csv/.json), html (compare.html); default: "
                             "all three")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace an existing -o folder")
    parser.add_argument("--gate", type=_percent, metavar="PCT",
                        help="exit 1 when a side's median step time is slower than the "
                             "baseline's by more than PCT %% and, with several runs on a "
                             "side, the run-level test says slower (p < 0.05); with one "
                             "run a side, when the change is also beyond 2x the steps' own "
                             "spread (half their p10-p90 range)")  # fmt: skip
    parser.add_argument("--top", type=int, default=10, metavar="N",
                        help="changes listed per table in the console (default: 10)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true",
                        help="print only the verdicts, the gate and the folder")  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--nsys", metavar="PATH",
                        help="nsys executable that exports .nsys-rep sides (default: from "
                             "PATH)")  # fmt: skip
    add_db_option(parser)
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    from dlprof_lite.compare.comparison import compare_sides
    from dlprof_lite.compare.resolve import resolve
    from dlprof_lite.errors import InputError
    from dlprof_lite.render import output as files
    from dlprof_lite.rules.compare import DETECTABLE_CHANGE
    from dlprof_lite.staging import atomic_write, unique_dir

    if len(args.sides) < 2:
        raise InputError("compare needs a baseline and at least one other side")
    target = (args.output or unique_dir(Path.cwd(), COMPARE_DIR)).absolute()
    files.check_target(target, force=args.force)  # before analysing anything

    with ExitStack() as stack:
        opened: list[RunStore] = []

        def store() -> RunStore:  # opened once, only when a name needs the store
            if not opened:
                opened.append(stack.enter_context(open_store(args.db, read_only=True)))
            return opened[0]

        sides = [resolve(name, store, args.nsys) for name in args.sides]
    detectable = args.gate / 100.0 if args.gate else DETECTABLE_CHANGE
    comparison = compare_sides(sides, detectable=detectable)
    from dlprof_lite.compare.output import write_comparison

    with files.staged_folder(target, force=args.force) as stage:
        write_comparison(comparison, stage, [f for f in args.formats if f != "html"])
        if "html" in args.formats:
            from dlprof_lite.compare.page import compare_page

            atomic_write(stage / PAGE_FILE, compare_page(comparison, sides))
    return _show(args, comparison, target)


def _show(args: argparse.Namespace, comparison: Comparison, folder: Path) -> int:
    from rich.console import Console

    from dlprof_lite.compare.comparison import verdict_line
    from dlprof_lite.compare.console import render_comparison
    from dlprof_lite.compare.gate import gate

    console = Console(highlight=False)
    if args.quiet:  # the verdicts only, one line each
        for step in comparison.steps:
            print(printable(verdict_line(step)), flush=True)
    else:
        render_comparison(comparison, console, top=args.top)
    print(f"compare: {printable(folder)}", flush=True)
    if args.gate is None:
        return 0
    result = gate(comparison, args.gate)
    print(f"gate: {result.line}", flush=True)
    return 1 if result.failed else 0


def folder_name(label: str) -> str:
    """A file-system-safe short form of a side's label."""
    return re.sub(r"[^\w.-]+", "_", Path(label).name or label).strip("_.") or "side"
