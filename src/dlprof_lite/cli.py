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
import math
import re
import statistics
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from dlprof_lite import __version__
from dlprof_lite.batch import default_jobs
from dlprof_lite.cli_store import record_folders, record_report
from dlprof_lite.errors import DlprofError, InputError
from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.memory import tune_process
from dlprof_lite.pipeline import (
    AnalyzeOptions,
    Progress,
    analyze_many,
    analyze_one,
    has_annotation,
    report_profiled,
)
from dlprof_lite.rules.inputs import is_input
from dlprof_lite.rules.names import PROG
from dlprof_lite.rules.outputs import FORMATS
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from rich.console import Console

    from dlprof_lite.compare.side import Side
    from dlprof_lite.cross_ranks import CrossRanks
    from dlprof_lite.ranks_run import RankReport
    from dlprof_lite.report.model import Report

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
        help="analyse up to N inputs at once in a process pool (default: one per core, max 8)",
    )
    many(
        "--dask-scheduler",
        metavar="ADDRESS",
        help="analyse on an existing Dask cluster (needs the [dask] extra)",
    )
    return parser


# --- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_in
    tune_process()
    try:
        if args_in[:1] and args_in[0] in ALIASES:
            args_in[0] = ALIASES[args_in[0]]
        _check_command(args_in[:1])
        if args_in[:1] == ["analyze"]:
            args = build_analyze_parser().parse_args(args_in[1:])
            debug = args.debug
            return cmd_analyze(args)
        if args_in[:1] == ["report"]:
            from dlprof_lite.cli_views import build_report_parser, cmd_report

            args = build_report_parser().parse_args(args_in[1:])
            debug = args.debug
            return cmd_report(args)
        if args_in[:1] == ["runs"]:
            from dlprof_lite.cli_store import build_runs_parser, cmd_runs

            args = build_runs_parser().parse_args(args_in[1:])
            debug = args.debug
            return cmd_runs(args)
        if args_in[:1] == ["compare"]:
            from dlprof_lite.cli_compare import build_compare_parser, cmd_compare

            args = build_compare_parser().parse_args(args_in[1:])
            debug = args.debug
            return cmd_compare(args)
        args = build_parser().parse_args(args_in)
        debug = args.debug
        from dlprof_lite.launch.signals import signals_as_interrupts

        with signals_as_interrupts():  # SIGTERM, SIGHUP: handled as SIGINT is
            return cmd_run(args)
    except SystemExit as stop:  # argparse: --help, --version, usage errors
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    except DlprofError as err:
        _error(str(err), debug)
        return err.exit_code
    except KeyboardInterrupt as interrupt:  # SIGINT; SIGTERM/SIGHUP in the run form
        name = f" by {interrupt}" if getattr(interrupt, "signum", None) else ""
        _error(f"interrupted{name}", debug)
        return int(getattr(interrupt, "exit_code", 130))
    except Exception as err:  # a bug: still one line, the traceback with --debug
        hint = "" if debug else " (rerun with --debug for the traceback)"
        _error(f"unexpected {type(err).__name__}: {err}{hint}", debug)
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


def _error(message: str, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    line = printable(" ".join(message.split()))  # names in it: no control character passes
    print(f"{PROG}: error: {line}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {printable(' '.join(message.split()))}", file=sys.stderr)


def _options(args: argparse.Namespace) -> AnalyzeOptions:
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


def _console(args: argparse.Namespace) -> Console | None:
    if args.quiet:
        return None
    from rich.console import Console

    return Console(highlight=False)


@contextmanager
def _progress(args: argparse.Namespace, label: str) -> Iterator[Progress | None]:
    """A bar over the pipeline's stages on stderr, when stderr is a terminal."""
    from dlprof_lite.progress import stage_progress

    with stage_progress(label, quiet=args.quiet) as advance:
        yield advance


# --- analyze ------------------------------------------------------------------------------


def _check_input(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not an nsys export (.sqlite, .nsys-rep, .qdrep)")


def cmd_analyze(args: argparse.Namespace) -> int:
    from dlprof_lite.render import output as files

    options = _options(args)
    for path in args.paths:
        _check_input(path)
    if len(args.paths) > 1:
        return _analyze_many(args, options)
    path = args.paths[0]
    target = args.output or files.default_report_dir(path)
    files.check_target(target.absolute(), force=options.force)  # fail before any work
    with _progress(args, path.name) as progress:
        result = analyze_one(path, target, options, progress)
    run_id = record_report(args, result.report, result.report_dir)
    for warning in result.rank_warnings:
        _warn(warning)
    _show(args, result.report, result.report_dir, run_id, result.ranks)
    return 0


def _show(
    args: argparse.Namespace, report: Report, folder: Path, run_id: int | None,
    ranks: Sequence[RankReport] = (),
) -> None:  # fmt: skip
    """The console summary (then the cross-rank view of a multi-process run); with --quiet
    only the warnings (stderr) and the report folder."""
    console = _console(args)
    if console is None:
        for warning in report.summary.warnings:  # the console summary shows them otherwise
            _warn(warning)
        sys.stderr.flush()
        print(f"report: {printable(folder)}", flush=True)
        return
    from dlprof_lite.render.console import render

    render(report, folder, console, top=args.top)
    if ranks:
        from dlprof_lite.ranks_run import RANKS_STEM, rank_lines

        table = printable(folder / f"{RANKS_STEM}.csv")
        print(f"ranks: {len(ranks)} reports, one per process (cross-rank table: {table})",
              flush=True)  # fmt: skip
        for line in rank_lines(ranks, folder):
            print(printable(line), flush=True)
    if run_id is not None:
        print(f"run store: recorded as run {run_id}", flush=True)


def _analyze_many(args: argparse.Namespace, options: AnalyzeOptions) -> int:
    """One report folder per input inside one parent folder, plus a combined summary."""
    result = analyze_many(
        args.paths, args.output, options, jobs=args.jobs or default_jobs(),
        scheduler=args.dask_scheduler,
    )  # fmt: skip
    for failure in result.failures:
        where = "" if failure.source in failure.error else f"{failure.source}: "
        _error(where + failure.error, False)
    console = _console(args)
    for row in result.rows if console is None else ():  # --quiet: warnings, one line per input
        if row.get("warnings"):
            _warn(f"{row['source']}: {row['warnings']}")
    record_folders(args, [Path(str(r["report_dir"])) for r in result.rows if not r.get("error")])
    if console is not None:
        from dlprof_lite.render.console import render_many

        render_many(result.rows, console)
    if result.ranks is not None:
        _show_cross_ranks(result.ranks, result.folder, quiet=console is None)
    print(f"reports: {printable(result.folder)}", flush=True)
    return 2 if result.failures else 0  # some inputs failed: the others' reports are written


def _show_cross_ranks(cross: CrossRanks, folder: Path, *, quiet: bool) -> None:
    """The nodes of one job: their ranks side by side (the multi-node recipe)."""
    from dlprof_lite.cross_ranks import lines
    from dlprof_lite.ranks_run import RANKS_STEM

    for warning in cross.warnings:
        _warn(warning)
    if quiet:
        return
    table = printable(folder / f"{RANKS_STEM}.csv")
    print(f"ranks: {len(cross.rows)} ranks over {cross.nodes} inputs (cross-rank table: "
          f"{table})", flush=True)  # fmt: skip
    for line in lines(cross):
        print(printable(line), flush=True)


# --- run ----------------------------------------------------------------------------------


def _program_name(cmd: Sequence[str]) -> str:
    """A report name for a command: the script's stem, the module of ``-m``, or the program
    (for torchrun, its training script's)."""
    from dlprof_lite.launch.launchers import split_torchrun

    torchrun = split_torchrun(list(cmd))
    if torchrun is not None:
        cmd = ["python", "-m", *torchrun.program] if torchrun.module else torchrun.program
    if "-m" in cmd[:-1] and Path(cmd[0]).name.startswith("python"):
        # The module's last dotted part, reduced to a plain name: '-m ../../tmp/x' must not
        # put the report outside the current folder.
        module = re.split(r"[./\\]", cmd[cmd.index("-m") + 1])[-1]
        return re.sub(r"[^\w-]+", "_", module).strip("_-") or "run"
    for word in cmd:
        if word.endswith(".py"):
            return Path(word).stem
    return Path(cmd[0]).name or "run"


def cmd_run(args: argparse.Namespace) -> int:
    """Profile the program under nsys, then analyze and report like ``analyze``; with
    ``--repeat N``, N times into one folder, recorded as one group."""
    from dlprof_lite.render import output as files
    from dlprof_lite.staging import unique_dir

    cmd = args.program[1:] if args.program[:1] == ["--"] else list(args.program)
    if not cmd:
        raise DlprofError(f"no program to profile; see '{PROG} --help'")
    if is_input(cmd[0]):
        raise DlprofError(f"{cmd[0]} is a profile, not a program: run '{PROG} analyze {cmd[0]}'")
    name = _program_name(cmd)
    if args.repeat == 1:
        target = (args.output or unique_dir(Path.cwd(), name + files.REPORT_SUFFIX))
        return _run_once(args, cmd, target.absolute())
    parent = (args.output or unique_dir(Path.cwd(), name + REPEAT_SUFFIX)).absolute()
    files.check_target(parent, force=args.force)  # before N long profiling runs
    group = args.tag or f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    interrupted: KeyboardInterrupt | None = None
    code = 0
    collected: list[tuple[Report, Path]] = []  # each run's report, shown together at the end
    with files.staged_folder(parent, force=args.force) as stage:
        try:
            for index in range(args.repeat):
                print(f"{PROG}: run {index + 1} of {args.repeat}", file=sys.stderr, flush=True)
                folder = stage / f"run-{index + 1}{files.REPORT_SUFFIX}"
                code = _run_once(args, cmd, folder, group=group, index=index, final=parent,
                                 collect=collected)  # fmt: skip
                if code:  # a failed run: the others would not be comparable
                    _error(f"run {index + 1} of {args.repeat} exited with code {code}; "
                           "stopping the repeats", args.debug)  # fmt: skip
                    break
        except KeyboardInterrupt as err:  # the runs done so far are kept
            interrupted = err
    if collected and not args.quiet:
        _show_repeats(collected, parent)
    if interrupted is not None:
        raise interrupted
    print(f"repeats: {printable(parent)} (group {printable(group)})", flush=True)
    return code


def _show_repeats(done: list[tuple[Report, Path]], parent: Path) -> None:
    """One summary of the repeats: each run's median step, then the step time over all
    runs with its within-run and between-run spread (compare's statistics)."""
    from dlprof_lite.compare.resolve import record_of_report
    from dlprof_lite.compare.side import Side
    from dlprof_lite.compare.stats import step_stats
    from dlprof_lite.report.units import duration

    for warning in dict.fromkeys(w for report, _ in done for w in report.summary.warnings):
        _warn(warning)  # once, not once per run
    side = Side("repeats", tuple(record_of_report(r, parent / f.name) for r, f in done))
    if not any(len(run.step_ns()) for run in side.runs):
        print(f"repeats: {len(done)} runs, no analysed steps to combine", flush=True)
        return
    stats = step_stats(side)
    print(f"repeats: {stats.runs} runs, {stats.n} analysed steps: median step "
          f"{duration(stats.median_ns)} (p10–p90 {duration(stats.p10_ns)}–"
          f"{duration(stats.p90_ns)})", flush=True)  # fmt: skip
    for index, run in enumerate(side.runs, 1):
        steps = run.step_ns()
        median = duration(float(statistics.median(steps))) if len(steps) else "no steps"
        print(f"  run {index}: {len(steps)} steps, median {median}", flush=True)
    if stats.within_run_std_ns is not None and stats.between_run_std_ns is not None:
        print(f"  spread: within runs (pooled std) {duration(stats.within_run_std_ns)}, "
              f"between runs (std of run means) {duration(stats.between_run_std_ns)}",
              flush=True)  # fmt: skip
        print(f"  {repeat_advice(side)}", flush=True)


def repeat_advice(side: Side) -> str:
    """How far the run medians spread, and the runs a side compare needs to tell a
    DETECTABLE_CHANGE at that spread (the run-level test's power)."""
    from dlprof_lite.compare.stats import run_spread, runs_needed
    from dlprof_lite.rules.compare import DETECTABLE_CHANGE, MAX_RUNS, POWER

    spread = run_spread(side)
    needed = runs_needed(DETECTABLE_CHANGE, spread)
    runs = f"{needed} runs a side" if needed is not None else f"more than {MAX_RUNS} runs a side"
    return (f"for compare: the run medians spread {math.expm1(spread) * 100:.1f} %, so telling "
            f"a {DETECTABLE_CHANGE * 100:g} % change with {POWER * 100:g} % power takes {runs}")


REPEAT_SUFFIX = ".dlprof-runs"


def _run_once(
    args: argparse.Namespace, cmd: list[str], target: Path, *, group: str | None = None,
    index: int | None = None, final: Path | None = None,
    collect: list[tuple[Report, Path]] | None = None,
) -> int:  # fmt: skip
    """One profiled run into ``target``; ``final``: the folder ``target``'s parent will
    become (a --repeat staging folder), for the paths the store records."""
    from dlprof_lite.render import output as files

    options = _options(args)
    force = options.force and final is None
    files.check_target(target, force=force)  # before a long profiling run
    from dlprof_lite.launch.run import profile_program

    where = target if final is None else final / target.name  # where the report will be
    failure: DlprofError | KeyboardInterrupt | None = None
    with files.staged_folder(target, force=force) as stage:
        run = profile_program(
            cmd, out_dir=stage, annotate=args.annotate, depth=args.depth, nsys=args.nsys,
            nsys_args=args.nsys_args, delay=args.delay, duration=args.duration,
            nsys_timeout=args.nsys_timeout, show_nsys=args.debug,
        )  # fmt: skip
        stopped: str | None = None
        try:
            with _progress(args, target.name) as progress:
                done = report_profiled(Path(run.sqlite_path), stage, where, options, progress)
            report, ranks = done.report, done.ranks
            stopped = _failed_before_steps(run.exit_code, report, cmd)
            if stopped:  # its own failure first; what follows from it is no news
                _error(stopped, args.debug)
            else:
                for warning in run.warnings:
                    _warn(warning)
            for warning in done.rank_warnings:
                _warn(warning)
            if run.no_ranges_hint and not has_annotation(report) and not stopped:
                _warn(run.no_ranges_hint)
        # Keep what nsys captured, also when interrupted (SIGINT, or a scheduler's SIGTERM)
        # while analysing it; report the error after.
        except (DlprofError, KeyboardInterrupt) as err:
            failure = err
    if failure is not None:  # the run's own warnings (a hung nsys stage) come first
        for warning in run.warnings:
            _warn(warning)
    if isinstance(failure, KeyboardInterrupt):
        name = f" by {failure}" if getattr(failure, "signum", None) else ""
        _error(f"interrupted{name} while analysing the profile (the profile is kept in "
               f"{target}; '{PROG} analyze {target / Path(run.report_path).name}' analyses it)",
               args.debug)  # fmt: skip
        return int(getattr(failure, "exit_code", 130))
    if failure is not None:  # named by the final folder: the staging one is renamed away
        message = str(failure).replace(str(stage), str(target))
        _error(f"{message} (the profile is kept in {target})", args.debug)
        return run.exit_code or failure.exit_code
    run_id = None
    if not run.exit_code:  # a crashed program's partial run is no baseline
        run_id = record_report(args, report, where, command=cmd, group=group, repeat_index=index)
    if stopped:  # nothing ran that a summary could describe
        print(f"report: {printable(where)} (what was captured before it stopped)", flush=True)
    elif collect is not None:  # one of --repeat N: shown together at the end
        collect.append((report, target))
        print(f"report: {printable(where)}", flush=True)
    else:
        _show(args, report, where, run_id, ranks)
    if run.exit_code and not stopped:
        _warn(f"the program exited with code {run.exit_code}")
    return run.exit_code


def _failed_before_steps(code: int, report: Report, cmd: list[str]) -> str | None:
    """The line that leads when the program failed before its first step (else None): its
    exit code and, for a usage error (2) with our options after the script, where they go."""
    if not code or report.summary.iterations.iterations_count:
        return None
    line = f"the program exited with code {code} before its first training step"
    ours = _our_options_after(cmd)
    if code == 2 and ours:
        shown = " ".join(ours)
        line += (f"; {shown} after the script went to the script: {PROG}'s options go "
                 f"before it ({PROG} {shown} ... {cmd[0]} ...)")
    return line


def _our_options_after(cmd: list[str]) -> list[str]:
    """dlprof-lite's own option names among the program's arguments (``-o``, ``--force``)."""
    known = {name for action in build_parser()._actions for name in action.option_strings}
    known -= {"-h", "--help", "--version"}
    return [arg for arg in (a.split("=", 1)[0] for a in cmd[1:]) if arg in known]
