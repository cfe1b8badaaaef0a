"""Profile a program: ``nsys profile`` around the bootstrap, then export the SQLite.

``dlprof-lite train.py args`` becomes, as one argument list,

    nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn --sample=none --cpuctxsw=none
        --output=<out_dir>/profile --force-overwrite=true [--delay/--duration] [--nsys-args]
        [<python> -I -S -c REDIRECT <fd> <fd>] <python> -m dlprof_lite.annotate.bootstrap
        --annotate modules --status-file <tmp>/status-{rank}.json train.py args

(the optional wrapper gives the program our stdout and stderr, see :mod:`.supervise`).
``torchrun [opts] train.py`` keeps torchrun and its options and starts each worker through
the bootstrap (:mod:`.launchers`); each rank writes its own status file.

The bootstrap's status files carry the program's exit code and tell when the program has
ended: from then on nsys gets ``finalize_timeout`` seconds to write its report before it is
stopped (a hung nsys agent, see NSYS.md), and a ``.qdstrm`` it left behind is imported.
Every stage that waits on nsys is bounded (``nsys_timeout``, see :func:`~.nsys.stage_timeout`).
SIGTERM and SIGHUP (raised as :class:`~.signals.Terminated` by the caller's
:func:`~.signals.signals_as_interrupts`) are forwarded like SIGINT; the report is still
written and the exit code is 128 + the signal. A
program that fails still gets its report. Under a launcher the exit code is the launcher's,
which nsys passes back (torchrun's is 1 when any worker failed; the rank's own code is a
warning).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlprof_lite.annotate.hooks import check_depth, check_level
from dlprof_lite.errors import InputError, NsysError
from dlprof_lite.launch.launchers import (
    BOOTSTRAP,
    annotated_command,
    check_unsupported,
    split_torchrun,
    torchrun_command,
)
from dlprof_lite.launch.nsys import (
    Nsys,
    export_sqlite,
    find_nsys,
    import_qdstrm,
    profile_args,
    reason_line,
    split_nsys_args,
    stage_timeout,
)
from dlprof_lite.launch.supervise import (
    Limits,
    Outcome,
    nsys_notices,
    program_streams,
    redirected,
    supervise,
)
from dlprof_lite.rules.inputs import PROFILE_SUFFIXES

STATUS_PATTERN = "status-{rank}.json"
START_MARKER = "started"
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_FLAGS_WITH_VALUE = ("-X", "-W")
_GENERATING = re.compile(r"Generating '([^']+\.qdstrm)'")


@dataclass(frozen=True)
class ProfileRun:
    """What :func:`profile_program` produced."""

    sqlite_path: Path
    report_path: Path
    exit_code: int
    warnings: tuple[str, ...]
    command: tuple[str, ...]
    nsys: Nsys
    # Why no annotation range may have arrived, for the caller to show when the analysed
    # profile holds none of ours (launch itself does not read the export).
    no_ranges_hint: str | None = None
    # One status per annotated process (rank), in rank order: what the bootstrap saw.
    statuses: tuple[dict[str, Any], ...] = ()
    launcher: bool = False


def program_command(
    cmd: list[str], *, annotate: str, depth: int | None, status_file: Path | str
) -> tuple[list[str], list[str]]:
    """The argument list nsys runs for ``cmd``, and warnings about it.

    ``script.py args``, ``python [flags] script.py|-m module|-c code args`` run under the
    bootstrap (a bare ``python``/``python3`` means this interpreter, ``sys.executable``; a
    path to another one must have dlprof-lite installed); ``torchrun`` and ``python -m
    torch.distributed.run|launch`` start each worker under it; launchers that cannot are
    refused (:func:`~.launchers.check_unsupported`); anything else runs as is.
    ``status_file`` may hold ``{rank}``, which each process replaces with its ``RANK``.
    """
    if not cmd:
        raise InputError("no program to profile")
    first = cmd[0]
    boot = ["--annotate", annotate, "--status-file", str(status_file)]
    if depth is not None:
        boot[2:2] = ["--depth", str(depth)]
    check_unsupported(cmd)
    torchrun = split_torchrun(cmd)
    if torchrun is not None:
        return torchrun_command(torchrun, boot)
    if first.endswith(".py") or first.endswith(".pyz"):
        if not Path(first).exists():
            raise InputError(f"{first}: no such file")
        return [sys.executable, "-m", BOOTSTRAP, *boot, *cmd], []
    if _PYTHON.match(Path(first).name):
        interpreter = first if os.sep in first else sys.executable
        flags, rest = _interpreter_flags(cmd[1:])
        if not rest or rest[0] == "-":
            raise InputError(f"{' '.join(cmd)}: name a script, -m module or -c code to run")
        if not rest[0].startswith("-") and not Path(rest[0]).exists():
            raise InputError(f"{rest[0]}: no such file")
        return [interpreter, *flags, "-m", BOOTSTRAP, *boot, *rest], []
    if shutil.which(first) is None:
        raise InputError(f"{first}: command not found")
    warning = f"{first} is not a Python program: it runs without annotation ranges"
    return list(cmd), [warning] if annotate != "none" else []


def _interpreter_flags(args: list[str]) -> tuple[list[str], list[str]]:
    flags: list[str] = []
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-", "--"):
        flag = rest.pop(0)
        flags.append(flag)
        if flag in _FLAGS_WITH_VALUE and rest:
            flags.append(rest.pop(0))
    if rest and rest[0] == "--":
        rest.pop(0)
    return flags, rest


def profile_program(
    cmd: list[str],
    *,
    out_dir: str | os.PathLike[str],
    annotate: str = "modules",
    depth: int | None = None,
    nsys: str | os.PathLike[str] | None = None,
    nsys_args: str | list[str] | None = None,
    delay: float | None = None,
    duration: float | None = None,
    timeout: float | None = None,
    finalize_timeout: float | None = None,
    nsys_timeout: float | None = None,
    name: str = "profile",
    echo: bool = True,
    show_nsys: bool = False,
) -> ProfileRun:
    """Run ``cmd`` under ``nsys profile``; write ``<out_dir>/<name>.nsys-rep`` and ``.sqlite``.

    ``timeout`` bounds the whole run (None: the program may run as long as it needs);
    ``finalize_timeout`` bounds nsys after the program ended; ``nsys_timeout`` bounds every
    stage that waits on nsys (None: each stage's default or ``$DLPROF_NSYS_TIMEOUT``; it is
    also the default of ``finalize_timeout``). ``annotate`` is one of
    ``annotate.LEVELS`` (``auto`` means the default, ``modules``). ``echo``: the program's
    output reaches this process's stdout/stderr (else it is dropped); ``show_nsys``: nsys's
    own messages are copied to stderr as they come (else only its warnings are kept).
    Raises :class:`NsysError` when nsys is missing or produced no report.
    """
    tool = find_nsys(nsys, timeout=nsys_timeout)
    limits = Limits(stage_timeout("profile start-up", nsys_timeout),
                    finalize_timeout or stage_timeout("profile finalize", nsys_timeout), timeout)
    annotate = "modules" if annotate in ("auto", None) else check_level(annotate)
    check_depth(depth)
    extra = split_nsys_args(nsys_args)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / name
    with tempfile.TemporaryDirectory(prefix="dlprof-lite-") as tmp:
        status_dir = Path(tmp)
        program, warnings = program_command(
            cmd, annotate=annotate, depth=depth, status_file=status_dir / STATUS_PATTERN
        )
        launcher = split_torchrun(cmd) is not None
        with program_streams(echo) as fds:
            wrapped = redirected(program, fds, str(status_dir / START_MARKER))
            args = profile_args(tool, base, wrapped, delay=delay, duration=duration, extra=extra)
            sinks = (sys.stdout if echo else None, sys.stderr if echo else None,
                     sys.stderr if show_nsys else None, fds is None)  # fmt: skip
            outcome = supervise(
                args, ended=lambda: _ended(status_dir, launcher),
                pids=lambda: _pids(status_dir), limits=limits,
                marker=str(status_dir / START_MARKER), tees=sinks, pass_fds=fds or (),
            )  # fmt: skip
        statuses = read_statuses(status_dir)
    warnings += outcome.warnings
    report = _find_report(base, outcome, tool, nsys_timeout)
    sqlite_path = export_sqlite(report, base.with_suffix(".sqlite"), nsys=tool,
                                timeout=nsys_timeout)  # fmt: skip
    warnings += nsys_notices(outcome.nsys_output)
    annotated = annotated_command(program)
    exit_code, more = _exit_code(statuses, outcome, launcher, duration, annotated)
    warnings += more
    lead = statuses[0] if statuses else {}
    if isinstance(lead.get("exit_code"), int):
        warnings += _status_warnings(lead, annotate, program, extra, tool)
    hint = None
    if annotated and annotate != "none" and lead.get("installed"):
        hint = _no_ranges_cause(lead, extra, tool)
    return ProfileRun(sqlite_path, report, exit_code, tuple(dict.fromkeys(warnings)), tuple(args),
                      tool, hint, tuple(statuses), launcher)  # fmt: skip


def _exit_code(
    statuses: list[dict[str, Any]],
    outcome: Outcome,
    launcher: bool,
    duration: float | None,
    annotated: bool,
) -> tuple[int, list[str]]:
    """The exit code to pass back, and warnings about how it was found."""
    if outcome.signal is not None:
        # The user's interrupt decides the exit code (130 for Ctrl-C, 143 for SIGTERM),
        # whatever the program did with it (caught it, exited 0, or ended without a status).
        name = signal.Signals(outcome.signal).name
        return 128 + outcome.signal, [f"the run was stopped by {name}: the report holds what "
                                      "nsys captured until then"]  # fmt: skip
    codes = [s.get("exit_code") for s in statuses]
    reported = bool(codes) and all(isinstance(code, int) for code in codes)
    warnings = [f"rank {s.get('rank')} exited with code {s['exit_code']}" for s in statuses
                if launcher and s.get("exit_code")]  # fmt: skip
    if launcher and not statuses and annotated:
        warnings.append("no worker of the launcher started (see its messages above), or the "
                        "workers' Python cannot import dlprof-lite")  # fmt: skip
    if launcher and not outcome.warnings:
        return outcome.returncode, warnings  # nsys passes the launcher's own exit code back
    if reported:
        return next((int(c) for c in codes if c), 0), warnings
    if duration is not None and not outcome.warnings:
        # nsys's --kill default ended the program when the window closed: that is success.
        return 0, [*warnings, f"the program was stopped when --duration {duration:g} s ended "
                              "(--nsys-args='--kill=none' lets it run to its end)"]  # fmt: skip
    if annotated:
        warnings.append("the program ended without its status (killed by a signal, or "
                        "dlprof-lite is not importable by its interpreter)")  # fmt: skip
    return outcome.returncode, warnings


def read_statuses(status_dir: Path) -> list[dict[str, Any]]:
    """Every process's status in ``status_dir``, rank 0 first."""
    found = [_read_status(path) for path in status_dir.glob(STATUS_PATTERN.format(rank="*"))]
    found = [status for status in found if status]
    return sorted(found, key=lambda s: (not isinstance(s.get("rank"), int), s.get("rank") or 0))


def _ended(status_dir: Path, launcher: bool) -> bool:
    """Whether the program (every local worker, under a launcher) has ended."""
    statuses = read_statuses(status_dir)
    done = [s for s in statuses if s.get("exit_code") is not None]
    if not done:
        return False
    expected = done[0].get("local_world_size") if launcher else 1
    return len(done) >= (expected if isinstance(expected, int) and expected > 0 else 1)


def _pids(status_dir: Path) -> list[int]:
    return [s["pid"] for s in read_statuses(status_dir) if isinstance(s.get("pid"), int)]


def _read_status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _find_report(base: Path, outcome: Outcome, tool: Nsys, timeout: float | None) -> Path:
    """The report nsys wrote, importing a ``.qdstrm`` it could not import itself."""
    for suffix in PROFILE_SUFFIXES:
        report = base.with_name(base.name + suffix)
        if report.is_file():
            return report
    streams = [base.with_name(base.name + ".qdstrm")]
    streams += [Path(found) for found in _GENERATING.findall(outcome.nsys_output)]
    why = reason_line(outcome.nsys_output)
    for stream in (s for s in streams if s.is_file()):
        try:
            return import_qdstrm(stream, tool, output=base.with_name(base.name + ".nsys-rep"),
                                 timeout=timeout)  # fmt: skip
        except NsysError as err:
            if outcome.signal is None:
                raise
            why = str(err)
    if outcome.signal is not None:
        # nsys writes after SIGINT/SIGTERM/SIGHUP reach us alone; when its agent got the
        # signal too (a scheduler signalling every process of a job) it ends unwritten.
        name = signal.Signals(outcome.signal).name
        error = NsysError(
            f"nsys wrote no report after {name} (exit code {outcome.returncode}: {why}); if "
            "every process of the job was signalled, nsys's own agent was stopped too: signal "
            "dlprof-lite alone (Slurm: '#SBATCH --signal=B:TERM@120' and 'exec dlprof-lite "
            "...' in the batch script)"
        )
        error.exit_code = 128 + outcome.signal
        raise error
    raise NsysError(f"nsys profile wrote no report (exit code {outcome.returncode}): {why}")


def _status_warnings(
    status: dict[str, Any],
    annotate: str,
    program: list[str],
    extra: list[str],
    tool: Nsys,
) -> list[str]:
    """What the user should know about the annotation (the exit code is the caller's to show)."""
    warnings: list[str] = []
    if not annotated_command(program) or annotate == "none":
        return warnings
    if status.get("error"):
        warnings.append(str(status["error"]))  # nvtx missing: annotation never started
    elif not status.get("torch_imported"):
        warnings.append("the program never imported torch: no module or phase ranges")
    elif not status.get("installed"):
        warnings.append(_no_ranges_cause(status, extra, tool))
    elif not status.get("optimizer_steps") and not status.get("iterations"):
        # A script that starts its own workers (torch.multiprocessing.spawn) trains in
        # processes the bootstrap never ran in: the commonest way to get here with DDP.
        warnings.append("no optimizer step was seen, so no iteration ranges: name the step's "
                        "own range with --key-range REGEX; a script that starts its own "
                        "workers (torch.multiprocessing.spawn) trains outside the profiled "
                        "process: start them with torchrun instead")  # fmt: skip
    return warnings


def _no_ranges_cause(status: dict[str, Any], extra: list[str], tool: Nsys) -> str:
    head = "annotation was on but no dlprof-lite NVTX ranges arrived in the profile: "
    if not status.get("installed"):
        head += "no NVTX tool was attached to the program; "
    traces = [arg.split("=", 1)[-1] for arg in extra if arg.startswith(("--trace", "-t"))]
    if traces and not any("nvtx" in t.split(",") for t in traces):
        return head + "--nsys-args replaced --trace without nvtx; add nvtx to it"
    version = str(status.get("nvtx_version") or "?")
    numbers = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if numbers >= (0, 2, 12) and tool.version < (2023,):
        return head + (f"the program's nvtx {version} asks nsys {tool.version_string} "
                       "nvtxDomainIsEnabled, which it answers no; pip install 'nvtx<=0.2.11' "
                       "or use a newer nsys")  # fmt: skip
    return head + (f"nvtx {version}, nsys {tool.version_string}: check that nvtx tracing is "
                   "on and that the profiled process is the one that imported torch")  # fmt: skip
