"""Training scripts shaped like the ones users run, profiled end to end by ``dlprof-lite``.

Each script in ``tests/real_scripts/`` is an ordinary PyTorch loop (no dlprof-lite import)
that times its own phases with ``perf_counter`` and writes them to ``--truth`` (see
``truth.py``). Every test runs the real command, ``dlprof-lite -o OUT script.py ...``,
under the real nsys, then checks the report against what the script measured: the number of
optimizer steps, the host time of forward and backward (within 10 %), layer names and calls.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

SCRIPTS = Path(__file__).resolve().parent / "real_scripts"
TOLERANCE = 0.10

pytestmark = [pytest.mark.nsys, pytest.mark.slow]


@dataclass
class Run:
    out: Path
    summary: dict[str, Any]
    iterations: list[dict[str, str]]
    layers: list[dict[str, str]]
    truth: dict[str, Any]
    stderr: str

    def analysed(self) -> list[int]:
        """Indexes of the iterations the step statistics use (in window, not warm-up)."""
        return [int(r["iteration"]) for r in self.iterations
                if r["in_window"] == "True" and r["warmup"] == "False"]  # fmt: skip

    def layer(self, name: str) -> dict[str, str]:
        rows = [r for r in self.layers if r["layer"] == name]
        assert len(rows) == 1, (name, sorted(r["layer"] for r in self.layers))
        return rows[0]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def profile(
    nsys: str, tmp_path: Path, script: str, *args: str, options: tuple[str, ...] = ()
) -> Run:
    out, truth = tmp_path / "report", tmp_path / "truth.json"
    # --all-iterations: the layers table counts every call of the run, as the scripts count
    # them (warm-up and evaluation calls included); test_lenet_layers.py checks the window.
    cmd = [sys.executable, "-m", "dlprof_lite", "--quiet", "--nsys", nsys, "-o", str(out),
           "--all-iterations", *options, str(SCRIPTS / script), *args,
           "--truth", str(truth)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return Run(
        out=out,
        summary=json.loads((out / "summary.json").read_text(encoding="utf-8")),
        iterations=read_csv(out / "iterations.csv"),
        layers=read_csv(out / "layers.csv"),
        truth=json.loads(truth.read_text(encoding="utf-8")),
        stderr=done.stderr,
    )


def plain_run(script: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    """The script without any profiler: its own truth file."""
    truth = tmp_path / "plain.json"
    env = {**os.environ, "DLPROF_LITE_NVTX": "off"}
    done = subprocess.run([sys.executable, str(SCRIPTS / script), *args, "--truth", str(truth)],
                          capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(truth.read_text(encoding="utf-8"))


def phase_totals(run: Run, phase: str) -> tuple[float, float]:
    """(reported, measured) host seconds of ``phase`` over the analysed iterations."""
    steps = run.analysed()
    assert steps, run.iterations
    reported = sum(int(run.iterations[i][f"{phase}_wall_ns"]) for i in steps) / 1e9
    measured = sum(run.truth["steps"][i].get(phase, 0.0) for i in steps)
    return reported, measured


def assert_close(run: Run, phase: str, slack_s: float = 0.0) -> None:
    reported, measured = phase_totals(run, phase)
    assert abs(reported - measured) <= TOLERANCE * measured + slack_s, (phase, reported, measured)


# --- backward is backward, however the loss is made ---------------------------------------


@pytest.mark.parametrize(
    "loss", ["module", "functional", "helper", "autograd", "scaler", "dict", "scaler --clip"]
)
def test_phases_match_the_scripts_own_timing(nsys: str, tmp_path: Path, loss: str) -> None:
    """``scaler --clip``: GradScaler's unscale_ and clip_grad_norm_ run after the backward
    pass returned, inside the script's optimizer timing: the optimizer phase starts where
    autograd's backward ended (an engine callback), not at ``optimizer.step()``."""
    run = profile(nsys, tmp_path, "mlp_losses.py", "--loss", *loss.split(), "--steps", "6")
    assert run.summary["iterations_count"] == len(run.truth["steps"]) == 6
    assert_close(run, "forward")
    assert_close(run, "backward")
    assert_close(run, "optimizer", slack_s=0.002 * len(run.analysed()))
    for layer in ("body.0", "body.2", "body.4", "head"):
        row = run.layer(layer)
        assert int(row["calls"]) == 6
        assert int(row["backward_wall_ns"]) > 0 and int(row["forward_wall_ns"]) > 0


def test_loss_inside_the_model_and_evaluation_between_steps(nsys: str, tmp_path: Path) -> None:
    run = profile(nsys, tmp_path, "lm_inner_loss.py", "--steps", "8")
    assert run.summary["iterations_count"] == 8, run.summary["warnings"]
    assert_close(run, "forward")
    assert_close(run, "backward")
    calls = 8 + run.truth["evaluations"]  # evaluation calls are the model's, not steps
    assert int(run.layer("model")["calls"]) == calls
    assert int(run.layer("blocks.1.attn")["calls"]) == calls
    assert int(run.layer("head")["backward_wall_ns"]) > 0


# --- one iteration per training step ------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "args"),
    [("gan.py", ("--steps", "5")), ("accumulate.py", ("--steps", "4", "--accum", "3"))],
)
def test_one_iteration_per_step(
    nsys: str, tmp_path: Path, script: str, args: tuple[str, ...]
) -> None:
    run = profile(nsys, tmp_path, script, *args)
    steps = len(run.truth["steps"])
    assert run.summary["iterations_count"] == steps, run.summary["warnings"]
    assert run.summary["key_range"] == "iteration"


def test_closure_steps_book_forward_and_backward(nsys: str, tmp_path: Path) -> None:
    run = profile(nsys, tmp_path, "lbfgs.py", "--steps", "4")
    assert run.summary["iterations_count"] == 4
    assert_close(run, "forward")
    assert_close(run, "backward")
    steps = run.analysed()
    optimizer = sum(int(run.iterations[i]["optimizer_wall_ns"]) for i in steps) / 1e9
    inside = sum(run.truth["steps"][i]["step"] - run.truth["steps"][i]["forward"]
                 - run.truth["steps"][i]["backward"] for i in steps)  # fmt: skip
    assert optimizer <= inside * (1 + TOLERANCE) + 0.002 * len(steps), (optimizer, inside)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_inference_scripts_get_iterations(nsys: str, tmp_path: Path, mode: str) -> None:
    run = profile(nsys, tmp_path, "inference.py", "--steps", "8", "--mode", mode)
    assert run.summary["iterations_count"] == 8, run.summary["warnings"]
    assert run.summary["key_range_source"] not in ("annotation", "none")
    assert any("--key-range" in w for w in run.summary["warnings"]), run.summary["warnings"]
    assert_close(run, "forward")


@pytest.mark.parametrize("style", ["step {}", "iteration {}", "Step#{}"])
def test_numbered_step_ranges_are_the_steps(nsys: str, tmp_path: Path, style: str) -> None:
    run = profile(nsys, tmp_path, "numbered_steps.py", "--steps", "5", "--style", style)
    assert run.summary["iterations_count"] == 5
    assert run.summary["key_range"] != "iteration"
    for i in run.analysed():  # the logging sleep is part of the step the user means
        assert int(run.iterations[i]["wall_ns"]) >= 20_000_000
    again = tmp_path / "again"
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", "--quiet", "-o", str(again),
         str(run.out / "profile.sqlite")], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    post_hoc = json.loads((again / "summary.json").read_text(encoding="utf-8"))
    assert post_hoc["iterations_count"] == 5 and post_hoc["key_range"] == run.summary["key_range"]


# --- checkpointing, names, compile --------------------------------------------------------


@pytest.mark.parametrize("reentrant", ["0", "1"])
def test_recomputation_is_its_own_column(nsys: str, tmp_path: Path, reentrant: str) -> None:
    # Every module keeps its ranges (no folding of the small ones): the calls are counted.
    run = profile(nsys, tmp_path, "checkpointed.py", "--steps", "4", "--reentrant", reentrant,
                  options=("--annotate", "modules-all"))
    assert run.summary["iterations_count"] == 4
    for layer in ("blocks.1.fc", "blocks.2.fc", "blocks.1", "blocks.2"):
        row = run.layer(layer)
        assert (int(row["calls"]), int(row["recompute_calls"])) == (4, 4), row
        assert int(row["recompute_wall_ns"]) > 0
    for layer in ("blocks.0.fc", "blocks.3", "stem", "head"):
        row = run.layer(layer)
        assert (int(row["calls"]), int(row["recompute_calls"] or 0)) == (4, 0), row


def test_several_root_models_keep_their_names(nsys: str, tmp_path: Path) -> None:
    run = profile(nsys, tmp_path, "two_models.py", "--steps", "4")
    assert len(run.truth["roots"]) == 3
    for root in run.truth["roots"]:
        assert int(run.layer(root)["calls"]) == 4
        assert int(run.layer(f"{root}.fc1")["calls"]) == 4
    assert int(run.layer("student.fc1")["backward_wall_ns"]) > 0
    assert int(run.layer("teacher.fc1")["backward_wall_ns"] or 0) == 0


@pytest.mark.parametrize("how", ["wrap", "method"])
def test_compiled_models(nsys: str, tmp_path: Path, how: str) -> None:
    run = profile(nsys, tmp_path, "compiled.py", "--steps", "6", "--how", how)
    plain = plain_run("compiled.py", tmp_path, "--steps", "6", "--how", how)
    for counter in ("graph_breaks", "unique_graphs", "recompiled_frames"):
        assert run.truth[counter] == plain[counter], counter
    assert run.summary["iterations_count"] == 6
    compile_ns = run.summary["compile_wall_ns"]
    assert run.summary["compile_count"] >= 1 and compile_ns > 0  # booked as compilation ...
    first = run.iterations[0]
    assert int(first["data_wall_ns"]) < compile_ns  # ... not as data loading
    in_steps = sum(int(r["compile_wall_ns"]) for r in run.iterations)
    if in_steps < compile_ns:  # model.compile(): its first call compiles before any step
        assert any("outside every iteration" in w for w in run.summary["warnings"])
    advice = read_csv(run.out / "advice.csv")
    assert not any("data" in row["problem"].lower() for row in advice), advice
    # model.compile(): the first (compiling) call has no range of its own (docs/annotation.md)
    assert int(run.layer("model")["calls"]) == (6 if how == "wrap" else 5)
