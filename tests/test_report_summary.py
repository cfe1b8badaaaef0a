"""Summary metrics, advice rules and the metric/threshold registry, checked by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from builders import PID, make_profile
from dlprof_lite.report import advice as rules
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import REPORTS, column_names, definitions
from dlprof_lite.report.summary_types import Gpu, Summary, build_summary
from dlprof_lite.rules.advice import THRESHOLDS
from example_profiles import _step_ops, training_profile


@pytest.fixture(scope="module")
def report():
    return build_report(training_profile())


def test_summary_totals_and_utilization(report) -> None:
    s = report.summary
    # the groups hold every flat metric; the row adds the folded lists
    assert set(s.metrics()) | {"warnings", "advice_count"} == set(column_names("summary"))
    assert (s["source"], s["nsys_version"], s["devices"], s["wall_ns"]) == (
        "test.sqlite", "2024.5.1", 1, 10_000,
    )  # fmt: skip
    assert [dataclasses.asdict(g) for g in s.gpus] == [
        dict(pid=PID, device_id=0, name="NVIDIA H100 80GB HBM3", sm_count=132,
             compute_capability="9.0", busy_ns=1220, utilization=0.122)
    ]  # fmt: skip
    # kernels 3 x 370; memcpy 3 x 20 + the 40 ns DtoH copy; one 10 ns memset.
    assert (s["kernel_ns"], s["kernel_count"], s["tc_gpu_ns"]) == (1110, 12, 300)
    assert (s["memcpy_ns"], s["memcpy_count"], s["memset_ns"], s["memset_count"]) == (100, 4, 10, 1)
    assert s["tc_share"] == pytest.approx(300 / 1110)
    # busy: 3 x 390 + 10 + 40 = 1220 of a 10 000 ns session.
    assert (s["gpu_busy_ns"], s["gpu_utilization"]) == (1220, pytest.approx(0.122))
    # active span: memset start 500 to DtoH copy end 8190 = 7690.
    assert s["active_utilization"] == pytest.approx(1220 / 7690)


def test_summary_steps_and_iterations(report) -> None:
    s = report.summary
    # analysed steps: 1 and 2 (step 0 is warm-up): walls 2000 and 3000.
    assert (s["iterations_count"], s["iterations_warmup"], s["iterations_analysed"]) == (3, 1, 2)
    assert (s["iterations_mean_ns"], s["iterations_median_ns"]) == (2500.0, 2500.0)
    assert s["iterations_std_ns"] == pytest.approx(2**0.5 * 500)  # sample std of 2000, 3000
    assert s["iterations_p90_ns"] == pytest.approx(2900.0)  # 2000 + 0.9 x 1000
    assert s["iterations_cv"] == pytest.approx(2**0.5 * 500 / 2500)
    # both steps are 20 % from the median: no run within 10 %, no steady window.
    assert (s["steady_start"], s["steady_stop"]) == (None, None)
    # host gaps 1290 + 1290 over 5000 ns of steps on one device (each copy's 440 ns gap
    # begins 320 ns before its step: 120 ns of it count).
    assert (s["launch_overhead_ns"], s["launch_overhead_scope"]) == (2580, "iterations")
    assert s["launch_overhead_pct"] == pytest.approx(51.6)
    assert (s["step_data_ns"], s["step_forward_ns"], s["step_backward_ns"]) == (20, 120, 200)
    assert (s["step_optimizer_ns"], s["step_other_ns"]) == (50, 0)
    assert s["step_idle_ns"] == (1610 + 2610) / 2
    assert (s["step_data_wall_ns"], s["step_data_wall_pct"]) == (200, pytest.approx(8.0))
    assert s["step_utilization"] == pytest.approx(780 / 5000)


def test_summary_facts(report) -> None:
    s = report.summary
    # The DtoH cudaMemcpy is synchronous; the three HtoD cudaMemcpyAsync read pageable memory.
    assert (s["sync_memcpy_count"], s["sync_memcpy_ns"]) == (1, 40)
    assert (s["pageable_async_count"], s["pageable_async_ns"]) == (3, 60)
    # Two sync calls (50 + 100 ns); only the 100 ns one is inside an analysed step.
    assert (s["sync_api_calls"], s["sync_api_ns"]) == (2, 150)
    assert s["sync_api_pct"] == pytest.approx(100 / 5000 * 100)
    # 12 kernels of 20, 50, 100, 200 ns (3 each): median (50 + 100) / 2.
    assert (s["kernel_median_ns"], s["short_launches"]) == (75.0, 3)
    # fc1 is eligible: in the analysed steps 1 and 2, 2 x 300 ns on the GPU of which 2 x 100
    # on Tensor Cores; the window's kernels: 2 x 370 ns.
    assert (s["window_scope"], s["window_iter_start"], s["window_iter_stop"]) == ("analysed", 1, 3)
    assert (s["window_steps"], s["window_start_ns"], s["window_end_ns"]) == (2, 3000, 8000)
    assert s["window_kernel_ns"] == 740
    assert s["eligible_non_tc_ns"] == 400
    assert s["eligible_non_tc_share"] == pytest.approx(400 / 740)
    # The whole run (--all-iterations): 3 x 300 ns of which 3 x 100 on Tensor Cores, of 1110.
    whole = build_report(training_profile(), all_iterations=True).summary
    assert (whole["window_scope"], whole["window_steps"], whole["window_kernel_ns"]) == (
        "whole-run", 3, 1110,
    )  # fmt: skip
    assert whole["eligible_non_tc_ns"] == 600
    assert whole["eligible_non_tc_share"] == pytest.approx(600 / 1110)


def test_advice_on_the_training_profile(report) -> None:
    advice = report.advice
    assert list(advice.columns) == column_names("advice")
    got = list(zip(advice["metric"], advice["severity"], strict=True))
    assert got == [
        ("eligible_non_tc_share", "high"),  # 54 % >= 25 %
        ("launch_overhead_pct", "high"),  # 51.6 % >= 15 %
        ("step_utilization", "high"),  # 15.6 % < 20 %
        # the GPU idle 24 + 16 + 12 % of the step for code outside phases, and in the forward
        # and backward outside layers: the loop's own code (>= 20 %)
        ("idle.step_pct[device other]", "high"),
        ("step_data_wall_pct", "warn"),  # 8 % >= 5 %
        ("sync_memcpy_count", "warn"),
        ("pageable_async_count", "warn"),
        ("idle.step_pct[device layer]", "warn"),  # 7.2 + 3.6 + 1.2 % in fc1 and act
        ("idle.step_pct[device optimizer]", "warn"),  # 7.2 % >= 5 %
        ("sync_api_pct", "info"),  # 2 % < 5 %
    ]
    tc = advice.iloc[0]
    assert "fc1 (Linear)" in tc["evidence"] and "autocast" in tc["recommendation"]
    assert tc["threshold"] == THRESHOLDS["tc_nontc_share_high"].value
    assert "TensorBoard" in tc["citation"] and "dlprof-lite choice" in tc["citation"]
    assert "CUDA graphs" in advice.iloc[1]["recommendation"]
    assert [dataclasses.asdict(a) for a in report.summary.advice] == advice.to_dict("records")


def _gpu(index: int, values: dict) -> Gpu:
    fields = dict(pid=1, device_id=index, name=None, sm_count=None, compute_capability=None,
                  busy_ns=0, utilization=None)  # fmt: skip
    return Gpu(**{**fields, **values})


def _summary(gpus: list[dict] | None = None, **values) -> Summary:
    """A summary holding only the given metrics (the others unknown), for one advice rule."""
    return build_summary(values, gpus=[_gpu(i, g) for i, g in enumerate(gpus or [])])


def _with(s: Summary, gpus: list[dict] | None = None, **values) -> Summary:
    """``s`` with some metrics (or its GPUs) changed: a new summary, ``s`` is frozen."""
    listed = [_gpu(i, g) for i, g in enumerate(gpus)] if gpus is not None else s.gpus
    return build_summary({**s.metrics(), **values}, gpus=listed)


def test_graded_thresholds_fire_at_the_boundary() -> None:
    layers = pd.DataFrame(columns=column_names("layers"))
    at_warn = _summary(launch_overhead_pct=3.0, launch_overhead_ns=30, launch_overhead_scope="x")
    assert rules.launch_bound(at_warn, layers).severity == "warn"
    below = _summary(launch_overhead_pct=2.99, launch_overhead_ns=30, launch_overhead_scope="x")
    assert rules.launch_bound(below, layers) is None
    at_high = _summary(launch_overhead_pct=15.0, launch_overhead_ns=30, launch_overhead_scope="x")
    assert rules.launch_bound(at_high, layers).severity == "high"
    assert rules.launch_bound(_summary(launch_overhead_pct=None), layers) is None
    # utilization is "low" strictly below its thresholds.
    assert rules.low_utilization(_summary(devices=1, step_utilization=0.5), layers) is None
    low = rules.low_utilization(_summary(devices=1, step_utilization=0.49), layers)
    assert low.severity == "warn"
    low = rules.low_utilization(
        _summary(devices=1, step_utilization=None, active_utilization=0.1), layers
    )
    assert (low.severity, low.metric) == ("high", "active_utilization")
    # a profile without any GPU work (CPU-only run): no utilization to judge
    assert rules.low_utilization(_summary(devices=0, step_utilization=0.0), layers) is None


def test_tensor_core_advice_needs_tensor_cores() -> None:
    layers = pd.DataFrame(
        [dict(layer="conv", type="Conv2d", gpu_ns=100, tc_gpu_ns=0, tc_miss_gpu_ns=100,
              tc_eligible=True)]
    )
    volta = [dict(compute_capability="7.0")]
    s = _summary(eligible_non_tc_share=1.0, eligible_non_tc_ns=100, gpus=volta)
    assert "conv (Conv2d) 100 ns" in rules.tensor_cores(s, layers).evidence
    pascal = [dict(compute_capability="6.1"), dict(compute_capability="8.0")]
    assert rules.tensor_cores(_with(s, gpus=pascal), layers) is None
    assert rules.tensor_cores(_with(s, eligible_non_tc_share=0.04), layers) is None


def test_tensor_core_advice_counts_matmul_kernels_only() -> None:
    """fc1's backward in BF16 on Tensor Cores with the layout and cast kernels cuDNN and
    autocast put around it (no Tensor Cores, as on the H200): no mixed-precision advice,
    whose remedy would not move them; the same time in an FP32 sgemm: the advice."""

    def variant(names: list[str]) -> dict:
        kernels = []
        for b in (1000, 3000, 5000):
            ops, _ = _step_ops(b, 0)
            sgemm = next(k for k in ops if k["name"] == "sgemm_128x64_nt")
            ops.remove(sgemm)
            for i, name in enumerate(names):  # 200 ns split over the same launch window
                kernels.append(dict(sgemm, name=name, tc=name.startswith("sm90"),
                                    start_ns=sgemm["start_ns"] + 100 * i, dur_ns=100))
            kernels += ops
        return build_report(training_profile(kernels=kernels))

    bf16 = variant(["sm90_xmma_gemm_bf16bf16_tn", "void cudnn::engines_precompiled::"
                    "nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float>(T1)"])
    fc1 = bf16.layers.set_index("layer").loc["fc1"]
    # forward gemm (TC) 2 x 100 + backward (TC gemm 100 + layout 100) per analysed step
    assert (fc1["gpu_ns"], fc1["tc_gpu_ns"], fc1["tc_miss_gpu_ns"]) == (600, 400, 0)
    assert bf16.summary["eligible_non_tc_ns"] == 0
    assert "eligible_non_tc_share" not in set(bf16.advice["metric"])
    fp32 = variant(["sm90_xmma_gemm_bf16bf16_tn", "volta_sgemm_128x32_nt"])
    assert fp32.layers.set_index("layer").loc["fc1", "tc_miss_gpu_ns"] == 200
    assert fp32.summary["eligible_non_tc_ns"] == 200
    assert "eligible_non_tc_share" in set(fp32.advice["metric"])


def test_iteration_variance_suggests_the_steady_window() -> None:
    s = _summary(
        iterations_cv=0.3, iterations_analysed=8, iterations_mean_ns=1e6, iterations_std_ns=3e5,
        iterations_p90_ns=2e6, steady_start=2, steady_stop=7,
    )  # fmt: skip
    found = rules.iteration_variance(s, pd.DataFrame())
    assert "--iter-start 2 --iter-stop 7" in found.recommendation
    assert "cv 30%" in found.evidence
    unsteady = rules.iteration_variance(_with(s, steady_start=None, steady_stop=None), None)
    assert "No run of iterations stays within 10% of the median" in unsteady.recommendation
    assert rules.iteration_variance(_with(s, iterations_analysed=2), pd.DataFrame()) is None
    assert rules.iteration_variance(_with(s, iterations_cv=0.09), pd.DataFrame()) is None


def test_tiny_kernels() -> None:
    s = _summary(kernel_median_ns=4000.0, kernel_count=1000, short_launches=400,
                 launch_overhead_pct=1.0)  # fmt: skip
    found = rules.tiny_kernels(s, pd.DataFrame())
    assert (found.severity, found.metric) == ("info", "kernel_median_ns")
    assert "400 (40%)" in found.evidence
    assert rules.tiny_kernels(_with(s, launch_overhead_pct=5.0), pd.DataFrame()).severity == "warn"
    assert rules.tiny_kernels(_with(s, kernel_count=99), pd.DataFrame()) is None
    assert rules.tiny_kernels(_with(s, kernel_median_ns=10_000.0), pd.DataFrame()) is None


def test_sync_memcpy_selection_follows_the_nsys_rule() -> None:
    def copy(kind: str, nbytes: int, api: str, start: int) -> dict:
        return dict(kind="memcpy", copy_kind=kind, bytes=nbytes, src_mem="pinned",
                    dst_mem="device", start_ns=start, dur_ns=10, api_name=api,
                    api_start_ns=start - 5, api_end_ns=start + 20)  # fmt: skip

    p = make_profile(
        memops=[
            copy("HtoD", 64_000, "cudaMemcpy_v3020", 100),  # small HtoD: exempt
            copy("HtoD", 64_001, "cudaMemcpy_v3020", 200),  # counted
            copy("DtoD", 10**6, "cudaMemcpy_v3020", 300),  # same device: exempt
            copy("DtoH", 8, "cudaMemcpy2D_v3020", 400),  # counted
            copy("DtoH", 10**6, "cudaMemcpyAsync_v3020", 500),  # async: not this rule
        ]
    )
    s = build_report(p).summary
    assert (s["sync_memcpy_count"], s["sync_memcpy_ns"], s["pageable_async_count"]) == (2, 20, 0)


def test_every_threshold_is_cited_and_used() -> None:
    from dlprof_lite.report import denominators, facts, summary
    from dlprof_lite.report.collectives import advice as collective_rules
    from dlprof_lite.report.idle import advice as idle_rules
    from dlprof_lite.report.ranks import advice as rank_rules

    modules = (rules, facts, summary, denominators, idle_rules, rank_rules, collective_rules)
    source = "".join(Path(m.__file__).read_text(encoding="utf-8") for m in modules)
    for key, t in THRESHOLDS.items():
        assert t.citation and t.rule, key
        assert "dlprof-lite choice" in t.citation or any(
            name in t.citation for name in ("TensorBoard", "Nsight", "DLProf", "HTA", "pyperf",
                                            "CUDA")
        ), key  # fmt: skip
        # a *_high key is used through its *_warn twin's rule
        used = {key, key.replace("_high", "_warn")}
        assert any(f"{q}{k}{q}" in source for k in used for q in "'\""), key


def test_every_report_column_has_a_definition() -> None:
    for table, columns in REPORTS.items():
        names = [c.name for c in columns]
        assert len(names) == len(set(names)), table
        defs = definitions(table)
        assert all(defs[n].strip() for n in names), table
    assert {f.name for f in dataclasses.fields(rules.Advice)} == set(column_names("advice"))


def test_markdown_reference_lists_every_column_and_threshold() -> None:
    from dlprof_lite.report.metrics import markdown_reference

    md = markdown_reference()
    for columns in REPORTS.values():
        assert all(f"| `{c.name}` |" in md for c in columns)
    assert all(f"| `{key}` |" in md for key in THRESHOLDS)


def test_empty_profile_report() -> None:
    report = build_report(make_profile())
    s = report.summary
    assert (s["kernel_ns"], s["devices"], s["gpu_utilization"], s["tc_share"]) == (0, 0, None, None)
    # No share, no denominator named.
    assert s["launch_overhead_scope"] is None and s["launch_overhead_pct"] is None
    assert "no CUDA kernels" in s["warnings"][0]
    assert report.advice.empty
