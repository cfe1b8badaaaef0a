"""Issue #12's "done when": ``layers.csv`` of examples/lenet.py lists its layers in network
order, with per-step forward means equal to the script's own per-layer timing.

``real_scripts/lenet_layers.py`` trains the example's own model, loss and data with the
example's loop and times each layer's ``forward`` with ``perf_counter`` (no dlprof-lite
import); the real product profiles it under the real nsys (``dlprof-lite --quiet -- python
script``). CPU only here, so the wall columns are compared; the window is the report's
analysed iterations (iterations.csv), the script's steps with the same numbers.

Layers too short to time are folded into the model after the warm-up step (the default,
rules/folding.py): they keep their place in the table, marked by ``folded_call_ns``, with no
calls of their own; the others are compared.

Tolerance: ±2 %, or 60 µs a call where that is more. The script's clock runs inside the
layer's range; the range also holds the annotation's own hook work around the call (4 to
34 µs a call measured on a loaded 2-core VM), which only a layer of about 3 ms or more per
step hides under 2 %. The range can only be longer than the script's clock: a layer reported
shorter by more than 2 % fails whatever its size.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dlprof_lite

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parent / "real_scripts" / "lenet_layers.py"
LAYERS = ["conv1", "relu1", "pool1", "conv2", "pool2", "tanh", "flatten", "affine1", "relu2",
          "affine2", "softmax"]  # fmt: skip
TOLERANCE = 0.02
PER_CALL_NS = 60_000

pytestmark = [pytest.mark.nsys, pytest.mark.slow]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_lenet_layers_in_network_order_with_the_scripts_own_timing(
    nsys: str, tmp_path: Path
) -> None:
    out, truth_file = tmp_path / "report", tmp_path / "truth.json"
    cmd = [sys.executable, "-m", "dlprof_lite", "--quiet", "--nsys", nsys, "-o", str(out), "--",
           sys.executable, str(SCRIPT), "--steps", "8", "--batch-size", "512",
           "--truth", str(truth_file)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    truth = json.loads(truth_file.read_text(encoding="utf-8"))
    layers = read_csv(out / "layers.csv")
    steps = [int(r["iteration"]) for r in read_csv(out / "iterations.csv")
             if r["in_window"] == "True" and r["warmup"] == "False"]  # fmt: skip
    assert steps == list(range(1, 8))  # 8 steps, the first one warm-up

    # Network order: the root, its layers as the script first ran them, then the loss.
    assert truth["order"] == [f"model.{name}" for name in LAYERS]
    assert [r["layer"] for r in layers] == ["model", *LAYERS, "CategoricalCrossEntropy"]
    assert [int(r["order"]) for r in layers] == list(range(1, len(layers) + 1))

    by = {r["layer"]: r for r in layers}
    # Layers too short to time (folded after warm-up, the default): in their place, marked.
    folded = [n for n in LAYERS if by[n]["folded_call_ns"]]
    assert "conv1" not in folded and "conv2" not in folded  # ~ms a call at batch 512
    for name in LAYERS:
        row = by[name]
        if name in folded:
            assert (row["calls"], row["parent"], row["forward_wall_ns"]) == ("", "model", "0")
            assert int(row["folded_call_ns"]) > 0
            continue
        assert (row["calls"], float(row["calls_per_step"]), row["parent"]) == ("7", 1.0, "model")
        assert_close(name, float(row["step_forward_wall_ns"]), truth, steps)
        # A leaf's forward is all its own; the per-step mean is the window's total / steps.
        assert row["self_forward_wall_ns"] == row["forward_wall_ns"]
        assert float(row["step_forward_wall_ns"]) == pytest.approx(
            int(row["forward_wall_ns"]) / len(steps)
        )
    # The model's own time is what its layers' ranges leave uncovered (folded ones' included).
    model = by["model"]
    children = sum(int(by[n]["forward_wall_ns"]) for n in LAYERS)
    assert int(model["self_forward_wall_ns"]) == int(model["forward_wall_ns"]) - children

    # --iter-start/--iter-stop choose the window: iterations 2, 3 and 4 of the same profile.
    window = dlprof_lite.analyze(out / "profile.sqlite", iter_start=2, iter_stop=5)
    s = window.summary
    assert (s["window_iter_start"], s["window_iter_stop"], s["window_steps"]) == (2, 5, 3)
    table = window.layers.set_index("layer")
    assert table.index.tolist()[1:12] == LAYERS
    for name in LAYERS:
        if name in folded:
            assert pd.isna(table.loc[name, "calls"]) and table.loc[name, "folded_call_ns"] > 0
            continue
        assert int(table.loc[name, "calls"]) == 3
        assert_close(name, float(table.loc[name, "step_forward_wall_ns"]), truth, [2, 3, 4])


def assert_close(name: str, reported: float, truth: dict, steps: list[int]) -> None:
    """The reported per-step mean against the script's own, over the same steps."""
    mine = sum(truth["steps"][i][f"model.{name}"] for i in steps) / len(steps) * 1e9
    assert reported >= (1 - TOLERANCE) * mine, (name, reported, mine)
    assert reported - mine <= max(TOLERANCE * mine, PER_CALL_NS), (name, reported, mine)
