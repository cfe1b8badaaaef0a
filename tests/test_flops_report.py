"""Cost per layer in the report (report/layers/flops.py), on generated profiles whose FLOPs,
GPU and kernel times are known: FLOPs per step, achieved FLOP/s and MFU worked out by hand.

The profile: an H100 SXM (the builders' default GPU: dense BF16 989.5, TF32 494.5 TFLOP/s,
rules/peaks.py), three steps of 10 µs (the first is warm-up, outside the window), a root
``model`` with ``fc1`` and ``fc2``. Per step: fc1 forward kernel 1000 ns, backward 2000 ns;
fc2 forward 500 ns, backward 1000 ns. The ``flops`` facts give fc1 exactly 50 % of the BF16
peak over its 3000 ns and fc2 150 % (an attribution error, noted).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from browser import Chromium, chromium_fixture  # noqa: F401
from builders import R, fact_mark, make_profile, phase
from dlprof_lite.report.build import build_report
from dlprof_lite.rules.peaks import peak_tflops

GPU = "NVIDIA H100 80GB HBM3"
BF16 = peak_tflops(GPU, "bf16") * 1e3  # FLOP per ns  # type: ignore[operator]
TF32 = peak_tflops(GPU, "tf32") * 1e3  # type: ignore[operator]
STEPS = (1000, 11_000, 21_000)
# fc1: half the BF16 peak over its 1000 + 2000 ns; fc2: 1.5 times it over 500 + 1000 ns.
FC1 = (0.5 * BF16 * 1000, 0.5 * BF16 * 2000)
FC2 = (1.5 * BF16 * 500, 1.5 * BF16 * 1000)


def _step(b: int) -> list[R]:
    return [
        phase("iteration", b, b + 10_000),
        phase("forward", b + 100, b + 2100),
        R("fwd:model:Net", b + 100, b + 2100, [
            R("fwd:fc1:Linear", b + 200, b + 1300),
            R("fwd:fc2:Linear", b + 1400, b + 2000),
        ]),
        phase("backward", b + 3000, b + 7000),
        R("bwd:model:Net", b + 3000, b + 7000, [
            R("bwd:fc2:Linear", b + 3100, b + 4200),
            R("bwd:fc1:Linear", b + 4300, b + 6500),
        ]),
    ]  # fmt: skip


def _kernel(name: str, start: int, dur: int) -> dict[str, object]:
    return dict(name=name, tc=True, start_ns=start, dur_ns=dur, api_name="cudaLaunchKernel",
                api_start_ns=start - 10, api_end_ns=start - 5)  # fmt: skip


def _kernels(b: int) -> list[dict[str, object]]:
    return [
        _kernel("sm90_xmma_gemm_bf16bf16_fc1_fwd", b + 300, 1000),
        _kernel("sm90_xmma_gemm_bf16bf16_fc2_fwd", b + 1450, 500),
        _kernel("sm90_xmma_gemm_bf16bf16_fc2_bwd", b + 3200, 1000),
        _kernel("sm90_xmma_gemm_bf16bf16_fc1_bwd", b + 4400, 2000),
    ]


def _fact(layer: str, fwd: float, bwd: float, *, self_=None, by_dtype=None, shape: int = 0,
          unknown: str | None = None, calls: int = 1) -> dict[str, object]:  # fmt: skip
    value = {"root": "model", "shape": shape, "layer": layer, "calls": calls,
             "fwd": None if unknown else fwd, "bwd": None if unknown else bwd,
             "self_fwd": None if unknown else (fwd if self_ is None else self_[0]),
             "self_bwd": None if unknown else (bwd if self_ is None else self_[1]),
             "by_dtype": None if unknown else (by_dtype or {"bf16": fwd + bwd}),
             "unknown": unknown}  # fmt: skip
    return fact_mark("flops", value, 35_000)


def _facts(**fc2: object) -> list[dict[str, object]]:
    total = (FC1[0] + FC2[0], FC1[1] + FC2[1])
    return [
        fact_mark("flops_shape", {"root": "model", "shape": 0}, STEPS[0] + 150),
        _fact("fc1", *FC1),
        _fact("fc2", *FC2, **fc2),  # type: ignore[arg-type]
        _fact("model", *total, self_=(0, 0)),
    ]


def profile(marks: list[dict[str, object]] | None = None, gpu: str = GPU):
    ranges = [r for b in STEPS for r in _step(b)]
    return make_profile(
        ranges=ranges, kernels=[k for b in STEPS for k in _kernels(b)],
        marks=_facts() if marks is None else marks,
        iterations=[(b, b + 10_000, i == 0, True) for i, b in enumerate(STEPS)],
        gpus=((0, gpu, 132, 9, 0),), session=(0, 40_000),
    )  # fmt: skip


def test_flops_per_step_rates_and_mfu_worked_out_by_hand() -> None:
    report = build_report(profile())
    layers = report.layers.set_index("layer")
    fc1, fc2, model = layers.loc["fc1"], layers.loc["fc2"], layers.loc["model"]
    assert report.summary.window.window_steps == 2
    assert fc1["step_forward_flops"] == pytest.approx(FC1[0])
    assert fc1["step_backward_flops"] == pytest.approx(FC1[1])
    assert fc1["step_flops"] == pytest.approx(sum(FC1))
    assert fc1["flops_per_call"] == pytest.approx(sum(FC1))  # one call a step
    # achieved = FLOPs / GPU time: 0.5 x peak over 3000 ns; forward over 1000 ns alone
    assert fc1["achieved_flops_per_s"] == pytest.approx(sum(FC1) / 3000e-9)
    assert fc1["achieved_forward_flops_per_s"] == pytest.approx(FC1[0] / 1000e-9)
    assert fc1["achieved_backward_flops_per_s"] == pytest.approx(FC1[1] / 2000e-9)
    assert fc1["mfu"] == pytest.approx(0.5)
    assert fc1["flops_dtype"] == "bf16" and fc1["flops_rate_basis"] == "gpu"
    assert fc1["flops_note"] is None
    # the root: inclusive FLOPs of both, over its inclusive 4500 ns
    assert model["step_flops"] == pytest.approx(sum(FC1) + sum(FC2))
    assert model["step_self_flops"] == 0
    assert model["mfu"] == pytest.approx((sum(FC1) + sum(FC2)) / BF16 / 4500)
    # fc2: 150 % of the peak is an attribution error: shown, with a note
    assert fc2["mfu"] == pytest.approx(1.5)
    assert "attribution error" in fc2["flops_note"]
    # the summary: the root's FLOPs over the median step (10 µs), its time at peak / step
    cost = report.summary.cost
    assert cost.model_flops_per_step == pytest.approx(sum(FC1) + sum(FC2))
    assert cost.model_flops_per_s == pytest.approx((sum(FC1) + sum(FC2)) / 10_000e-9)
    assert cost.mfu == pytest.approx((sum(FC1) + sum(FC2)) / BF16 / 10_000)
    assert cost.mfu_gpu == "H100 SXM5"


def test_mixed_dtypes_divide_each_part_by_its_own_peak() -> None:
    """MFU = the time each dtype's FLOPs take at that dtype's peak, over the GPU time."""
    split = {"bf16": FC2[0], "tf32": FC2[1]}
    report = build_report(profile([*_facts(by_dtype=split)]))
    fc2 = report.layers.set_index("layer").loc["fc2"]
    assert fc2["mfu"] == pytest.approx((FC2[0] / BF16 + FC2[1] / TF32) / 1500)
    assert fc2["flops_dtype"] == "tf32 67%, bf16 33%"


def test_an_unknown_layer_is_empty_with_its_reason_never_zero() -> None:
    report = build_report(profile(_facts(unknown="op mylib.fused has no FLOP formula")))
    layers = report.layers.set_index("layer")
    assert math.isnan(layers.loc["fc2", "step_flops"]) and math.isnan(layers.loc["fc2", "mfu"])
    assert layers.loc["fc2", "flops_note"] == "unknown: op mylib.fused has no FLOP formula"
    assert layers.loc["fc1", "mfu"] == pytest.approx(0.5)  # the others stay


def test_unknown_layers_are_counted_in_a_warning() -> None:
    report = build_report(profile(_facts(unknown="op mylib.fused has no FLOP formula")))
    found = [w for w in report.summary.warnings if w.startswith("FLOPs unknown")]
    assert found == ["FLOPs unknown for 1 layer(s), left empty: fc2 (op mylib.fused has no "
                     "FLOP formula)"]  # fmt: skip


def test_a_process_killed_before_its_count_is_named() -> None:
    """Shapes marked, no count (the process never reached the annotation's exit)."""
    marks = [fact_mark("flops_shape", {"root": "model", "shape": 0}, STEPS[0] + 150)]
    report = build_report(profile(marks))
    assert any(w.startswith("no FLOP count from process 1: it ended before")
               for w in report.summary.warnings), report.summary.warnings
    assert report.layers["step_flops"].isna().all()


def test_an_unknown_gpu_gives_flops_and_rates_but_no_mfu() -> None:
    report = build_report(profile(gpu="NVIDIA GeForce GTX 1080"))
    fc1 = report.layers.set_index("layer").loc["fc1"]
    assert fc1["achieved_flops_per_s"] == pytest.approx(sum(FC1) / 3000e-9)
    assert math.isnan(fc1["mfu"])
    assert report.summary.cost.mfu is None and report.summary.cost.mfu_gpu is None


def test_calls_past_the_counted_shapes_are_estimated_and_say_so() -> None:
    """Step 2's root call has a shape past the counted ones (-1): its FLOPs are estimated
    from the counted calls' mean, and the note says so."""
    marks = [*_facts(), fact_mark("flops_shape", {"root": "model", "shape": -1},
                                  STEPS[2] + 150)]  # fmt: skip
    fc1 = build_report(profile(marks)).layers.set_index("layer").loc["fc1"]
    assert fc1["step_flops"] == pytest.approx(sum(FC1))
    assert fc1["flops_note"].startswith("estimated:")


def test_each_root_call_gets_the_flops_of_its_own_shape() -> None:
    """Two signatures: step 1's call has shape 0, step 2's shape 1 (twice the FLOPs): the
    mean per step is their mean."""
    marks = [
        *_facts(),
        fact_mark("flops_shape", {"root": "model", "shape": 1}, STEPS[2] + 150),
        _fact("fc1", 2 * FC1[0], 2 * FC1[1], shape=1),
    ]
    fc1 = build_report(profile(marks)).layers.set_index("layer").loc["fc1"]
    assert fc1["step_flops"] == pytest.approx(1.5 * sum(FC1))
    assert fc1["flops_note"] is None


def test_no_flops_facts_leaves_the_columns_empty() -> None:
    layers = build_report(profile([])).layers
    assert layers["step_flops"].isna().all() and layers["mfu"].isna().all()
    assert layers["flops_note"].isna().all()


def test_a_layer_far_below_peak_with_work_gets_advice_with_its_reasons() -> None:
    """fc1 at 5 % of the FP32 peak (30 % of the step): advised, FP32 math named as the likely
    reason; fc2 at 150 % is not."""
    fp32 = peak_tflops(GPU, "fp32") * 1e3  # type: ignore[operator]
    low = (0.05 * fp32 * 1000, 0.05 * fp32 * 2000)
    marks = [fact_mark("flops_shape", {"root": "model", "shape": 0}, STEPS[0] + 150),
             _fact("fc1", *low, by_dtype={"fp32": sum(low)}),
             _fact("fc2", *FC2)]  # fmt: skip
    report = build_report(profile(marks))
    advice = report.advice[report.advice["metric"] == "mfu"]
    assert len(advice) == 1
    row = advice.iloc[0]
    assert row["value"] == pytest.approx(5.0) and "fc1 (Linear) MFU 5.0%" in row["evidence"]
    assert "FP32 math on a Tensor Core GPU" in row["evidence"]
    assert "fc2" not in row["evidence"]


def test_the_page_charts_time_against_flops_and_mfu_bars() -> None:
    """The cost section's figure (plotly's own JSON, validated by plotly.graph_objects): a
    marker per layer below the root at (FLOPs per step, GPU time per step) and, on a GPU run,
    an MFU bar per layer, red above 100 %."""
    from test_html_page import read, trace

    page = read(build_report(profile()))
    assert "cost" in page.sections
    figure = page.figure("cost")
    points = trace(figure, "layers")
    assert sorted(zip(points["customdata"], points["x"], strict=True)) == [
        ("fc1", pytest.approx(sum(FC1))), ("fc2", pytest.approx(sum(FC2)))]
    bars = trace(figure, "MFU")
    mfu = dict(zip(bars["customdata"], bars["y"], strict=True))
    assert mfu == {"fc1": pytest.approx(50.0), "fc2": pytest.approx(150.0)}
    colors = dict(zip(bars["customdata"], bars["marker"]["color"], strict=True))
    assert colors["fc2"] != colors["fc1"]


def test_no_cost_section_without_counted_layers() -> None:
    from test_html_page import read

    assert "cost" not in read(build_report(profile([]))).sections


@pytest.mark.slow
def test_the_cost_chart_draws_in_chromium(chromium: Chromium, tmp_path: Path) -> None:
    """The GPU run's cost chart (markers and MFU bars) drawn by the real headless Chromium:
    no console error, every point drawn (the harness's checks)."""
    from dlprof_lite.render.page.html import report_page

    page = tmp_path / "cost.html"
    page.write_text(report_page(build_report(profile())), encoding="utf-8")
    result = chromium.open_page(page)
    assert result.problems() == []
    chart = result.chart("chart-cost")
    assert chart.section == "cost" and chart.drawn == chart.points == 4
