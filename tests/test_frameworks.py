"""The frameworks people train with, profiled end to end and checked against their own callbacks.

Each script in ``tests/framework_scripts/`` trains with a real framework (transformers'
``Trainer``, Lightning's ``Trainer``, accelerate) or a hand-written update, on CPU with tiny
models built from code (nothing is downloaded). The framework's own callbacks record, in
``--truth``, the time right after every optimizer update, every evaluation run and every
training forward (``framework_scripts/oracle.py``). Each case runs the real command once,
``python -m dlprof_lite -o OUT script.py ...`` under the real nsys; the tests then compare the
report with that oracle: one iteration per optimizer step, every analysed step's wall time,
evaluation standing apart, phases, layer names and calls per step.

The extra ``frameworks`` (``pip install -e '.[frameworks]'``) installs the pinned versions; a
clone without it skips these tests with a reason, CI (``CI=true``) fails instead.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import missing
from test_real_scripts import Run, read_csv

SCRIPTS = Path(__file__).resolve().parent / "framework_scripts"
TOLERANCE = 0.10
# A step's wall time may differ by 10 % or 1 ms, whichever is larger. The framework's time
# from one update's end to the next also holds its own work between steps (callbacks, the
# loop's bookkeeping: 0.3 to 1 ms here), which the report keeps apart.
SLACK_NS = 1_000_000

pytestmark = [pytest.mark.nsys, pytest.mark.slow]


@dataclass(frozen=True)
class Case:
    framework: str  # the module the script imports ("torch": no framework)
    script: str
    args: tuple[str, ...]


# As few runs as cover the shapes (imports dominate each run): the plain Trainer with
# `max_steps` and evaluation every 5 steps; two epochs of 46 samples in batches of 4 (12
# batches, the last one of 2) with gradient accumulation of 2; Lightning with `max_steps`
# and validation every 5 steps, and two epochs of 600 images in batches of 64 (the tenth of
# 24); accelerate's prepared loader over two epochs; the hand-written update.
CASES = {
    "hf-max-steps-eval": Case("transformers", "hf_trainer.py", ("--max-steps", "16",
                                                                 "--eval-steps", "5",
                                                                 "--batch", "16")),
    "hf-epochs-accum": Case("transformers", "hf_trainer.py", ("--epochs", "2", "--accum", "2",
                                                               "--samples", "92", "--batch", "8")),
    "lightning-max-steps-val": Case("lightning", "lightning_cnn.py",
                                    ("--max-steps", "16", "--val-check-interval", "5",
                                     "--batch", "128", "--samples", "2560")),
    "lightning-epochs": Case("lightning", "lightning_cnn.py", ("--max-epochs", "2",
                                                               "--samples", "1200",
                                                               "--batch", "128")),
    "accelerate-epochs": Case("accelerate", "accelerate_loop.py", ("--epochs", "2",
                                                                   "--samples", "2400",
                                                                   "--batch", "256")),
    "manual-update": Case("torch", "manual_update.py", ("--steps", "20")),
}  # fmt: skip
EVALUATING = ["hf-max-steps-eval", "lightning-max-steps-val"]


class Runs:
    """Each case profiled once per test module; a failed run fails every test that reads it."""

    def __init__(self, nsys: str, factory: pytest.TempPathFactory) -> None:
        self.nsys, self.factory = nsys, factory
        self.done: dict[str, Run | str] = {}

    def __call__(self, name: str) -> Run:
        case = CASES[name]
        if importlib.util.find_spec(case.framework) is None:
            missing(f"{case.framework} is not installed (pip install -e '.[frameworks]')")
        if name not in self.done:
            try:
                self.done[name] = self.profile(case, self.factory.mktemp(name))
            except Exception as error:  # kept: the next tests fail at once, without a rerun
                self.done[name] = f"{type(error).__name__}: {error}"
        run = self.done[name]
        if isinstance(run, str):
            pytest.fail(f"{name}: the profiled run failed: {run}")
        return run

    def again(self, name: str) -> Run:
        """A second, fresh profile of case ``name`` (not kept for the other tests)."""
        return self.profile(CASES[name], self.factory.mktemp(name + "-again"))

    def profile(self, case: Case, folder: Path) -> Run:
        """The real command a user types, as tests/test_real_scripts.py runs it (without
        --all-iterations: the layers table of the analysed steps, as users read it)."""
        out, truth = folder / "report", folder / "truth.json"
        cmd = [sys.executable, "-m", "dlprof_lite", "--quiet", "--nsys", self.nsys,
               "-o", str(out), str(SCRIPTS / case.script), *case.args,
               "--truth", str(truth)]  # fmt: skip
        # Output to files, not pipes: an nsys session agent that outlives its session keeps
        # the pipes it inherited open, and reading them to their end would wait for it.
        log, err = folder / "stdout.txt", folder / "stderr.txt"
        with open(log, "wb") as to_log, open(err, "wb") as to_err:
            done = subprocess.run(cmd, stdout=to_log, stderr=to_err, timeout=600, cwd=folder)
        stderr = err.read_text(encoding="utf-8", errors="replace")
        stdout = log.read_text(encoding="utf-8", errors="replace")
        assert done.returncode == 0, stdout[-3000:] + stderr[-3000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        return Run(
            out=out,
            summary=json.loads((out / "summary.json").read_text(encoding="utf-8")),
            iterations=read_csv(out / "iterations.csv"),
            layers=read_csv(out / "layers.csv"),
            truth=json.loads(truth.read_text(encoding="utf-8")),
            stderr=stderr,
        )


@pytest.fixture(scope="module")
def runs(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(nsys, tmp_path_factory)


# --- the oracle's arithmetic --------------------------------------------------------------


def evaluation_ns(truth: dict[str, Any], start: int, end: int) -> int:
    """Time of the evaluation runs recorded between two step ends."""
    return sum(b - a for a, b in truth["evaluations_ns"] if start <= a and b <= end)


def oracle_step_ns(truth: dict[str, Any], i: int) -> int:
    """Step ``i``'s time by the framework: from the previous update's end (or, later, the
    framework's epoch start, or where a loop the script owns starts waiting for the step's
    batch) to its own, less the evaluation runs between them (step 0 has no previous end:
    never compared)."""
    ends = truth["step_ends_ns"]
    marks = [*truth.get("epoch_begins_ns", []), *truth.get("step_starts_ns", [])]
    start = max([ends[i - 1], *(t for t in marks if ends[i - 1] < t < ends[i])])
    return ends[i] - start - evaluation_ns(truth, start, ends[i])


def expected_steps(truth: dict[str, Any]) -> int:
    """Optimizer steps; without an optimizer, one step per training forward (docs/annotation.md)."""
    return truth["optimizer_steps"] if truth.get("optimizer", True) else truth["train_forwards"]


def compared_steps(run: Run) -> list[int]:
    steps = [i for i in run.analysed() if i > 0]
    assert steps, run.iterations
    return steps


def root_row(run: Run) -> dict[str, str]:
    """The layers row of the user's model: a root (no parent) of the model's own type."""
    rows = [r for r in run.layers if r["type"] == run.truth["model_type"] and not r["parent"]]
    assert len(rows) == 1, [(r["layer"], r["type"], r["parent"]) for r in run.layers[:12]]
    return rows[0]


# --- one iteration per optimizer step, each as long as the framework saw it ---------------


@pytest.mark.parametrize("name", list(CASES))
def test_one_iteration_per_optimizer_step(runs: Runs, name: str) -> None:
    run = runs(name)
    steps, warnings = expected_steps(run.truth), run.summary["warnings"]
    assert (run.summary["iterations_count"], len(run.iterations)) == (steps, steps), warnings


@pytest.mark.parametrize("name", list(CASES))
def test_every_step_as_long_as_the_framework_saw_it(runs: Runs, name: str) -> None:
    """The last step and each epoch's last step too: nothing after an update (the process's
    exit, the next epoch's start, a look-ahead fetch) is booked into the step."""
    run = runs(name)
    wrong = mistimed_steps(run)
    if wrong:
        # A preempted process (a loaded 2-core machine) stretches one step's framework time
        # in the moment between two steps: profile the case once more. A rule that books
        # work into the wrong step fails both runs, at the same steps.
        again = mistimed_steps(runs.again(name))
        assert not again, f"(step, report ms, framework ms) twice: {wrong}, then {again}"


def mistimed_steps(run: Run) -> list[tuple[int, float, float]]:
    """Analysed steps (the last and every epoch's last among them) whose wall time is off
    the framework's by more than 10 % (or 1 ms)."""
    truth = run.truth
    assert len(run.iterations) == expected_steps(truth), "iterations differ from steps"
    analysed = set(run.analysed())
    ends = {len(truth["step_ends_ns"]) - 1, *truth["epoch_ends"]}
    assert ends <= analysed, ("last and epoch-end steps not analysed", sorted(ends - analysed))
    wrong = []
    for i in compared_steps(run):
        wall, oracle = int(run.iterations[i]["wall_ns"]), oracle_step_ns(truth, i)
        if abs(wall - oracle) > max(TOLERANCE * oracle, SLACK_NS):
            wrong.append((i, round(wall / 1e6, 2), round(oracle / 1e6, 2)))
    return wrong


# --- evaluation stands apart ---------------------------------------------------------------


@pytest.mark.parametrize("name", EVALUATING)
def test_evaluation_stands_apart(runs: Runs, name: str) -> None:
    run = runs(name)
    truth, ends = run.truth, run.truth["step_ends_ns"]
    assert truth["evaluations_ns"], "the script evaluated nothing"
    assert len(run.iterations) == len(ends), "iterations differ from steps"
    assert "between_before_ns" in run.iterations[0], sorted(run.iterations[0])
    for field in ("between_steps_ns", "after_training_ns"):
        assert field in run.summary, f"summary.json has no {field}"
    analysed = run.analysed()
    between = 0
    for i in (i for i in analysed if i > 0):
        evaluation = evaluation_ns(truth, ends[i - 1], ends[i])
        if not evaluation:
            continue
        row = run.iterations[i]
        inflation = int(row["wall_ns"]) - oracle_step_ns(truth, i)
        assert inflation < evaluation / 2, (i, "step inflated by the evaluation before it",
                                            inflation, evaluation)  # fmt: skip
        assert int(row["between_before_ns"]) >= evaluation - SLACK_NS, (i, row, evaluation)
        if i - 1 in analysed:
            between += evaluation
    assert run.summary["between_steps_ns"] >= between - SLACK_NS, (
        run.summary["between_steps_ns"], between,
    )  # fmt: skip
    after = evaluation_ns(truth, ends[-1], max(b for _, b in truth["evaluations_ns"]))
    assert run.summary["after_training_ns"] >= after - SLACK_NS, (
        run.summary["after_training_ns"], after,
    )  # fmt: skip


# --- phases, calls, names ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_every_step_has_its_phases(runs: Runs, name: str) -> None:
    """Forward, backward and (with an optimizer) optimizer time in every analysed step."""
    run = runs(name)
    phases = ["forward", "backward"] + (["optimizer"] if run.truth.get("optimizer", True) else [])
    empty = [(i, phase) for i in run.analysed() for phase in phases
             if int(run.iterations[i][f"{phase}_wall_ns"]) <= 0]  # fmt: skip
    assert not empty, empty


@pytest.mark.parametrize("name", list(CASES))
def test_model_called_once_per_step(runs: Runs, name: str) -> None:
    """The user's model's forward per analysed step: 1, or the accumulation count."""
    run = runs(name)
    row = root_row(run)
    assert float(row["calls_per_step"]) == run.truth["forwards_per_step"], row["calls"]


@pytest.mark.parametrize("name", list(CASES))
def test_layers_named_by_the_models_own_children(runs: Runs, name: str) -> None:
    """No wrapper in a layer's path (Lightning's ``_lightning_module``, DDP's ``module``):
    the model's layers are named from its own children, as ``model.named_children()``."""
    run = runs(name)
    root = root_row(run)["layer"]
    children = set(run.truth["children"])
    parent = {r["layer"]: r["parent"] for r in run.layers}

    def under_root(layer: str) -> bool:
        seen = set()
        while parent.get(layer) and layer not in seen:
            seen.add(layer)
            layer = parent[layer]
        return layer == root

    names = [r["layer"] for r in run.layers if r["parent"] and under_root(r["layer"])]
    assert names, run.layers[:5]
    wrong = [n for n in names if n.split(".")[0] not in children]
    assert not wrong, (sorted(children), wrong[:8])
    assert not any(n.startswith("_lightning_module") for n in names), names[:8]
