"""The run form: ``dlprof-lite [options] train.py [args...]`` profiles the program under
nsys and reports like ``analyze``; ``--repeat N`` makes N runs into one folder, recorded as
one group."""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from dlprof_lite.cli_analyze import show_report
from dlprof_lite.cli_common import analyze_options, error, progress_bar, warn
from dlprof_lite.cli_store import record_report
from dlprof_lite.errors import DlprofError
from dlprof_lite.pipeline import (
    REPEAT_SUFFIX,
    LaunchOptions,
    has_annotation,
    profile_and_report,
    repeat_runs,
)
from dlprof_lite.rules.inputs import is_input
from dlprof_lite.rules.names import PROG
from dlprof_lite.safe_text import printable

if TYPE_CHECKING:
    from dlprof_lite.compare.side import Side
    from dlprof_lite.report.model import Report



def program_name(cmd: Sequence[str]) -> str:
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
    name = program_name(cmd)
    if args.repeat == 1:
        target = (args.output or unique_dir(Path.cwd(), name + files.REPORT_SUFFIX))
        return _run_once(args, cmd, target.absolute())
    parent = (args.output or unique_dir(Path.cwd(), name + REPEAT_SUFFIX)).absolute()
    group = args.tag or f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    collected: list[tuple[Report, Path]] = []  # each run's report, shown together at the end

    def one_run(index: int, folder: Path) -> int:
        print(f"{PROG}: run {index + 1} of {args.repeat}", file=sys.stderr, flush=True)
        code = _run_once(args, cmd, folder, group=group, index=index, final=parent,
                         collect=collected)  # fmt: skip
        if code:  # a failed run: the others would not be comparable
            error(f"run {index + 1} of {args.repeat} exited with code {code}; "
                  "stopping the repeats", args.debug)  # fmt: skip
        return code

    code, interrupted = repeat_runs(parent, args.repeat, one_run, force=args.force)
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
        warn(warning)  # once, not once per run
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


def _run_once(
    args: argparse.Namespace, cmd: list[str], target: Path, *, group: str | None = None,
    index: int | None = None, final: Path | None = None,
    collect: list[tuple[Report, Path]] | None = None,
) -> int:  # fmt: skip
    """One profiled run into ``target`` (:func:`~dlprof_lite.pipeline.profile_and_report`),
    then its lines, its record in the store and its summary; ``final``: the folder
    ``target``'s parent will become (a --repeat staging folder), for the paths the store
    records."""
    options = analyze_options(args)
    if final is not None:  # one of --repeat N: inside a new folder, nothing to replace
        options = replace(options, force=False)
    where = target if final is None else final / target.name  # where the report will be
    launch = LaunchOptions(
        annotate=args.annotate, depth=args.depth, nsys=args.nsys, nsys_args=args.nsys_args,
        delay=args.delay, duration=args.duration, nsys_timeout=args.nsys_timeout,
        show_nsys=args.debug,
    )  # fmt: skip
    profiled = profile_and_report(cmd, target, options, launch, where=where,
                                  progress=lambda: progress_bar(args, target.name))  # fmt: skip
    run, done, failure = profiled.run, profiled.done, profiled.failure
    if failure is not None or done is None:  # the run's own warnings (a hung nsys stage) first
        for warning in run.warnings:
            warn(warning)
    if isinstance(failure, KeyboardInterrupt):
        name = f" by {failure}" if getattr(failure, "signum", None) else ""
        error(f"interrupted{name} while analysing the profile (the profile is kept in "
              f"{target}; '{PROG} analyze {target / Path(run.report_path).name}' analyses it)",
              args.debug)  # fmt: skip
        return int(getattr(failure, "exit_code", 130))
    if failure is not None or done is None:  # named by the final folder, not the staging one
        message = str(failure).replace(str(profiled.stage), str(target))
        error(f"{message} (the profile is kept in {target})", args.debug)
        return run.exit_code or (failure.exit_code if failure is not None else 1)
    report, ranks = done.report, done.ranks
    stopped = _failed_before_steps(run.exit_code, report, cmd)
    if stopped:  # its own failure first; what follows from it is no news
        error(stopped, args.debug)
    else:
        for warning in run.warnings:
            warn(warning)
    for warning in done.rank_warnings:
        warn(warning)
    if run.no_ranges_hint and not has_annotation(report) and not stopped:
        warn(run.no_ranges_hint)
    run_id = None
    if not run.exit_code:  # a crashed program's partial run is no baseline
        run_id = record_report(args, report, where, command=cmd, group=group, repeat_index=index)
    if stopped:  # nothing ran that a summary could describe
        print(f"report: {printable(where)} (what was captured before it stopped)", flush=True)
    elif collect is not None:  # one of --repeat N: shown together at the end
        collect.append((report, target))
        print(f"report: {printable(where)}", flush=True)
    else:
        show_report(args, report, where, run_id, ranks)
    if run.exit_code and not stopped:
        warn(f"the program exited with code {run.exit_code}")
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
    from dlprof_lite.cli import build_parser

    known = {name for action in build_parser()._actions for name in action.option_strings}
    known -= {"-h", "--help", "--version"}
    return [arg for arg in (a.split("=", 1)[0] for a in cmd[1:]) if arg in known]
