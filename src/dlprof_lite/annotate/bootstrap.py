"""Run a user's Python program as ``__main__`` with annotation switched on, unchanged.

    python -m dlprof_lite.annotate.bootstrap [--annotate modules|modules-all|phases|none]
        [--depth N] [--status-file PATH] (script.py | -m package | -c code) [args...]

This is what ``nsys profile`` runs for ``dlprof-lite train.py``. The program sees its own
``sys.argv`` (``[script.py, args...]``) and ``sys.path[0]`` (the script's folder, or the
working directory for ``-m`` and ``-c``), as if started by ``python`` itself.

torch is not imported here: a finder on ``sys.meta_path`` waits for the program's own
``import torch`` and installs the hooks (:func:`dlprof_lite.annotate.install`) right after
it, so a script that sets environment variables before importing torch keeps working.

The status file (JSON, written atomically) tells the launcher what happened: the program's
pid at start; at the end its exit code, whether torch was imported and hooks installed, how
many iterations and optimizer steps were seen, and the ``nvtx`` version in use.

Under a distributed launcher every rank runs this bootstrap: ``{rank}`` in the status file's
name is replaced by the process's ``RANK``, so each rank writes its own, and the ``process``
run fact (rank, local rank, world size from the launcher's environment, nulls outside one;
the torch, CUDA and Python versions and ``sys.argv`` as the program sees them) is recorded
right after the hooks are installed. ``torch.distributed.launch`` passes
``--local-rank=N`` before the program's arguments; it is handed on to the program, where the
launcher would have put it.
"""

from __future__ import annotations

import json
import os
import platform
import runpy
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from dlprof_lite.annotate import facts
from dlprof_lite.annotate.after_import import AfterImport
from dlprof_lite.annotate.hooks import LEVELS, Annotation, install

USAGE = (
    "usage: python -m dlprof_lite.annotate.bootstrap [--annotate modules|modules-all|phases|none] "
    "[--depth N] [--status-file PATH] (script.py | -m module | -c code) [args...]"
)


@dataclass
class Options:
    annotate: str = "modules"
    depth: int | None = None
    status_file: str | None = None
    kind: str = "script"  # script, module or code
    target: str = ""
    args: list[str] = field(default_factory=list)
    local_rank_arg: str | None = None  # --local-rank=N from torch.distributed.launch


def parse_args(argv: list[str]) -> Options:
    """The bootstrap's own options, then the program; ``ValueError`` with a usage line."""
    opts = Options()
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--annotate", "--depth", "--status-file", "-m", "-c"):
            if not rest:
                raise ValueError(f"{arg} needs a value\n{USAGE}")
            value = rest.pop(0)
            if arg == "--annotate":
                if value not in LEVELS:
                    raise ValueError(f"--annotate must be one of {', '.join(LEVELS)}")
                opts.annotate = value
            elif arg == "--depth":
                if not value.isdigit():
                    raise ValueError(f"--depth must be a non-negative integer, not {value!r}")
                opts.depth = int(value)
            elif arg == "--status-file":
                opts.status_file = value
            else:
                opts.kind = "module" if arg == "-m" else "code"
                opts.target, opts.args = value, rest
                return _with_local_rank(opts)
        elif arg == "--":
            continue
        elif arg.startswith(("--local-rank=", "--local_rank=")):
            opts.local_rank_arg = arg
        elif arg.startswith("-"):
            raise ValueError(f"unknown option {arg}\n{USAGE}")
        else:
            opts.target, opts.args = arg, rest
            return _with_local_rank(opts)
    raise ValueError(f"no program to run\n{USAGE}")


def _with_local_rank(opts: Options) -> Options:
    if opts.local_rank_arg is not None:
        opts.args = [opts.local_rank_arg, *opts.args]
    return opts


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else None


def process_fact() -> dict[str, int | None]:
    """The launcher's view of this process: torchrun, torch.distributed.launch and
    accelerate set ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; nulls outside a launcher."""
    return {"rank": _env_int("RANK"), "local_rank": _env_int("LOCAL_RANK"),
            "world_size": _env_int("WORLD_SIZE")}  # fmt: skip


ARGV_CHARS = 4096  # the command kept in the fact; a mark is a trace event, not a file


def runtime_fact() -> dict[str, Any]:
    """What the program runs on, as it sees it: torch and its CUDA (from the torch it has
    imported; never imported here), Python, and its own ``sys.argv``, cut to
    :data:`ARGV_CHARS` characters (``argv_truncated`` then says so). Cheap: no subprocess,
    no file read."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    argv: list[str] = []
    used, truncated = 0, False
    for arg in (str(a) for a in sys.argv):
        if used + len(arg) > ARGV_CHARS:
            argv += [arg[: ARGV_CHARS - used]] if used < ARGV_CHARS else []
            truncated = True
            break
        argv.append(arg)
        used += len(arg)
    return {
        "torch": None if version is None else str(version),
        "cuda": None if cuda is None else str(cuda),
        "python": platform.python_version(),
        "argv": argv,
        **({"argv_truncated": True} if truncated else {}),
    }


def status_path(pattern: str | None) -> str | None:
    """The status file of this process: ``{rank}`` replaced by its rank (0 outside a launcher)."""
    if not pattern:
        return None
    rank = _env_int("RANK")
    return pattern.replace("{rank}", str(rank if rank is not None else 0))


class Session:
    """Annotation for one program run: installed on ``import torch``, closed at the end."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.annotation = Annotation()
        self.torch_imported = False
        self.error: str | None = None

    def arm(self) -> None:
        if self.opts.annotate == "none":
            return
        if "torch" in sys.modules:
            self._install()
        else:
            sys.meta_path.insert(0, AfterImport("torch", self._install))

    def _install(self) -> None:
        self.torch_imported = True
        try:
            self.annotation = install(self.opts.annotate, self.opts.depth)
        except ImportError as exc:  # nvtx missing: run the program anyway
            self.error = f"annotation off: {exc}"
            print(f"dlprof-lite: warning: {self.error}", file=sys.stderr)
            return
        if self.annotation.active:
            facts.record("process", {**process_fact(), **runtime_fact()})

    def status(self, exit_code: int) -> dict[str, Any]:
        tracker = self.annotation.tracker
        backend = tracker.backend if tracker is not None else None
        return {
            **_identity(),
            "exit_code": exit_code,
            "annotate": self.opts.annotate,
            "torch_imported": self.torch_imported,
            "installed": self.annotation.active,
            "iterations": tracker.iterations if tracker else 0,
            "optimizer_steps": tracker.steps if tracker else 0,
            "nvtx_version": backend.nvtx_version if backend else None,
            "error": self.error,
        }


def _identity() -> dict[str, Any]:
    return {"pid": os.getpid(), **process_fact(),
            "local_world_size": _env_int("LOCAL_WORLD_SIZE")}  # fmt: skip


def write_status(path: str | None, status: dict[str, Any]) -> None:
    """Write ``status`` as JSON to ``path`` atomically (nothing when ``path`` is None)."""
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(status, out)
    os.replace(tmp, path)


def _exit_code(exc: BaseException | None) -> int:
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


def run_program(opts: Options) -> None:
    """Run the program the way ``python`` would, with ``sys.argv`` and ``sys.path[0]`` set."""
    if opts.kind == "module":
        sys.argv = [opts.target, *opts.args]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(opts.target, run_name="__main__", alter_sys=True)
    elif opts.kind == "code":
        sys.argv = ["-c", *opts.args]
        sys.path[0] = ""
        main = ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(opts.target, "<string>", "exec"), main.__dict__)
    else:
        sys.argv = [opts.target, *opts.args]
        sys.path[0] = os.path.dirname(os.path.abspath(opts.target))
        runpy.run_path(opts.target, run_name="__main__")


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"dlprof-lite bootstrap: error: {exc}", file=sys.stderr)
        return 2
    opts.status_file = status_path(opts.status_file)
    session = Session(opts)
    write_status(opts.status_file, {**_identity(), "exit_code": None})
    session.arm()
    failure: BaseException | None = None
    try:
        run_program(opts)
    except BaseException as exc:  # the program's exit or crash, reported after the status
        failure = exc
    finally:
        session.annotation.close()
        write_status(opts.status_file, session.status(_exit_code(failure)))
    if failure is not None:
        raise failure
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
