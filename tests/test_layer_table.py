"""The layers table (issue #12): analysed window, per step, inclusive and self, network order.

A hand-built model with round numbers, four steps of 10 000 ns; step 0 is warm-up::

    fwd:model:Net          [100, 500 + c]        c: the conv's forward, 1000 / 100 / 200 / 600
      fwd:block:Block      [200, 300 + c]            kernel block_add 5 ns (launched at 290 + c)
        fwd:block.conv     [250, 250 + c]            kernel conv_fwd c / 10 ns
      fwd:head:Linear      [400 + c, 450 + c]        kernel head_gemm 300 ns
    bwd:model:Net          [5000, 6000]
      bwd:head:Linear      [5100, 5200]
      bwd:block:Block      [5300, 5900]
        bwd:block.conv     [5400, 5800]              kernel conv_bwd 100 ns

The analysed window is steps 1..3 (c = 100, 200, 600): per-step values [100, 200, 600] have
mean 300, median 200 and p90 520 (linear: 200 + 0.8 x 400).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from builders import R, make_profile, phase
from dlprof_lite.cli import build_parser
from dlprof_lite.render.console import render
from dlprof_lite.report.build import build_report
from dlprof_lite.report.layers.table import layers_table
from dlprof_lite.report.metrics import column_names

CONV = (1000, 100, 200, 600)
STEP = 10_000


def _kernel(name: str, launch: int, dur: int) -> dict:
    return dict(name=name, start_ns=launch + 5, dur_ns=dur, api_name="cudaLaunchKernel",
                api_start_ns=launch, api_end_ns=launch + 2)  # fmt: skip


def nested_profile(*, with_iterations: bool = True, gpu: bool = True):
    ranges, kernels = [], []
    for s, c in enumerate(CONV):
        b = s * STEP
        ranges += [
            phase("iteration", b, b + STEP - 1),
            R("fwd:model:Net", b + 100, b + 500 + c, [
                R("fwd:block:Block", b + 200, b + 300 + c, [
                    R("fwd:block.conv:Conv2d", b + 250, b + 250 + c)]),
                R("fwd:head:Linear", b + 400 + c, b + 450 + c),
            ]),
            R("bwd:model:Net", b + 5000, b + 6000, [
                R("bwd:head:Linear", b + 5100, b + 5200),
                R("bwd:block:Block", b + 5300, b + 5900, [
                    R("bwd:block.conv:Conv2d", b + 5400, b + 5800)]),
            ]),
        ]  # fmt: skip
        kernels += [
            _kernel("conv_fwd", b + 260, c // 10),
            _kernel("block_add", b + 290 + c, 5),
            _kernel("head_gemm", b + 410 + c, 300),
            _kernel("conv_bwd", b + 5500, 100),
        ]
    # As ingest makes them: an iteration starts where the previous key range ended.
    ends = [(s + 1) * STEP - 1 for s in range(len(CONV))]
    windows = [(0 if s == 0 else ends[s - 1], e, s == 0, True) for s, e in enumerate(ends)]
    return make_profile(
        ranges=ranges, kernels=kernels if gpu else (),
        iterations=windows if with_iterations else (),
        session=(0, len(CONV) * STEP),
    )  # fmt: skip


@pytest.fixture(scope="module")
def report():
    return build_report(nested_profile())


def by_layer(frame: pd.DataFrame) -> dict[str, dict]:
    return {r["layer"]: r for r in frame.to_dict("records")}


def test_network_order_not_time_or_name(report) -> None:
    layers = report.layers
    assert list(layers.columns) == column_names("layers")
    # head has the most GPU time and "block" sorts first by name: the table reads like the net.
    assert layers["layer"].tolist() == ["model", "block", "block.conv", "head"]
    assert layers["order"].tolist() == [1, 2, 3, 4]
    parents = dict(zip(layers["layer"], layers["parent"], strict=True))
    assert parents["block.conv"] == "block" and parents["head"] == parents["block"] == "model"
    assert pd.isna(parents["model"])


def test_the_window_leaves_warm_up_out(report) -> None:
    s = report.summary
    assert (s["window_scope"], s["window_iter_start"], s["window_iter_stop"]) == ("analysed", 1, 4)
    assert (s["window_steps"], s["window_start_ns"], s["window_end_ns"]) == (3, 9_999, 39_999)
    # Kernels of steps 1..3: conv_fwd 10 + 20 + 60, block_add 3 x 5, head 3 x 300, bwd 3 x 100.
    assert s["window_kernel_ns"] == 90 + 15 + 900 + 300
    kernels = report.kernels.set_index("name")
    assert (kernels.loc["conv_fwd", "instances"], kernels.loc["conv_fwd", "total_ns"]) == (3, 90)
    ranges = report.ranges.set_index("path")
    conv = ranges.loc["fwd:model:Net/fwd:block:Block/fwd:block.conv:Conv2d"]
    assert (conv["instances"], conv["wall_ns"], conv["gpu_ns"]) == (3, 900, 90)
    iteration = report.ranges[report.ranges["name"].astype(str) == "iteration"]
    assert iteration["instances"].tolist() == [3]


def test_per_step_mean_median_p90(report) -> None:
    conv = by_layer(report.layers)["block.conv"]
    assert (conv["calls"], conv["calls_per_step"], conv["forward_wall_ns"]) == (3, 1.0, 900)
    assert (conv["step_forward_wall_ns"], conv["step_forward_wall_median_ns"]) == (300, 200)
    assert conv["step_forward_wall_p90_ns"] == pytest.approx(520)
    assert (conv["forward_gpu_ns"], conv["step_forward_gpu_ns"]) == (90, 30)
    assert (conv["step_forward_gpu_median_ns"], conv["step_forward_gpu_p90_ns"]) == (
        20, pytest.approx(52),
    )  # fmt: skip
    assert (conv["backward_wall_ns"], conv["step_backward_wall_ns"]) == (1200, 400)
    # A leaf's self time is all of it: the same medians (100, 200, 600 a step -> 200).
    assert conv["step_self_forward_wall_median_ns"] == conv["step_forward_wall_median_ns"]
    assert conv["step_self_forward_gpu_median_ns"] == 20
    assert (conv["step_backward_gpu_ns"], conv["step_backward_gpu_p90_ns"]) == (100, 100)


def test_containers_inclusive_every_row_self(report) -> None:
    rows = by_layer(report.layers)
    block, model, head = rows["block"], rows["model"], rows["head"]
    # block: [200, 300] + c; its conv child covers c, so 100 a call is its own.
    assert (block["forward_wall_ns"], block["self_forward_wall_ns"]) == (1200, 300)
    # block's GPU: its own add (5) plus the conv's kernels; its self time only the add.
    assert (block["forward_gpu_ns"], block["self_forward_gpu_ns"], block["gpu_ns"]) == (
        105, 15, 15,
    )  # fmt: skip
    assert (block["backward_wall_ns"], block["self_backward_wall_ns"]) == (1800, 600)
    assert (block["backward_gpu_ns"], block["self_backward_gpu_ns"]) == (300, 0)
    # model: 400 + c a call, less block (100 + c) and head (50): 250 of its own.
    assert (model["forward_wall_ns"], model["self_forward_wall_ns"]) == (2100, 750)
    assert (model["forward_gpu_ns"], model["backward_gpu_ns"], model["gpu_ns"]) == (1005, 300, 0)
    assert (model["backward_wall_ns"], model["self_backward_wall_ns"]) == (3000, 900)
    assert (model["step_self_wall_ns"], model["step_self_gpu_ns"]) == (550, 0)
    # block's own 100 a call, every step: its median; the conv's time is not in it.
    medians = ("step_self_forward_wall_median_ns", "step_self_forward_gpu_median_ns")
    assert (block[medians[0]], block[medians[1]]) == (100, 5)
    assert (head["forward_gpu_ns"], head["self_forward_gpu_ns"], head["step_self_gpu_ns"]) == (
        900, 900, 300,
    )  # fmt: skip


def test_all_iterations_is_the_whole_run() -> None:
    whole = build_report(nested_profile(), all_iterations=True)
    s = whole.summary
    assert (s["window_scope"], s["window_steps"], s["window_iter_start"]) == ("whole-run", 4, 0)
    conv = by_layer(whole.layers)["block.conv"]
    assert (conv["calls"], conv["forward_wall_ns"], conv["forward_gpu_ns"]) == (4, 1900, 190)
    assert conv["step_forward_wall_ns"] == 1900 / 4
    assert whole.kernels.set_index("name").loc["conv_fwd", "instances"] == 4


def test_no_iterations_whole_run_and_no_per_step() -> None:
    report = build_report(nested_profile(with_iterations=False))
    s = report.summary
    assert (s["window_scope"], s["window_steps"], s["window_iter_start"]) == (
        "no-iterations", 0, None,
    )  # fmt: skip
    assert (s["window_start_ns"], s["window_end_ns"]) == (0, 40_000)
    assert report.layers["layer"].tolist() == ["model", "block", "block.conv", "head"]
    conv = by_layer(report.layers)["block.conv"]
    assert (conv["calls"], conv["forward_wall_ns"]) == (4, 1900)
    assert math.isnan(conv["step_forward_wall_ns"]) and math.isnan(conv["calls_per_step"])


def test_layers_table_without_a_window_sums_everything() -> None:
    p = nested_profile()
    conv = by_layer(layers_table(p.kernels, p.ranges))["block.conv"]
    assert (conv["calls"], conv["forward_gpu_ns"], conv["backward_gpu_ns"]) == (4, 190, 400)


def test_each_table_json_states_the_window(report, tmp_path: Path) -> None:
    folder = report.save(tmp_path / "r", formats=("json",))
    for name in ("kernels", "ranges", "layers"):
        doc = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        assert doc["window"]["window_scope"] == "analysed", name
        assert (doc["window"]["window_iter_start"], doc["window"]["window_iter_stop"]) == (1, 4)
    iterations = json.loads((folder / "iterations.json").read_text(encoding="utf-8"))
    assert "window" not in iterations  # every iteration, warm-up included


def test_console_top_layers_by_self_time(report) -> None:
    console = Console(record=True, width=140)
    render(report, None, console, top=2)
    text = console.export_text()
    section = text[text.index("Top layers") :].splitlines()
    assert "self GPU time, per step" in section[0]
    rule = next(i for i, line in enumerate(section) if line.startswith("━"))
    rows = [line.split()[0] for line in section[rule + 1 : rule + 3]]
    # By own GPU time per step: head 300, conv 30 + 100; model (inclusive 435) is no leaf.
    assert rows == ["head", "block.conv"]
    assert "tables: the analysed iterations (iterations 1..3, 3 steps" in text


def test_console_on_a_cpu_run_leaves_the_gpu_columns_out() -> None:
    report = build_report(nested_profile(gpu=False))
    console = Console(record=True, width=140)
    render(report, None, console, top=3)
    text = console.export_text()
    layers = text[text.index("Top layers") : text.index("Top NVTX ranges")].splitlines()
    assert "self host time, per step" in layers[0]
    rule = next(i for i, line in enumerate(layers) if line.startswith("━"))
    assert "GPU" not in layers[rule - 1] and "TC" not in layers[rule - 1]
    # Own host time per step: model 250 + 300, block 100 + 200, conv c + 400 (mean 700),
    # head 50 + 100: conv, model, block.
    rows = [line.split()[0] for line in layers[rule + 1 : rule + 4]]
    assert rows == ["block.conv", "model", "block"]
    ranges = text[text.index("Top NVTX ranges") :].splitlines()
    assert "wall time" in ranges[0] and "GPU" not in " ".join(ranges[1:3])
    assert "block.conv (Conv2d)" in repr(report) and "host (self) per step" in repr(report)


def test_top_and_all_iterations_flags() -> None:
    args = build_parser().parse_args(["--top", "12", "--all-iterations", "train.py"])
    assert (args.top, args.all_iterations) == (12, True)
    assert build_parser().parse_args(["train.py"]).top == 5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--top", "0", "train.py"])
