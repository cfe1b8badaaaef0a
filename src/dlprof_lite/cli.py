"""The ``dlprof-lite`` command: the only place that calls every stage, prints, and exits.

Two forms::

    dlprof-lite [options] train.py [args...]        # run: profile a program, then analyze
    dlprof-lite [options] -- python -m pkg [args...]
    dlprof-lite [options] -- torchrun --nproc_per_node=2 train.py [args...]
    dlprof-lite analyze PATH [PATH...] [options]    # post-hoc: .sqlite, .nsys-rep, .qdrep

A script path as first positional would collide with an ``analyze`` subcommand, so ``main``
dispatches by hand: ``analyze`` first selects the analyze parser, anything else the run
parser. Every :class:`~dlprof_lite.errors.DlprofError` becomes one line
``dlprof-lite: error: ...`` and its exit code; a traceback only with ``--debug``. One input
goes through :mod:`dlprof_lite.pipeline`; the report folder is printed even with ``--quiet``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from dlprof_lite import __version__
from dlprof_lite.cli_common import error
from dlprof_lite.errors import DlprofError, InputError
from dlprof_lite.memory import tune_process
from dlprof_lite.rules.names import PROG
from dlprof_lite.rules.outputs import FORMATS
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:

    pass

# The options table of docs/profiling.md says the same (a test holds them together).
NSYS_ARGS_HELP = (
    "more 'nsys profile' arguments, added to the defaults (--trace=cuda,nvtx,osrt,cublas,cudnn "
    "--sample=none --cpuctxsw=none); a switch you give replaces the default of the same name, "
    "e.g. --nsys-args='--trace=cuda,nvtx --cuda-graph-trace=node'"
)


# --- parsers ------------------------------------------------------------------------------


def _formats(text: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    bad = [f for f in chosen if f not in FORMATS]
    if not chosen or bad:
        raise argparse.ArgumentTypeError(
            f"choose from {','.join(FORMATS)} (comma-separated), not {text!r}"
        )
    return chosen


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, not 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def _span(text: str) -> tuple[int, int]:
    first, sep, last = text.partition(":")
    try:
        span = (int(first), int(last))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not A:B (iterations A to B-1): {text!r}") from None
    if not sep or span[0] < 0 or span[1] <= span[0]:
        raise argparse.ArgumentTypeError(f"A:B needs 0 <= A < B, not {text!r}")
    return span


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {err}") from None
    return text


# fmt: off
def _common(parser: argparse.ArgumentParser) -> None:
    out = parser.add_argument_group("output").add_argument
    out("-o", "--output", type=Path, metavar="DIR",
        help="report folder (default: a new one, never an existing one: <script>.dlprof in "
             "the current folder for a run, <input>.dlprof beside the input for analyze; "
             "-2, -3, ... added when taken)")
    out("--formats", type=_formats, default=FORMATS, metavar="LIST",
        help="what to write, comma-separated: csv and json (the tables), html (report.html); "
             "default: all three (layers.dot and trace.json are always written)")
    out("--force", action="store_true", help="replace an existing report folder given with -o")
    out("--quiet", action="store_true",
        help="print no summary, only the report folder (and warnings, errors)")
    out("--debug", action="store_true",
        help="show tracebacks of errors and nsys's own messages as they come")
    out("--top", type=_positive, default=5, metavar="N",
        help="layers in the console's top list, by self time (default: 5)")
    it = parser.add_argument_group("iterations").add_argument
    it("--key-range", type=_regex, metavar="REGEX",
       help="NVTX range whose instances are iterations (default: annotation's)")
    it("--iter-start", type=_count, metavar="N",
       help="first iteration to analyse (earlier ones are warm-up)")
    it("--iter-stop", type=_count, metavar="N", help="iteration to stop before (exclusive)")
    it("--trace-iterations", type=_span, metavar="A:B",
       help="trace.json of iterations A to B-1 (default: the report's timeline iteration, "
            "one steady step)")
    it("--all-iterations", action="store_true",
       help="kernels, ranges and layers tables over the whole run (default: the analysed "
            "iterations, warm-up left out)")
    pro = parser.add_argument_group("projected training time").add_argument
    pro("--steps-per-epoch", type=_positive, metavar="N",
        help="training steps per epoch (default: the DataLoader's length the annotation "
             "recorded, over the batches one step takes)")
    pro("--epochs", type=_positive, metavar="N", help="epochs to project (default: 1)")
    from dlprof_lite.cli_store import add_store_options

    add_store_options(parser)


def _profiling(parser: argparse.ArgumentParser) -> None:
    from dlprof_lite.annotate.hooks import LEVELS  # light: no torch, no pandas

    run = parser.add_argument_group("profiling").add_argument
    run("--annotate", default="auto", choices=("auto", *LEVELS),
        help="NVTX ranges: none, phases, modules and phases (modules too short to time "
             "are folded into their parent after the warm-up step), or modules-all (every "
             "module, none folded); auto: modules")
    run("--depth", type=_count, metavar="N", help="annotate modules to this depth")
    run("--nsys", metavar="PATH", help="nsys executable (default: from PATH)")
    run("--nsys-args", metavar="ARGS", help=NSYS_ARGS_HELP)
    run("--delay", type=float, metavar="SEC", help="start collecting after SEC seconds")
    run("--duration", type=float, metavar="SEC", help="collect for SEC seconds")
    run("--repeat", type=_positive, default=1, metavar="N",
        help="run the program N times, one report each in one folder, recorded as one "
             "group (the --tag, else a new one) that compare pools: measures run-to-run "
             "variance")
    run("--nsys-timeout", type=_seconds, metavar="SEC",
        help="time limit of each stage that waits on nsys (--version, start-up before the "
             "program runs, finishing the report after it, export); on timeout nsys is "
             "stopped and the error names the stage (default: 60 s for --version, 300 s for "
             "start-up, 600 s for the others; or $DLPROF_NSYS_TIMEOUT)")
# fmt: on


_USAGE = (
    "%(prog)s [options] SCRIPT [ARGS...]\n"
    "       %(prog)s [options] -- COMMAND [ARGS...]\n"
    "       %(prog)s analyze PATH [PATH...] [options]\n"
    "       %(prog)s report FOLDER | compare A B | runs {list,show,export,rm} [options]"
)
# The subcommands (each with its own --help), and the spellings that mean one of them.
COMMANDS = {
    "analyze": "analyse existing nsys exports (.sqlite, .nsys-rep, .qdrep)",
    "report": "print or re-render a report folder (console, --html)",
    "compare": "compare two runs (folders, run ids or tags), with statistics",
    "runs": "the run store: list, show, export, rm recorded runs",
    "whatif": "predict the step time with some work scaled (layer=NAME:0.5, phase=data:0)",
}
ALIASES = {"analyse": "analyze"}


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors quote the command line: shown as text, never as codes."""

    def error(self, message: str) -> NoReturn:
        super().error(printable(message))


def build_parser() -> argparse.ArgumentParser:
    """The run form (``analyze`` has its own parser, :func:`build_analyze_parser`)."""
    parser = _Parser(
        prog=PROG,
        usage=_USAGE,
        description="Profile a PyTorch training script under Nsight Systems and report, "
        "layer by layer, where the GPU time goes and what to change.",
        epilog="commands (each has --help):\n"
        + "\n".join(f"  {name:<9} {text}" for name, text in COMMANDS.items())
        + f"\n\nAnything else is the program: {PROG} [options] train.py --epochs 1\n"
        "(dlprof-lite's options go before the script; what follows it is the script's)\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _common(parser)
    _profiling(parser)
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                        help="the program to profile and its arguments")  # fmt: skip
    return parser


def build_analyze_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{PROG} analyze",
        description="Analyze nsys exports (.sqlite) or reports (.nsys-rep, .qdrep; needs nsys). "
        "Several inputs: one report folder each, plus a combined summary.csv.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    _common(parser)
    parser.add_argument("--nsys", metavar="PATH",
                        help="nsys executable that exports .nsys-rep/.qdrep inputs (default: "
                             "from PATH)")  # fmt: skip
    many = parser.add_argument_group("several inputs").add_argument
    many(
        "--jobs",
        "-j",
        type=_count,
        metavar="N",
        help="processes to use: up to N inputs at once in a process pool (default: one per "
        "core, max 8); one input's report by two processes when N >= 2: 15-20%% faster "
        "from 100k GPU ops, 70-170 MB more per million (default: one process, the least "
        "memory)",
    )
    many(
        "--dask-scheduler",
        metavar="ADDRESS",
        help="analyse on an existing Dask cluster (needs the [dask] extra)",
    )
    return parser


# --- main ---------------------------------------------------------------------------------


Handler = Callable[[argparse.Namespace], int]


def _analyze() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_analyze import cmd_analyze

    return build_analyze_parser(), cmd_analyze


def _report() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_views import build_report_parser, cmd_report

    return build_report_parser(), cmd_report


def _runs() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_store import build_runs_parser, cmd_runs

    return build_runs_parser(), cmd_runs


def _compare() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_compare import build_compare_parser, cmd_compare

    return build_compare_parser(), cmd_compare


def _whatif() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_whatif import build_whatif_parser, cmd_whatif

    return build_whatif_parser(), cmd_whatif


def _run() -> tuple[argparse.ArgumentParser, Handler]:
    from dlprof_lite.cli_run import cmd_run
    from dlprof_lite.launch.signals import signals_as_interrupts

    def run(args: argparse.Namespace) -> int:
        with signals_as_interrupts():  # SIGTERM, SIGHUP: handled as SIGINT is
            return cmd_run(args)

    return build_parser(), run


# Each subcommand's parser and handler, imported when chosen (start-up stays light);
# anything else is the run form.
HANDLERS: dict[str, Callable[[], tuple[argparse.ArgumentParser, Handler]]] = {
    "analyze": _analyze, "report": _report, "runs": _runs, "compare": _compare,
    "whatif": _whatif,
}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_in
    tune_process()
    try:
        if args_in[:1] and args_in[0] in ALIASES:
            args_in[0] = ALIASES[args_in[0]]
        _check_command(args_in[:1])
        command = HANDLERS.get(args_in[0]) if args_in else None
        parser, handler = (command or _run)()
        args = parser.parse_args(args_in[1:] if command else args_in)
        debug = args.debug
        return handler(args)
    except SystemExit as stop:  # argparse: --help, --version, usage errors
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    except DlprofError as err:
        error(str(err), debug)
        return err.exit_code
    except KeyboardInterrupt as interrupt:  # SIGINT; SIGTERM/SIGHUP in the run form
        name = f" by {interrupt}" if getattr(interrupt, "signum", None) else ""
        error(f"interrupted{name}", debug)
        return int(getattr(interrupt, "exit_code", 130))
    except Exception as err:  # a bug: still one line, the traceback with --debug
        hint = "" if debug else " (rerun with --debug for the traceback)"
        error(f"unexpected {type(err).__name__}: {err}{hint}", debug)
        return 1


def _check_command(first: list[str]) -> None:
    """A first word that is no file and close to a command's name is a mistyped command."""
    if not first or first[0] in COMMANDS or first[0].startswith("-"):
        return
    word = first[0]
    if "/" in word or "." in word or Path(word).exists():
        return  # a script or a program: the run form
    import difflib

    near = difflib.get_close_matches(word, [*COMMANDS, *ALIASES], n=1, cutoff=0.6)
    if near:
        meant = ALIASES.get(near[0], near[0])
        raise InputError(f"unknown command {word!r}: did you mean '{PROG} {meant}'? "
                         f"(commands: {', '.join(COMMANDS)})")


