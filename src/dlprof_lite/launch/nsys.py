"""The nsys command line: find it, build its argument lists, run it bounded, export SQLite.

Every nsys call is an argument list (never a shell string) run with a timeout and its
output captured; failures become one-line :class:`~dlprof_lite.errors.NsysError` messages.
Traps handled here (see ../shared/NSYS.md):

- Debian splits nsys in two folders and ``nsys profile`` may then leave only a ``.qdstrm``:
  :func:`import_qdstrm` turns it into a report with ``QdstrmImporter`` when one is found;
- nsys 2022.4 exports reports from 2022.4 and older only; newer ones fail with
  ``Version number is invalid`` or a ``ProtobufParseException``, reported as such;
- CPU sampling can hang the agent in VMs: the defaults switch it off (:data:`PROFILE_DEFAULTS`);
- any stage may hang (a broken install, a stuck agent): each one is bounded
  (:func:`stage_timeout`, ``--nsys-timeout``/``DLPROF_NSYS_TIMEOUT``), runs in a session of
  its own and on timeout or interrupt its whole process group is stopped, so no child stays.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlprof_lite.errors import InputError, NsysError
from dlprof_lite.rules.inputs import PROFILE_SUFFIXES, QDSTRM_SUFFIX, suffix_of

# DLProf's defaults (``-t cuda,nvtx -s none``) plus the OS runtime and math libraries.
PROFILE_DEFAULTS = (
    "--trace=cuda,nvtx,osrt,cublas,cudnn",
    "--sample=none",
    "--cpuctxsw=none",
)
# How long each stage that waits on nsys may take by default (seconds). Generous: a large
# report takes minutes to write and export; --nsys-timeout or DLPROF_NSYS_TIMEOUT sets one
# limit for every stage instead.
STAGE_TIMEOUTS = {
    "version probe": 60.0,
    "profile start-up": 300.0,
    "profile finalize": 600.0,
    "export": 600.0,
    "import": 600.0,
}
TIMEOUT_ENV = "DLPROF_NSYS_TIMEOUT"
TIMEOUT_HINT = f"raise --nsys-timeout (or {TIMEOUT_ENV}) if nsys needs longer"
EXPORT_TIMEOUT_S = STAGE_TIMEOUTS["export"]
IMPORT_TIMEOUT_S = STAGE_TIMEOUTS["import"]
VERSION_TIMEOUT_S = STAGE_TIMEOUTS["version probe"]
INSTALL_HINT = (
    "install Nsight Systems (https://developer.nvidia.com/nsight-systems; on Debian: "
    "scripts/install_nsys.sh) and put nsys on PATH, or pass --nsys PATH"
)
# Where Debian's package puts the importer when it is not beside the nsys binary.
KNOWN_IMPORTERS = (Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter"),)
_NEWER_REPORT = re.compile(r"Version number is invalid|ProtobufParseException")
_VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")
# Long switches whose short forms a user may pass in --nsys-args.
_SHORT = {"-t": "--trace", "-s": "--sample", "-o": "--output", "-y": "--delay",
          "-d": "--duration", "-f": "--force-overwrite", "-b": "--backtrace"}  # fmt: skip


@dataclass(frozen=True)
class Nsys:
    """One nsys executable and its version, e.g. ``(2022, 4, 2, 1)``."""

    path: str
    version: tuple[int, ...]
    version_text: str

    @property
    def version_string(self) -> str:
        return ".".join(str(part) for part in self.version) or "unknown"


def stage_timeout(stage: str, explicit: float | None = None) -> float:
    """The time limit of one nsys stage: ``explicit``, else ``$DLPROF_NSYS_TIMEOUT``, else
    the stage's default (:data:`STAGE_TIMEOUTS`)."""
    if explicit is not None:
        return check_timeout(explicit, "--nsys-timeout")
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return STAGE_TIMEOUTS[stage]
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{TIMEOUT_ENV}={text!r}: not a number of seconds") from None
    return check_timeout(value, TIMEOUT_ENV)


def check_timeout(value: float, name: str) -> float:
    if not value > 0 or value == float("inf"):  # NaN fails both comparisons
        raise InputError(f"{name} must be a positive number of seconds, not {value}")
    return float(value)


def find_nsys(explicit: str | os.PathLike[str] | None = None, *,
              timeout: float | None = None) -> Nsys:  # fmt: skip
    """The nsys to use: ``explicit`` (a path or a name on PATH), else ``nsys`` on PATH.

    ``timeout`` bounds ``nsys --version`` (None: :func:`stage_timeout`)."""
    wanted = os.fspath(explicit) if explicit else "nsys"
    path = shutil.which(wanted)
    if path is None:
        where = f"{wanted!r} is not an executable" if explicit else "nsys is not on PATH"
        raise NsysError(f"Nsight Systems not found: {where}; {INSTALL_HINT}")
    limit = stage_timeout("version probe", timeout)
    done = run_bounded([path, "--version"], limit, f"'{path} --version'", "version probe")
    text = (done.stdout + done.stderr).strip()
    match = _VERSION.search(text)
    if done.returncode != 0 or match is None:
        raise NsysError(f"{path} does not look like nsys: '{path} --version' said {text!r}")
    version = tuple(int(part) for part in match.groups() if part is not None)
    return Nsys(path, version, text)


def split_nsys_args(nsys_args: str | list[str] | None) -> list[str]:
    """``--nsys-args`` as a list: a string is split like a POSIX shell would (no shell runs)."""
    if nsys_args is None:
        return []
    if isinstance(nsys_args, str):
        try:
            return shlex.split(nsys_args)
        except ValueError as exc:
            raise InputError(f"--nsys-args {nsys_args!r}: {exc}") from None
    return list(nsys_args)


def _switch(arg: str) -> str | None:
    """The long name of a command-line switch (``-t`` → ``--trace``), else None."""
    if not arg.startswith("-"):
        return None
    name = arg.split("=", 1)[0]
    return _SHORT.get(name, name)


def merge_switches(defaults: list[str], overrides: list[str]) -> list[str]:
    """``defaults`` without the switches ``overrides`` names, then ``overrides``."""
    named = {_switch(arg) for arg in overrides} - {None}
    kept: list[str] = []
    skip_value = False
    for arg in defaults:
        if skip_value:
            skip_value = False
            continue
        if _switch(arg) in named:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept + overrides


def profile_args(
    nsys: Nsys,
    output: Path,
    program: list[str],
    *,
    delay: float | None = None,
    duration: float | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """``nsys profile`` for ``program``, writing ``output`` + ``.nsys-rep`` (no export)."""
    if any(_switch(arg) == "--output" for arg in extra or []):
        raise InputError("--nsys-args may not set --output: dlprof-lite names the report")
    defaults = [*PROFILE_DEFAULTS, f"--output={output}", "--force-overwrite=true"]
    if delay is not None:
        defaults.append(f"--delay={_seconds(delay, '--delay')}")
    if duration is not None:
        defaults.append(f"--duration={_seconds(duration, '--duration')}")
    return [nsys.path, "profile", *merge_switches(defaults, extra or []), *program]


def _seconds(value: float, option: str) -> str:
    if value < 0 or (option == "--duration" and value == 0):
        raise InputError(f"{option} must be a positive number of seconds, not {value}")
    return str(int(value)) if float(value).is_integer() else str(value)


def export_args(nsys: Nsys, report: Path, out: Path) -> list[str]:
    return [nsys.path, "export", "--type=sqlite", f"--output={out}",
            "--force-overwrite=true", str(report)]  # fmt: skip


def run_bounded(
    args: list[str], timeout: float, what: str, stage: str = "nsys"
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` with captured output, in a session of its own; a timeout or a missing
    binary is an NsysError naming the ``stage``. On timeout or interrupt the whole process
    group is killed: ``subprocess.run`` would kill only the direct child, leaving e.g. the
    ``sleep`` of a hung wrapper script running."""
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise NsysError(f"{what} could not start: {exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise NsysError(f"nsys hung in the {stage} stage: {what} did not finish within "
                        f"{timeout:g} s and was stopped; {TIMEOUT_HINT}") from None  # fmt: skip
    except BaseException:
        kill_group(proc)
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc``'s process group (it leads one) and wait for ``proc``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def last_line(text: str) -> str:
    """The last meaningful line of nsys output (progress bars and blank lines dropped)."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not re.search(r"\[=*\d+%", line)]
    return lines[-1] if lines else "(no output)"


_REASON = re.compile(
    r"(?i)illegal|invalid|unrecogni[sz]ed|error|failed|no such|not found|"
    r"cannot|unable|not supported"
)
_BOILERPLATE = re.compile(r"^(usage: nsys|Try 'nsys)")


def reason_line(text: str) -> str:
    """The line of nsys output that says why it failed: the first error-like line (nsys
    ends a usage error with its usage lines), else the last meaningful one."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not re.search(r"\[=*\d+%", line)
             and not _BOILERPLATE.match(line)]  # fmt: skip
    found = next((line for line in lines if _REASON.search(line)), None)
    return found or (lines[-1] if lines else "(no output)")


def export_sqlite(
    report_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    nsys: Nsys | str | None = None,
    timeout: float | None = None,
) -> Path:
    """Export an ``.nsys-rep``/``.qdrep`` (or a lone ``.qdstrm``) to SQLite at ``out_path``.

    The input is never modified; the export is written beside ``out_path`` under a temporary
    name and renamed when complete, so a failed export leaves nothing behind. ``timeout``
    bounds each nsys call (None: :func:`stage_timeout`).
    """
    report = Path(report_path)
    out = Path(out_path)
    if not report.is_file():
        raise InputError(f"{report}: no such file")
    tool = nsys if isinstance(nsys, Nsys) else find_nsys(nsys, timeout=timeout)
    if suffix_of(report) == QDSTRM_SUFFIX:
        staged = out.with_name(f".{out.stem}.{os.getpid()}.imported.nsys-rep")
        try:
            import_qdstrm(report, tool, output=staged, timeout=timeout)
            return export_sqlite(staged, out, nsys=tool, timeout=timeout)
        finally:
            staged.unlink(missing_ok=True)
    if suffix_of(report) not in PROFILE_SUFFIXES:
        raise InputError(f"{report}: not an nsys report (.nsys-rep, .qdrep or .qdstrm)")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.stem}.{os.getpid()}.partial.sqlite")
    try:
        done = run_bounded(export_args(tool, report, partial), stage_timeout("export", timeout),
                           f"nsys export of {report}", "export")  # fmt: skip
        if done.returncode != 0 or not partial.is_file():
            raise NsysError(_export_failure(report, tool, done.stdout + done.stderr))
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _export_failure(report: Path, tool: Nsys, output: str) -> str:
    if _NEWER_REPORT.search(output):
        return (
            f"{report} was recorded by a newer Nsight Systems than the local nsys "
            f"{tool.version_string} can export; export it to .sqlite with that newer nsys "
            "(nsys export --type=sqlite) and analyse the .sqlite"
        )
    return f"nsys export of {report} failed: {last_line(output)}"


def find_importer(nsys: Nsys) -> Path | None:
    """``QdstrmImporter`` beside nsys's host folder, in Debian's place, or on PATH."""
    real = Path(os.path.realpath(nsys.path))
    candidates = [
        real.parent.parent / "host-linux-x64" / "QdstrmImporter",
        real.parent / "QdstrmImporter",
        *KNOWN_IMPORTERS,
    ]
    on_path = shutil.which("QdstrmImporter")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def import_qdstrm(
    qdstrm: Path, nsys: Nsys, *, output: Path | None = None, timeout: float | None = None
) -> Path:
    """Turn a ``.qdstrm`` that nsys could not import into a ``.nsys-rep`` (``output``)."""
    importer = find_importer(nsys)
    target = output or qdstrm.with_suffix(".nsys-rep")
    if importer is None:
        raise NsysError(
            f"nsys left only {qdstrm} and no QdstrmImporter was found to import it (a broken "
            "Nsight Systems install; on Debian link /usr/lib/nsight-systems/host-linux-x64 "
            "into /usr/lib/x86_64-linux-gnu/nsight-systems/, see scripts/install_nsys.sh)"
        )
    args = [str(importer), "--input-file", str(qdstrm), "--output-file", str(target),
            "--force-overwrite"]  # fmt: skip
    done = run_bounded(args, stage_timeout("import", timeout), f"QdstrmImporter on {qdstrm}",
                       "import")  # fmt: skip
    if done.returncode != 0 or not target.is_file():
        target.unlink(missing_ok=True)  # the importer saves a report even when it failed
        raise NsysError(import_failure(qdstrm, nsys, done.stdout + done.stderr))
    return target


_UNKNOWN_API = re.compile(r"Unknown (driver|runtime) API function index: (\d+)")
_QDSTRM_VERSION = re.compile(r"Qdstrm version (\S+) is not supported")


def import_failure(qdstrm: Path, nsys: Nsys, output: str) -> str:
    """Why QdstrmImporter failed, in one line: the two cases a version mismatch gives (a CUDA
    newer than the importer's tables, a ``.qdstrm`` of another release), else its last line."""
    unknown = sorted({f"{kind} API {index}" for kind, index in _UNKNOWN_API.findall(output)})
    if unknown:
        return (
            f"importing {qdstrm} failed: the trace holds CUDA calls that this Nsight Systems "
            f"({nsys.version_string}) has no names for ({', '.join(unknown)}): the program ran "
            "a newer CUDA than it knows; profile with an Nsight Systems at least as new as the "
            "program's CUDA"
        )
    version = _QDSTRM_VERSION.search(output)
    if version:
        return (
            f"importing {qdstrm} failed: it was written by Nsight Systems {version.group(1)}, "
            f"and only that release's QdstrmImporter reads it (this one is "
            f"{nsys.version_string})"
        )
    return f"importing {qdstrm} failed: {last_line(output)}"
