"""The README's example lines run as written.

Every command line in the README's code blocks is one of the lines below, and a test runs
each exactly as the README writes it (comments included, through ``bash``):

- ``CI``: the two set-up commands. CI runs them: ``.ci/run`` is ``bash scripts/test.sh``,
  whose first step is ``bash scripts/setup.sh`` (a test cannot run the test suite it is in).
- ``RUN_HERE``, in this order, in one shell in an empty folder holding what the README's
  reader has: ``.venv`` and ``examples/`` of this repository, a ``train.py``
  (``tests/readme_scripts/train.py``) and a ``run.nsys-rep`` (a real nsys report of the
  corpus). Then the notebook block runs there as a Python program.
- ``GPU``: the lines that need a CUDA GPU, run by ``pytest -m gpu``.

The console output the README shows is checked against what its ``$`` command prints now.
A command added to the README fails ``test_every_readme_command_is_run_by_a_test`` until it
is added here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
RAW = "raw/MohanadOdema__DLProf__nsys_profile.nsys-rep"
CI = ("bash scripts/setup.sh", "bash scripts/test.sh")
RUN_HERE = (
    "source .venv/bin/activate",
    "dlprof-lite examples/lenet.py --steps 20",
    "dlprof-lite train.py --epochs 1",
    "dlprof-lite analyze run.nsys-rep",
    "dlprof-lite --repeat 3 --tag before train.py --epochs 1",
    "dlprof-lite --repeat 3 --tag after train.py --epochs 1",
    "dlprof-lite compare before after",
)
GPU = ("dlprof-lite examples/lenet.py --device cuda",)
ELIDED = "⋮"


@dataclass(frozen=True)
class Blocks:
    """The README's code: shell lines as written, Python blocks, console outputs."""

    shell: list[str]
    python: list[str]
    outputs: list[list[str]]


def blocks(text: str) -> Blocks:
    shell: list[str] = []
    python: list[str] = []
    outputs: list[list[str]] = []
    fence: str | None = None
    body: list[str] = []
    previous = ""
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, body = line[3:].strip(), []
        elif fence is not None and line.startswith("```"):
            if fence == "python":
                python.append("\n".join(body) + "\n")
            elif fence == "text":
                outputs.append(body)
            else:
                shell += [b for b in body if b.strip()]
            fence = None
        elif fence is not None:
            body.append(line)
        elif line.startswith("    ") and (not previous.strip() or previous.startswith("    ")):
            shell.append(line.strip())  # an indented code block
        previous = line if fence is None else ""
    commands = [s for s in shell if s.strip() and not s.lstrip().startswith("#")]
    return Blocks(commands, python, outputs)


def command(line: str) -> str:
    """A line without its trailing comment and extra blanks: what identifies it."""
    return " ".join(line.split("#", 1)[0].split())


def written(name: str) -> str:
    """The README's own text of command ``name`` (its first occurrence, comment and all)."""
    return next(line for line in blocks(README.read_text("utf-8")).shell if command(line) == name)


def test_every_readme_command_is_run_by_a_test() -> None:
    found = {command(line) for line in blocks(README.read_text("utf-8")).shell}
    assert found == {*CI, *RUN_HERE, *GPU}


def test_the_setup_and_test_commands_are_what_ci_runs() -> None:
    ci = [line for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]  # fmt: skip
    assert ci == ["bash scripts/test.sh"]
    test_sh = [line for line in (ROOT / "scripts" / "test.sh").read_text("utf-8").splitlines()
               if line and not line.startswith(("#", "set ", "cd "))]  # fmt: skip
    assert test_sh[0] == "bash scripts/setup.sh"
    assert ".venv/bin/mypy" in test_sh and any("pytest" in line for line in test_sh)


def test_readme_is_short_and_says_where_to_go() -> None:
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= 400
    for page in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / page).is_file(), page
    assert "Python 3.11" in text and "25 minutes" in text and "a few minutes" in text


def _folder(tmp_path: Path, corpus_dir: Path) -> Path:
    here = tmp_path / "work"
    here.mkdir()
    (here / ".venv").symlink_to(ROOT / ".venv")
    (here / "examples").symlink_to(ROOT / "examples")
    shutil.copy(ROOT / "tests" / "readme_scripts" / "train.py", here / "train.py")
    shutil.copy(corpus_dir / RAW, here / "run.nsys-rep")
    return here


def _env(**more: str) -> dict[str, str]:
    """The test's environment (its run store and cache) without .venv/bin on PATH: the
    README's ``source .venv/bin/activate`` must be what finds dlprof-lite."""
    venv = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return {**env, "PATH": path, "COLUMNS": "100", **more}


@pytest.mark.nsys
@pytest.mark.corpus
@pytest.mark.slow
def test_readme_commands_run_as_written(tmp_path: Path, corpus_dir: Path, nsys: str) -> None:
    here = _folder(tmp_path, corpus_dir)
    script = "".join(f"{written(name)}\necho \"@@ {i} $?\"\n" for i, name in enumerate(RUN_HERE))
    done = subprocess.run(["bash", "-c", script], cwd=here, env=_env(), capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    codes = dict(re.findall(r"^@@ (\d+) (\d+)$", done.stdout, flags=re.M))
    assert codes == {str(i): "0" for i in range(len(RUN_HERE))}, done.stdout + done.stderr
    assert (here / "lenet.dlprof" / "report.html").is_file()
    assert (here / "train.dlprof" / "layers.csv").is_file()
    summary = json.loads((here / "run.dlprof" / "summary.json").read_text("utf-8"))
    assert summary["kernel_count"] > 0  # a real GPU profile, exported by the local nsys
    assert (here / "compare" / "compare.csv").is_file()
    assert "before" in done.stdout and "after" in done.stdout

    [notebook] = blocks(README.read_text("utf-8")).python
    ran = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", notebook], cwd=here,
                         env=_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (here / "notebook.dlprof" / "summary.json").is_file()


@pytest.mark.corpus
def test_readme_console_output_is_what_the_command_prints(corpus_dir: Path) -> None:
    """Each line the README shows (``⋮`` marks lines left out) is printed, in that order."""
    [output] = blocks(README.read_text("utf-8")).outputs
    line = output[0].removeprefix("$ ")
    name = line.split()[-1]
    env = _env(PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # A short folder, so that the report line's absolute path fits on one console line.
    with tempfile.TemporaryDirectory(prefix="rd") as short:
        here = Path(short).resolve()
        shutil.copy(corpus_dir / name, here / name)
        done = subprocess.run(["bash", "-c", line], cwd=here, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout
    out = done.stdout.replace(f"{here}{os.sep}", "")  # the report folder, as printed here
    printed = iter(row.rstrip() for row in out.splitlines())
    for expected in output[1:]:
        if expected.strip() != ELIDED:
            assert any(row == expected.rstrip() for row in printed), expected


@pytest.mark.gpu
def test_readme_gpu_example_runs_as_written(tmp_path: Path, corpus_dir: Path) -> None:
    here = _folder(tmp_path, corpus_dir)
    for name in GPU:
        done = subprocess.run(["bash", "-c", f"source .venv/bin/activate\n{written(name)}"],
                              cwd=here, env=_env(), capture_output=True, text=True,
                              timeout=900)  # fmt: skip
        assert done.returncode == 0, done.stderr
    summary = json.loads((here / "lenet.dlprof" / "summary.json").read_text("utf-8"))
    assert summary["kernel_count"] > 0 and summary["gpu_names"]
