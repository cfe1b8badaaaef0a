"""Distributed launchers: start every ``torchrun`` worker through the bootstrap, name the rest.

``torchrun [opts] train.py args`` (also ``python -m torch.distributed.run`` and the older
``python -m torch.distributed.launch``) starts one Python process per rank itself, so wrapping
the launcher in the bootstrap would annotate only the launcher. Instead the command keeps
every launcher option and runs the bootstrap as the training module::

    torchrun [opts] -m dlprof_lite.annotate.bootstrap --status-file DIR/status-{rank}.json
        train.py args

``torchrun -m pkg.train`` becomes ``... -m bootstrap ... -m pkg.train``; ``--no-python
python train.py`` keeps ``--no-python`` and puts the bootstrap after the interpreter;
``--run-path`` runs the bootstrap's file. nsys traces the workers as children of the
launcher. Launchers that start ranks in other ways (``accelerate launch``, ``deepspeed``,
``mpirun``, ``srun``) are refused with one line saying what to run instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from dlprof_lite.errors import InputError

BOOTSTRAP = "dlprof_lite.annotate.bootstrap"
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
# torchrun's switches that take no value (torch/distributed/run.py and launch.py, 2.0 to
# 2.13; a test compares this with the installed parser). Every other option takes one.
TORCHRUN_FLAGS = frozenset({
    "-h", "--help", "--standalone", "-m", "--module", "--no-python", "--no_python",
    "--run-path", "--run_path", "--virtual-local-rank", "--virtual_local_rank",
    "--use-env", "--use_env",
})  # fmt: skip
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_MPI_HINT = (
    "{name} starts every rank itself, so dlprof-lite has to run inside it, one report per "
    "rank: {name} [options] dlprof-lite -o DIR_FOR_THIS_RANK train.py [args] (or start the "
    "ranks with torchrun: dlprof-lite -- torchrun --nproc_per_node=N train.py [args])"
)
_TORCHRUN_INSTEAD = (
    "start the same script with torchrun, which dlprof-lite runs each rank of: "
    "dlprof-lite -- torchrun --nproc_per_node=N train.py [args]"
)
UNSUPPORTED = {
    "accelerate": "accelerate launch starts its workers without dlprof-lite's annotation; "
    "Accelerator reads torchrun's environment, so " + _TORCHRUN_INSTEAD,
    "deepspeed": "the deepspeed launcher starts its ranks through its own runner; "
    "deepspeed.initialize reads torchrun's environment, so " + _TORCHRUN_INSTEAD,
    "mpirun": _MPI_HINT.format(name="mpirun"),
    "mpiexec": _MPI_HINT.format(name="mpiexec"),
    "orterun": _MPI_HINT.format(name="orterun"),
    "srun": _MPI_HINT.format(name="srun"),
    "horovodrun": _MPI_HINT.format(name="horovodrun"),
    "jsrun": _MPI_HINT.format(name="jsrun"),
}
UNSUPPORTED_MODULES = {"accelerate.commands.launch": "accelerate",
                       "deepspeed.launcher.runner": "deepspeed"}  # fmt: skip


@dataclass(frozen=True)
class TorchrunParts:
    """A torchrun command split at its training program."""

    launcher: list[str]  # the launcher itself: torchrun, or python [flags] -m torch...run
    options: list[str]  # torchrun's own options, as given
    module: bool  # -m/--module: the program is a module name
    no_python: bool  # --no-python: the program is an executable
    run_path: bool  # --run-path: the script runs in the worker via runpy
    program: list[str]  # the training script (or module, or executable) and its arguments


def check_unsupported(cmd: list[str]) -> None:
    """Raise a one-line :class:`InputError` for a launcher dlprof-lite cannot annotate."""
    name = Path(cmd[0]).name
    module = _python_module(cmd)
    if module in UNSUPPORTED_MODULES:
        name = UNSUPPORTED_MODULES[module]
    elif name not in UNSUPPORTED:
        return
    raise InputError(UNSUPPORTED[name])


def _python_module(cmd: list[str]) -> str | None:
    """The module of ``python [flags] -m module ...``, else None."""
    if not _PYTHON.match(Path(cmd[0]).name):
        return None
    for i, word in enumerate(cmd[1:-1], start=1):
        if word == "-m":
            return cmd[i + 1]
        if not word.startswith("-"):
            return None
    return None


def split_torchrun(cmd: list[str]) -> TorchrunParts | None:
    """``cmd`` split into launcher, options and program when it is torchrun, else None."""
    if Path(cmd[0]).name == "torchrun":
        launcher, rest = [cmd[0]], cmd[1:]
    elif _python_module(cmd) in TORCHRUN_MODULES:
        at = cmd.index("-m") + 2
        launcher, rest = cmd[:at], cmd[at:]
    else:
        return None
    options: list[str] = []
    while rest and rest[0].startswith("-") and rest[0] != "--":
        option = rest.pop(0)
        options.append(option)
        if _takes_value(option, rest):
            options.append(rest.pop(0))
    if rest[:1] == ["--"]:
        rest.pop(0)
    names = {option.split("=", 1)[0] for option in options}
    if not rest or names & {"-h", "--help"}:
        raise InputError(f"{Path(cmd[0]).name}: name the training script to run "
                         "(torchrun [options] train.py [args])")  # fmt: skip
    return TorchrunParts(
        launcher, options, bool(names & {"-m", "--module"}),
        bool(names & {"--no-python", "--no_python"}), bool(names & {"--run-path", "--run_path"}),
        rest,
    )  # fmt: skip


def _takes_value(option: str, rest: list[str]) -> bool:
    if "=" in option or option in TORCHRUN_FLAGS:
        return False
    if re.fullmatch(r"-[a-z]\S+", option):  # -r3: a short option with its value attached
        return False
    # An option newer than this table: it takes a value unless the script comes next.
    return bool(rest) and not rest[0].endswith((".py", ".pyz"))


def torchrun_command(parts: TorchrunParts, boot: list[str]) -> tuple[list[str], list[str]]:
    """The torchrun command that starts every worker through the bootstrap, and warnings.

    ``boot`` is the bootstrap's own options (``--annotate ... --status-file ...``).
    """
    launcher = _launcher(parts.launcher)
    program = parts.program
    if parts.no_python:
        if not _PYTHON.match(Path(program[0]).name):
            return [*launcher, *parts.options, *program], [
                f"torchrun --no-python runs {program[0]}, not Python: its workers run "
                "without annotation ranges"
            ]
        # A bare python means this interpreter, as for dlprof-lite python train.py.
        python = program[0] if os.sep in program[0] else sys.executable
        return [*launcher, *parts.options, python, "-m", BOOTSTRAP, *boot, *program[1:]], []
    if not parts.module:
        _check_script(program[0])
    if parts.run_path:
        bootstrap_file = _bootstrap_file()
        return [*launcher, *parts.options, bootstrap_file, *boot, *program], []
    options = [o for o in parts.options if o.split("=", 1)[0] not in ("-m", "--module")]
    target = ["-m", *program] if parts.module else program
    return [*launcher, *options, "-m", BOOTSTRAP, *boot, *target], []


def annotated_command(program: list[str]) -> bool:
    """Whether ``program`` (as :func:`torchrun_command` or the run module built it) runs the
    bootstrap, by module name or, with ``--run-path``, by file."""
    return BOOTSTRAP in program or _bootstrap_file() in program


def _launcher(launcher: list[str]) -> list[str]:
    """A bare ``torchrun``/``python`` means this interpreter, which can import dlprof-lite.

    The workers run torchrun's interpreter; this one has dlprof-lite, so it is used when it
    also has torch. Otherwise the torchrun on PATH runs as given.
    """
    first = launcher[0]
    if os.sep in first:
        return list(launcher)
    if first == "torchrun":
        if importlib.util.find_spec("torch") is not None:
            return [sys.executable, "-m", "torch.distributed.run"]
        if shutil.which("torchrun") is None:
            raise InputError("torchrun is not on PATH, and this Python has no torch")
        return list(launcher)
    return [sys.executable, *launcher[1:]]


def _check_script(script: str) -> None:
    if not Path(script).exists():
        raise InputError(f"{script}: no such file")


def _bootstrap_file() -> str:
    spec = importlib.util.find_spec(BOOTSTRAP)
    if spec is None or spec.origin is None:  # pragma: no cover - this module is beside it
        raise InputError("dlprof_lite.annotate.bootstrap cannot be found")
    return spec.origin
