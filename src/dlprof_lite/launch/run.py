"""Profile a program: ``nsys profile`` around the bootstrap, then export the SQLite.

``dlprof-lite train.py args`` becomes, as one argument list,

    nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn --sample=none --cpuctxsw=none
        --output=<out_dir>/profile --force-overwrite=true [--delay/--duration] [--nsys-args]
        <python> -m dlprof_lite.annotate.bootstrap --annotate modules
        --status-file <tmp>/status.json train.py args

The bootstrap's status file carries the program's exit code (passed back whatever nsys
returns) and tells when the program has ended: from then on nsys gets ``finalize_timeout``
seconds to write its report before it is stopped (a hung nsys agent, see NSYS.md), and a
``.qdstrm`` it left behind is imported. A program that fails still gets its report.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from dlprof_lite.annotate.hooks import check_depth, check_level
from dlprof_lite.errors import InputError, NsysError
from dlprof_lite.launch.nsys import (
    REPORT_SUFFIXES,
    Nsys,
    export_sqlite,
    find_nsys,
    import_qdstrm,
    last_line,
    profile_args,
    split_nsys_args,
)

FINALIZE_TIMEOUT_S = 600.0
BOOTSTRAP = "dlprof_lite.annotate.bootstrap"
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_FLAGS_WITH_VALUE = ("-X", "-W")
_GENERATING = re.compile(r"Generating '([^']+\.qdstrm)'")
_TAIL_BYTES = 64 * 1024


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


def program_command(
    cmd: list[str], *, annotate: str, depth: int | None, status_file: Path
) -> tuple[list[str], list[str]]:
    """The argument list nsys runs for ``cmd``, and warnings about it.

    ``script.py args``, ``python [flags] script.py|-m module|-c code args`` run under the
    bootstrap (a bare ``python``/``python3`` means this interpreter, ``sys.executable``; a
    path to another one must have dlprof-lite installed); anything else runs as is.
    """
    if not cmd:
        raise InputError("no program to profile")
    first = cmd[0]
    boot = ["-m", BOOTSTRAP, "--annotate", annotate, "--status-file", str(status_file)]
    if depth is not None:
        boot[4:4] = ["--depth", str(depth)]
    if first.endswith(".py") or first.endswith(".pyz"):
        if not Path(first).exists():
            raise InputError(f"{first}: no such file")
        return [sys.executable, *boot, *cmd], []
    if _PYTHON.match(Path(first).name):
        interpreter = first if os.sep in first else sys.executable
        flags, rest = _interpreter_flags(cmd[1:])
        if not rest or rest[0] == "-":
            raise InputError(f"{' '.join(cmd)}: name a script, -m module or -c code to run")
        if not rest[0].startswith("-") and not Path(rest[0]).exists():
            raise InputError(f"{rest[0]}: no such file")
        return [interpreter, *flags, *boot, *rest], []
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
    finalize_timeout: float = FINALIZE_TIMEOUT_S,
    name: str = "profile",
    echo: bool = True,
) -> ProfileRun:
    """Run ``cmd`` under ``nsys profile``; write ``<out_dir>/<name>.nsys-rep`` and ``.sqlite``.

    ``timeout`` bounds the whole run (None: the program may run as long as it needs);
    ``finalize_timeout`` bounds nsys after the program ended. ``annotate`` is one of
    ``annotate.LEVELS`` (``auto`` means the default, ``modules``). ``echo`` forwards the program's
    and nsys's output to this process's stdout/stderr (it is captured either way).
    Raises :class:`NsysError` when nsys is missing or produced no report.
    """
    tool = find_nsys(nsys)
    annotate = "modules" if annotate in ("auto", None) else check_level(annotate)
    check_depth(depth)
    extra = split_nsys_args(nsys_args)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / name
    with tempfile.TemporaryDirectory(prefix="dlprof-lite-") as tmp:
        status_file = Path(tmp) / "status.json"
        program, warnings = program_command(
            cmd, annotate=annotate, depth=depth, status_file=status_file
        )
        args = profile_args(tool, base, program, delay=delay, duration=duration, extra=extra)
        outcome = _supervise(args, status_file, timeout, finalize_timeout, echo)
        status = _read_status(status_file)
    warnings += outcome.warnings
    report = _find_report(base, outcome, tool)
    sqlite_path = export_sqlite(report, base.with_suffix(".sqlite"), nsys=tool)
    exit_code = status.get("exit_code")
    if not isinstance(exit_code, int) and duration is not None and not outcome.warnings:
        # nsys's --kill default ended the program when the window closed: that is success.
        warnings.append(f"the program was stopped when --duration {duration:g} s ended "
                        "(--nsys-args='--kill=none' lets it run to its end)")  # fmt: skip
        exit_code = 0
    elif not isinstance(exit_code, int):
        exit_code = outcome.returncode
        if BOOTSTRAP in program:
            warnings.append("the program ended without its status (killed by a signal, or "
                            "dlprof-lite is not importable by its interpreter)")  # fmt: skip
    else:
        warnings += _status_warnings(status, annotate, program, extra, tool)
    hint = None
    if BOOTSTRAP in program and annotate != "none" and status.get("installed"):
        hint = _no_ranges_cause(status, extra, tool)
    return ProfileRun(sqlite_path, report, exit_code, tuple(warnings), tuple(args), tool, hint)


@dataclass
class _Outcome:
    returncode: int
    output_tail: str
    warnings: list[str]


class _Tee(threading.Thread):
    """Copies a child's stream to ours (when echoing) and keeps its last bytes."""

    def __init__(self, source: IO[bytes], sink: IO[Any] | None) -> None:
        super().__init__(daemon=True)
        self.source = source
        self.sink = getattr(sink, "buffer", None) if sink is not None else None
        self.text_sink = sink if sink is not None and self.sink is None else None
        self.tail = bytearray()

    def run(self) -> None:
        fd = self.source.fileno()
        while chunk := os.read(fd, 65536):
            self.tail += chunk
            del self.tail[:-_TAIL_BYTES]
            try:
                if self.sink is not None:
                    self.sink.write(chunk)
                    self.sink.flush()
                elif self.text_sink is not None:
                    self.text_sink.write(chunk.decode(errors="replace"))
            except (OSError, ValueError):
                self.sink = self.text_sink = None  # our stdout went away; keep draining


def _supervise(
    args: list[str], status_file: Path, timeout: float | None, finalize: float, echo: bool
) -> _Outcome:
    """Run nsys; stop it when it outlives the program by ``finalize`` s or runs past ``timeout``."""
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise NsysError(f"nsys could not start: {exc}") from None
    tees = [_Tee(cast(IO[bytes], proc.stdout), sys.stdout if echo else None),
            _Tee(cast(IO[bytes], proc.stderr), sys.stderr if echo else None)]  # fmt: skip
    for tee in tees:
        tee.start()
    warnings: list[str] = []
    started = time.monotonic()
    ended_at: float | None = None
    interrupted = False
    while True:
        try:
            proc.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt:
            if interrupted:
                _stop(proc, status_file)
                raise
            interrupted = True  # let nsys stop collecting and write what it has
            _signal_group(proc.pid, signal.SIGINT)
        now = time.monotonic()
        if ended_at is None and _read_status(status_file).get("exit_code") is not None:
            ended_at = now
        if ended_at is not None and now - ended_at > finalize:
            warnings.append(f"nsys was still running {finalize:g} s after the program ended; "
                            "it was stopped and its report recovered if possible")  # fmt: skip
            _stop(proc, status_file)
            break
        if timeout is not None and now - started > timeout:
            warnings.append(f"the run was stopped after --timeout {timeout:g} s")
            _stop(proc, status_file)
            break
    for tee in tees:
        tee.join(timeout=10)
    tail = b"".join(bytes(tee.tail) for tee in tees).decode(errors="replace")
    return _Outcome(proc.returncode if proc.returncode is not None else -9, tail, warnings)


def _signal_group(pgid: int, sig: int) -> None:
    if pgid == os.getpgrp():
        return  # never signal our own group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop(proc: subprocess.Popen[bytes], status_file: Path) -> None:
    """SIGTERM nsys's process group and the program's, then SIGKILL after a grace period."""
    groups = {proc.pid}
    pid = _read_status(status_file).get("pid")
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            _signal_group(group, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _find_report(base: Path, outcome: _Outcome, tool: Nsys) -> Path:
    """The report nsys wrote, importing a ``.qdstrm`` it could not import itself."""
    for suffix in REPORT_SUFFIXES:
        report = base.with_name(base.name + suffix)
        if report.is_file():
            return report
    streams = [base.with_name(base.name + ".qdstrm")]
    streams += [Path(found) for found in _GENERATING.findall(outcome.output_tail)]
    for stream in streams:
        if stream.is_file():
            return import_qdstrm(stream, tool, output=base.with_name(base.name + ".nsys-rep"))
    raise NsysError(
        f"nsys profile wrote no report (exit code {outcome.returncode}): "
        f"{last_line(outcome.output_tail)}"
    )


def _status_warnings(
    status: dict[str, Any],
    annotate: str,
    program: list[str],
    extra: list[str],
    tool: Nsys,
) -> list[str]:
    """What the user should know about the annotation (the exit code is the caller's to show)."""
    warnings: list[str] = []
    if BOOTSTRAP not in program or annotate == "none":
        return warnings
    if status.get("error"):
        warnings.append(str(status["error"]))  # nvtx missing: annotation never started
    elif not status.get("torch_imported"):
        warnings.append("the program never imported torch: no module or phase ranges")
    elif not status.get("installed"):
        warnings.append(_no_ranges_cause(status, extra, tool))
    elif not status.get("optimizer_steps"):
        warnings.append("no optimizer step was seen, so no iteration ranges: "
                        "name the step's own range with --key-range REGEX")  # fmt: skip
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
