"""The pipeline: read and analyse (ingest), tabulate (report), write, for one input or many.

    path -> ingest.load -> Profile -> report.build_report -> Report -> report.output (folder)

The command line (:mod:`dlprof_lite.cli`) only parses arguments, calls these functions and
prints; the notebook API (``dlprof_lite.analyze``) calls :func:`analyze_profile`; the process
pool or Dask cluster of :mod:`dlprof_lite.batch` calls :func:`analyze_row`, which is
top-level and takes plain values so that a worker process can be handed it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlprof_lite.ingest.selection import EVERY_STEP_BY_RULE, StepSelection
from dlprof_lite.progress import Stage, StageProgress, no_progress
from dlprof_lite.rules.outputs import FORMATS

if TYPE_CHECKING:
    import pandas as pd

    from dlprof_lite.cross_ranks import CrossRanks, NodeRanks
    from dlprof_lite.errors import DlprofError
    from dlprof_lite.ingest.profile import Profile
    from dlprof_lite.launch.run import ProfileRun
    from dlprof_lite.ranks_run import RankReport
    from dlprof_lite.report.model import Report
    from dlprof_lite.report.summary_types import Scalar

# The stage callback of dlprof_lite.progress (one Stage enum for CLI, pool and Dask).
Progress = StageProgress


@dataclass(frozen=True)
class AnalyzeOptions:
    """What :func:`analyze_one` needs; plain values so a process pool can pickle it."""

    formats: tuple[str, ...] = FORMATS
    force: bool = False
    steps: StepSelection = EVERY_STEP_BY_RULE  # the key range, the window, all iterations
    steps_per_epoch: int | None = None  # the projection's (report/steps/projection.py)
    epochs: int | None = None
    # trace.json of iterations [A, B) instead of the report's timeline iteration
    trace_iterations: tuple[int, int] | None = None
    nsys: str | None = None  # the nsys that exports an .nsys-rep/.qdrep input (None: PATH)


def analyze_profile(
    path: Path, options: AnalyzeOptions, progress: Progress | None = None
) -> Report:
    """Read, analyse and tabulate one input (ingest, then report); returns a Report."""
    return _analyze(path, options, progress, ranks=False).report


def analyze_ranks(
    path: Path, options: AnalyzeOptions, progress: Progress | None = None
) -> tuple[tuple[RankReport, ...], tuple[str, ...]]:
    """Each rank's report of a multi-process input (none for one process), and why a rank
    could not be analysed alone."""
    done = _analyze(path, options, progress, ranks=True)
    return done.ranks, done.rank_warnings


@dataclass(frozen=True)
class Analysed:
    """What the pipeline gives for one input, in every form (``analyze``, the run form, a
    batch worker): its report (all processes), the events of ``--trace-iterations`` when
    asked (they need the Profile, which is dropped here), one report per rank of a
    multi-process run (none otherwise), and once written, the folder it went to."""

    report: Report
    trace: pd.DataFrame | None
    ranks: tuple[RankReport, ...] = ()
    rank_warnings: tuple[str, ...] = ()  # ranks that could not be analysed alone, and why
    # The rank a one-process profile's process recorded (a node of one rank in a job of
    # several nodes: the cross-node view needs it); None otherwise.
    own_rank: int | None = None
    report_dir: Path | None = None  # where the report was written (None: not written)
    # Every process's collective calls on this input's clock (report/collectives/calls.py):
    # what the cross-node view aligns and matches across inputs.
    calls: pd.DataFrame | None = None

    def row(self) -> dict[str, Scalar]:
        """The flat summary row of the combined ``summary.csv``, with its report folder."""
        return {**self.report.summary.row(), "report_dir": str(self.report_dir),
                "error": None}  # fmt: skip


def _analyze(
    path: Path, options: AnalyzeOptions, progress: Progress | None = None, *, ranks: bool = True
) -> Analysed:
    """:func:`_analyze_export` of ``path``; an nsys report is exported once (``nsys export``
    takes seconds), for the all-ranks report and every rank's."""
    from dlprof_lite.rules.inputs import is_report

    if not is_report(path):
        return _analyze_export(path, options, progress, ranks=ranks)
    from dlprof_lite.ingest.load import sqlite_of

    shown: set[Stage] = set()

    def once(stage: Stage) -> None:  # reading starts with the export, not after it
        if progress is not None and stage not in shown:
            shown.add(stage)
            progress(stage)

    once(Stage.READING)
    with sqlite_of(path, options.nsys) as sqlite:
        done = _analyze_export(sqlite, options, once, ranks=ranks)
    source = str(path)  # the user's report, not the temporary export
    return replace(done, report=done.report.with_source(source),
                   ranks=tuple(replace(r, report=r.report.with_source(source))
                               for r in done.ranks))  # fmt: skip


def _analyze_export(
    path: Path, options: AnalyzeOptions, progress: Progress | None = None, *, ranks: bool = True
) -> Analysed:
    """All processes' report, then, for a profile of several ranks, each rank's: the frames
    read once, each rank's rows analysed apart (before any nesting or correlation, which
    must not mix processes)."""
    from dlprof_lite.ingest.facts import facts_of
    from dlprof_lite.ingest.load import enrich, load_raw
    from dlprof_lite.memory import release_freed_memory
    from dlprof_lite.ranks_run import RankReport, rank_processes

    extra: dict[str, Any] = {"progress": progress} if progress is not None else {}
    raw = load_raw(path, **extra)
    release_freed_memory()  # each stage starts on what the earlier ones still hold
    processes = rank_processes(facts_of(raw.marks), raw.nvtx) if ranks else []
    # One process: enrich lets its read frames go once used (peak memory); several: each
    # rank's report reads them again.
    profile = enrich(raw, steps=options.steps, hand_over=not processes, **extra)
    if not processes:
        del raw
    release_freed_memory()
    (progress or no_progress)(Stage.WRITING)
    report, trace = _report_of(profile, options)
    from dlprof_lite.report.collectives.calls import calls_of

    calls = calls_of(profile)
    if not processes:
        release_freed_memory()  # the caller drops the profile and writes the files
        return Analysed(report, trace, own_rank=_own_rank(profile), calls=calls)
    from dlprof_lite.errors import DlprofError

    per_rank, warnings = [], []
    for process in processes:
        try:
            one = enrich(raw, steps=options.steps, pids=[process.pid])
            per_rank.append(RankReport(process, *_report_of(one, options)))
        except DlprofError as err:  # e.g. a window past this rank's steps: the others go on
            warnings.append(f"no report for {process.folder} (pid {process.pid}): {err}")
    return Analysed(report, trace, tuple(per_rank), tuple(warnings), calls=calls)



def _own_rank(profile: Profile) -> int | None:
    """The rank recorded by the one process that recorded one (``process`` fact)."""
    from dlprof_lite.report.run_facts import read_run_facts

    ranks = read_run_facts(profile.facts).ranks
    return int(ranks[0][1]) if len(ranks) == 1 else None


def _report_of(profile: Profile, options: AnalyzeOptions) -> tuple[Report, pd.DataFrame | None]:
    from dlprof_lite.memory import release_freed_memory
    from dlprof_lite.report.build import build_report
    from dlprof_lite.report.steps.projection import ProjectionInput

    # The user's steps per epoch and epochs, where given, win over the DataLoader's length.
    given = ProjectionInput(options.steps_per_epoch, options.epochs)
    # Each large table starts on what the report holds, not on the freed temporaries of the
    # one before it: about 20 MB off the report's peak at 1M kernels (508 -> 487 MB).
    report = build_report(profile, all_iterations=options.steps.all_iterations, projection=given,
                          between_tables=release_freed_memory, parallel=True)  # fmt: skip
    if options.trace_iterations is None:
        return report, None
    from dlprof_lite.report.timeline import timeline_for

    return report, timeline_for(profile, options.trace_iterations)


def analyze_one(
    path: Path, out_dir: Path, options: AnalyzeOptions, progress: Progress | None = None
) -> Analysed:
    """Analyse one input and write its complete report folder at ``out_dir``.

    Top-level and free of open resources so that a process pool can call it.
    """
    from dlprof_lite.ranks_run import write_ranks
    from dlprof_lite.render.output import staged_folder, write_contents

    done = _analyze(Path(path), options, progress)
    final = Path(out_dir).absolute()
    with staged_folder(final, force=options.force) as stage:
        write_contents(done.report, stage, options.formats, trace=done.trace, parallel=True)
        write_ranks(done.ranks, stage, options.formats, final)
    return replace(done, trace=None, report_dir=final)


@dataclass(frozen=True)
class BatchRow:
    """What a worker hands back for one input: its summary row and, for a profile of
    several ranks, what the cross-node view needs (:mod:`dlprof_lite.cross_ranks`)."""

    row: dict[str, Scalar]
    ranks: NodeRanks


def analyze_row(path: Path, out_dir: Path, options: AnalyzeOptions) -> BatchRow:
    """:func:`analyze_one` for a worker process: returns only plain values (picklable).

    A bug on one input is that input's one-line error (exit 1), as a bad input's is: the
    other inputs of the batch go on.
    """
    from dlprof_lite.cross_ranks import NodeRanks
    from dlprof_lite.errors import DlprofError

    try:
        done = analyze_one(path, out_dir, options)
    except DlprofError:
        raise
    except Exception as err:  # not KeyboardInterrupt: an interrupt still stops the batch
        bug = DlprofError(f"{path}: unexpected {type(err).__name__}: {err}")
        bug.exit_code = 1
        raise bug from err
    w = done.report.summary.window
    window = ((int(w.window_start_ns), int(w.window_end_ns))
              if w.window_start_ns is not None and w.window_end_ns is not None else None)
    if done.ranks:
        rows = tuple({**r.row(Path()), "rank": r.process.rank} for r in done.ranks)
        return BatchRow(done.row(), NodeRanks(rows, done.report.ranks, done.calls, window))
    if done.own_rank is not None:  # a node of one rank: its report is that rank's
        row = {**done.row(), "report_dir": ".", "rank": done.own_rank}
        return BatchRow(done.row(), NodeRanks((row,), done.report.ranks, done.calls, window))
    return BatchRow(done.row(), NodeRanks())


def has_annotation(report: Report) -> bool:
    """Whether any range of the annotation layer's domain reached the analysed profile."""
    from dlprof_lite.rules.names import DOMAIN

    return bool((report.ranges["domain"].astype(str) == DOMAIN).any())


@dataclass(frozen=True)
class Failure:
    """One input that could not be analysed, and why (its error line and exit code)."""

    source: str
    error: str
    exit_code: int


@dataclass(frozen=True)
class BatchResult:
    """Several inputs: the parent folder, one summary row per input, the failures."""

    folder: Path
    rows: tuple[dict[str, Scalar], ...]
    failures: tuple[Failure, ...]
    ranks: CrossRanks | None = None  # several inputs holding ranks: the nodes of one job


MULTI_DIR = "dlprof-lite-reports"


def analyze_many(
    paths: Sequence[Path],
    parent: Path | None,
    options: AnalyzeOptions,
    *,
    jobs: int,
    scheduler: str | None = None,
) -> BatchResult:
    """One report folder per input inside one parent folder, plus a combined ``summary``.

    Inputs are analysed by :func:`analyze_row` serially, in a process pool or on Dask; an
    input's failure is its row's ``error`` and the others go on. When every input fails,
    nothing is kept and the first failure is raised.
    """
    from dlprof_lite import cross_ranks
    from dlprof_lite.batch import run_all
    from dlprof_lite.render import output as files
    from dlprof_lite.render.writers import combined_table
    from dlprof_lite.staging import unique_dir

    first = paths[0].absolute()
    parent = (parent or unique_dir(first.parent, MULTI_DIR)).absolute()
    files.check_target(parent, force=options.force)
    rows: list[dict[str, Scalar]] = []
    failures: list[Failure] = []
    nodes: list[tuple[Path, NodeRanks]] = []
    with files.staged_folder(parent, force=options.force) as stage:
        items = []
        for path in paths:
            name = unique_dir(stage, files.report_stem(path) + files.REPORT_SUFFIX).name
            (stage / name).mkdir()  # reserve the name; the report replaces the empty folder
            items.append((path, stage / name, replace(options, force=True)))
        outcomes = run_all(analyze_row, items, jobs=jobs, scheduler=scheduler)
        for (path, out, _), outcome in zip(items, outcomes, strict=True):
            if outcome.error is not None:
                failures.append(Failure(str(path), outcome.error, outcome.exit_code))
                rows.append({"source": str(path), "error": outcome.error})
                shutil.rmtree(out, ignore_errors=True)
                continue
            rows.append({**outcome.result.row, "report_dir": str(parent / out.name)})
            nodes.append((parent / out.name, outcome.result.ranks))
        if len(failures) == len(paths):  # nothing to keep: the staging folder goes
            raise _none_analysed(failures)
        files.write_tables([combined_table(rows)], stage, files.summary_formats(options.formats))
        cross = cross_ranks.merge(nodes)
        if cross is not None:
            cross_ranks.write(cross, stage, options.formats)
    return BatchResult(parent, tuple(rows), tuple(failures), cross)


def _none_analysed(failures: Sequence[Failure]) -> Exception:
    """One error line for a batch of which no input could be analysed, naming why (the
    first three), exit 2 as for any batch with a failed input."""
    from dlprof_lite.errors import DlprofError

    why = "; ".join(
        f.error if f.source in f.error else f"{f.source}: {f.error}" for f in failures[:3]
    )
    more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
    err = DlprofError(f"none of the {len(failures)} inputs could be analysed: {why}{more}")
    err.exit_code = 2
    return err


def report_profiled(
    export: Path, stage: Path, target: Path, options: AnalyzeOptions,
    progress: Progress | None = None,
) -> Analysed:  # fmt: skip
    """The ``run`` form's last stages: analyse the export nsys wrote into the staging folder
    and write the report (and one per rank) beside it, naming the export where it will be
    once ``stage`` becomes ``target``."""
    from dlprof_lite.ranks_run import write_ranks
    from dlprof_lite.render.output import write_contents

    done = _analyze(export, options, progress)
    source = str(target / export.name)
    report = done.report.with_source(source)
    ranks = tuple(replace(r, report=r.report.with_source(source)) for r in done.ranks)
    write_contents(report, stage, options.formats, trace=done.trace, parallel=True)
    write_ranks(ranks, stage, options.formats, target)
    return replace(done, report=report, ranks=ranks, report_dir=target)


# --- the run form: profile a program, then report ------------------------------------------

REPEAT_SUFFIX = ".dlprof-runs"  # the folder of --repeat N's runs


@dataclass(frozen=True)
class LaunchOptions:
    """How the run form starts the program under nsys (its flags; launch/run.py)."""

    annotate: str = "modules"
    depth: int | None = None
    nsys: str | None = None
    nsys_args: str | None = None
    delay: float | None = None
    duration: float | None = None
    nsys_timeout: float | None = None
    show_nsys: bool = False


@dataclass(frozen=True)
class Profiled:
    """One profiled run: what nsys produced (``run``), its analysis (``done``; None when it
    failed) and why it failed (``failure``: the profile is kept in the folder all the
    same), and the staging folder the report was written in (messages name the final one)."""

    run: ProfileRun
    done: Analysed | None
    failure: DlprofError | KeyboardInterrupt | None
    stage: Path


def profile_and_report(
    cmd: list[str],
    target: Path,
    options: AnalyzeOptions,
    launch: LaunchOptions,
    *,
    where: Path | None = None,
    progress: Callable[[], AbstractContextManager[Progress | None]] | None = None,
) -> Profiled:
    """Profile ``cmd`` under nsys into the report folder ``target`` (staged: it appears
    whole), then analyse the export and write the report beside it. The profile is kept
    when the analysis fails or is interrupted (SIGINT, a scheduler's SIGTERM): the failure
    comes back in the result. ``where``: the folder the report will end up in (a --repeat
    run's, once its parent is renamed), for the paths the report names; ``progress``: the
    analysis's progress bar."""
    from contextlib import nullcontext

    from dlprof_lite.errors import DlprofError
    from dlprof_lite.launch.run import profile_program
    from dlprof_lite.render.output import staged_folder

    failure: DlprofError | KeyboardInterrupt | None = None
    done = None
    # The folder is checked as it is staged: before the long profiling run.
    with staged_folder(target, force=options.force) as stage:
        run = profile_program(
            cmd, out_dir=stage, annotate=launch.annotate, depth=launch.depth, nsys=launch.nsys,
            nsys_args=launch.nsys_args, delay=launch.delay, duration=launch.duration,
            nsys_timeout=launch.nsys_timeout, show_nsys=launch.show_nsys,
        )  # fmt: skip
        try:
            with (progress or nullcontext)() as advance:
                done = report_profiled(Path(run.sqlite_path), stage, where or target, options,
                                       advance)  # fmt: skip
        except (DlprofError, KeyboardInterrupt) as err:
            failure = err
    return Profiled(run, done, failure, stage)


def repeat_runs(
    parent: Path, count: int, one_run: Callable[[int, Path], int], *, force: bool = False
) -> tuple[int, KeyboardInterrupt | None]:
    """``--repeat N``: ``one_run(index, folder)`` for ``run-1.dlprof`` ... ``run-N.dlprof``
    inside ``parent`` (staged: it appears when the runs end, with the runs done so far when
    interrupted), stopping at the first run that returns a non-zero exit code (the others
    would not be comparable). Returns the last exit code and the interrupt, if any."""
    from dlprof_lite.render.output import REPORT_SUFFIX, staged_folder

    code = 0
    interrupted: KeyboardInterrupt | None = None
    with staged_folder(parent, force=force) as stage:  # checked here: before N runs
        try:
            for index in range(count):
                code = one_run(index, stage / f"run-{index + 1}{REPORT_SUFFIX}")
                if code:
                    break
        except KeyboardInterrupt as err:  # the runs done so far are kept
            interrupted = err
    return code, interrupted
