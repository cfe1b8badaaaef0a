"""The step breakdown adds up to the step: compile is compilation, uncovered time is other.

Hand-built profiles shaped like the product's output: ``iteration`` and phase ranges are
start/end ranges in the ``dlprof-lite`` domain, modules push/pop. Round numbers; every
figure is worked out in a comment (report/steps/table.py, report/summary.py, render/console.py).
"""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from builders import R, make_profile, phase
from dlprof_lite.ingest.iterations import find_iterations
from dlprof_lite.render.console import render
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import GPU_PRIORITY, PHASE_COLUMNS


def kernel(name: str, launch: int, start: int, dur: int) -> dict:
    return dict(name=name, start_ns=start, dur_ns=dur, api_name="cudaLaunchKernel",
                api_start_ns=launch, api_end_ns=launch + 5)  # fmt: skip


def compiled_profile(**meta):
    """Two steps of a compiled model, each 1000 ns, on one GPU.

    Step 0 [1000, 2000]: compile 1000-1300, forward 1300-1600, backward 1600-1800,
    optimizer 1800-1900, then 100 ns of logging that no phase covers.
    Step 1 (2000, 3000]: data 2000-2100, forward 2100-2400, backward 2400-2700, optimizer
    2700-2800, then 200 ns of logging.
    GPU: an autotuning kernel launched in compile (1150-1200); a forward GEMM 1400-1500; a
    host-to-device copy launched in step 1's data phase that runs 2420-2520 under a backward
    kernel 2450-2550 (so 30 ns of data time, 100 of backward); an optimizer kernel
    2750-2790; and a kernel launched at 2900 in the logging (2910-2930): other.
    """
    ranges = [
        phase("iteration", 1000, 2000),
        phase("compile", 1000, 1300), phase("forward", 1300, 1600),
        phase("backward", 1600, 1800), phase("optimizer", 1800, 1900),
        phase("iteration", 2000, 3000),
        phase("data", 2000, 2100), phase("forward", 2100, 2400),
        phase("backward", 2400, 2700), phase("optimizer", 2700, 2800),
    ]  # fmt: skip
    kernels = [
        kernel("triton_autotune", 1100, 1150, 50),
        kernel("gemm_fwd", 1350, 1400, 100),
        kernel("gemm_bwd", 2410, 2450, 100),
        kernel("adam", 2710, 2750, 40),
        kernel("log_reduce", 2900, 2910, 20),
    ]
    memops = [dict(kind="memcpy", copy_kind="HtoD", bytes=4096, src_mem="pinned",
                   dst_mem="device", start_ns=2420, dur_ns=100, api_name="cudaMemcpyAsync",
                   api_start_ns=2050, api_end_ns=2060)]  # fmt: skip
    return make_profile(
        ranges=ranges, kernels=kernels, memops=memops,
        iterations=[(1000, 2000, False, True), (2000, 3000, False, True)], **meta,
    )  # fmt: skip


@pytest.fixture(scope="module")
def report():
    return build_report(compiled_profile())


def test_every_phase_has_its_columns() -> None:
    assert "compile" in PHASE_COLUMNS and sorted(GPU_PRIORITY) == sorted(PHASE_COLUMNS)


def test_gpu_phases_and_idle_add_up_to_the_step(report) -> None:
    it = report.iterations.set_index("iteration")
    # Step 0: compile 50, forward 100; idle 1000 - 150.
    assert it.loc[0, "phase_compile_ns"] == 50 and it.loc[0, "phase_forward_ns"] == 100
    assert it.loc[0, "phase_data_ns"] == 0
    # Step 1: copy 2420-2520 under gemm_bwd 2450-2550: 30 data, 100 backward; adam 40;
    # the logging kernel 20 is other. Busy 2420-2550 + 40 + 20 = 190.
    row = it.loc[1]
    assert (row["phase_data_ns"], row["phase_backward_ns"]) == (30, 100)
    assert (row["phase_optimizer_ns"], row["phase_other_ns"], row["gpu_busy_ns"]) == (40, 20, 190)
    for i in (0, 1):
        parts = sum(int(it.loc[i, f"phase_{p}_ns"]) for p in PHASE_COLUMNS)
        assert parts == it.loc[i, "gpu_busy_ns"]
        assert parts + it.loc[i, "phase_idle_ns"] == it.loc[i, "wall_ns"]


def test_host_phases_and_other_add_up_to_the_step(report) -> None:
    it = report.iterations.set_index("iteration")
    assert (it.loc[0, "compile_wall_ns"], it.loc[0, "data_wall_ns"]) == (300, 0)
    assert (it.loc[0, "other_wall_ns"], it.loc[1, "other_wall_ns"]) == (100, 200)
    for i in (0, 1):
        host = sum(int(it.loc[i, f"{p}_wall_ns"]) for p in PHASE_COLUMNS)
        assert host == it.loc[i, "wall_ns"] == 1000


def test_summary_books_compile_as_compile_not_data(report) -> None:
    s = report.summary
    # Means over both steps: compile 300/2, data 100/2, other (100 + 200)/2.
    assert (s["step_compile_wall_ns"], s["step_data_wall_ns"]) == (150.0, 50.0)
    assert s["step_other_wall_ns"] == 150.0
    assert s["step_data_wall_pct"] == pytest.approx(5.0)
    assert (s["step_compile_ns"], s["step_data_ns"], s["step_other_ns"]) == (25.0, 15.0, 10.0)


def console_text(report) -> str:
    out = io.StringIO()
    render(report, None, Console(file=out, width=120, color_system=None))
    return out.getvalue()


def test_console_prints_no_phase_the_step_does_not_hold() -> None:
    # Only step 0 (no data phase): console shows compile and other, never "data 0".
    profile = compiled_profile()
    rows = find_iterations(profile.ranges)[0]
    assert rows["warmup"].tolist() == [True, False]  # step 0 compiles: warm-up
    report = build_report(dataclasses.replace(profile, iterations=rows.iloc[:1].assign(
        warmup=False)))  # fmt: skip
    text = console_text(report)
    gpu = next(line for line in text.splitlines() if line.startswith("step (mean, GPU)"))
    host = next(line for line in text.splitlines() if line.startswith("step (mean, host)"))
    assert "data" not in gpu and "data" not in host
    assert "compile 50 ns" in gpu and "compile 300 ns" in host and "other 100 ns" in host
    assert "steps: dlprof-lite's annotation: one per optimizer update" in text


def test_a_profile_without_phase_ranges_shows_other_only() -> None:
    profile = make_profile(
        ranges=[R("train", 0, 1000, domain=""), R("train", 1000, 2000, domain="")],
        kernels=[kernel("k", 100, 200, 300), kernel("k", 1100, 1200, 300)],
        iterations=[(0, 1000, False, True), (1000, 2000, False, True)],
    )
    profile = dataclasses.replace(profile, meta=dataclasses.replace(
        profile.meta, key_range="train", key_range_source="most-repeated"))  # fmt: skip
    report = build_report(profile)
    s = report.summary
    assert (s["step_data_wall_ns"], s["step_other_wall_ns"], s["step_other_ns"]) == (0, 1000, 300)
    text = console_text(report)
    assert "data 0" not in text and "step (mean, GPU): other 300 ns · idle 700 ns" in text
    assert "the most-repeated range, a guess" in text
    assert any("--key-range '^train$'" in w for w in s["warnings"]), s["warnings"]


def test_compiling_steps_are_warm_up_and_said_so() -> None:
    profile = compiled_profile()
    rows = find_iterations(profile.ranges)[0]
    s = build_report(dataclasses.replace(profile, iterations=rows)).summary
    assert s["iterations_warmup"] == 1 and s["iterations_analysed"] == 1
    assert any(w.startswith("iteration 0 compile (torch.compile): warm-up") for w in s["warnings"])
    # Given as analysed (an explicit window), the compile time is named as recompilation.
    s = build_report(profile).summary
    assert any("1 analysed iteration(s) compile" in w for w in s["warnings"]), s["warnings"]


def test_compile_inside_an_unended_phase_is_still_compile() -> None:
    # Step [0, 1000]: data 0-400 holding compile 100-300 (not tiled), forward 400-900 on
    # another thread overlapping data 350-400. Host: compile 200, forward 550 (it wins the
    # overlap over data), data 400 - 200 - 50 = 150, other 900-1000 = 100.
    profile = make_profile(
        ranges=[
            phase("iteration", 0, 1000), phase("data", 0, 400), phase("compile", 100, 300),
            phase("forward", 350, 900, tid=11),
        ],
        iterations=[(0, 1000, False, True)],
    )  # fmt: skip
    it = build_report(profile).iterations.iloc[0]
    assert (it["compile_wall_ns"], it["forward_wall_ns"], it["data_wall_ns"]) == (200, 550, 150)
    assert it["other_wall_ns"] == 100
    assert sum(int(it[f"{p}_wall_ns"]) for p in PHASE_COLUMNS) == 1000


def test_no_gpu_line_without_gpu_work() -> None:
    profile = make_profile(
        ranges=[
            phase("iteration", 0, 1000), phase("forward", 0, 600), phase("optimizer", 600, 900)
        ],
        iterations=[(0, 1000, False, True)],
    )  # fmt: skip
    text = console_text(build_report(profile))
    assert "step (mean, GPU)" not in text
    assert "step (mean, host): forward 600 ns · optimizer 300 ns · other 100 ns" in text


def test_host_phases_come_from_the_process_the_iterations_follow() -> None:
    # Two ranks, one step each [0, 1000]: rank 0 (pid 1) loads data 0-300, rank 1 (pid 2)
    # 0-100 and then runs forward. Rank 0's iteration ends at the boundary: its phases
    # count (data 300, forward 700); the union of both would give data 100.
    profile = make_profile(
        ranges=[
            phase("iteration", 0, 1000), phase("data", 0, 300), phase("forward", 300, 1000),
            phase("iteration", 0, 990, 20), phase("data", 0, 100, 20),
            phase("forward", 100, 990, 20),
        ],
        iterations=[(0, 1000, False, True)],
    )  # fmt: skip
    ranges = profile.ranges.copy()
    ranges.loc[(ranges["tid"] == 20).to_numpy(), "pid"] = 2
    it = build_report(dataclasses.replace(profile, ranges=ranges)).iterations.iloc[0]
    assert (it["data_wall_ns"], it["forward_wall_ns"], it["other_wall_ns"]) == (300, 700, 0)


def test_compilations_before_the_first_step_are_counted_and_named() -> None:
    # A model.compile() model compiles in its first call, before any iteration opens:
    # compile 100-400 and 500-700 stand alone; the first step's own compile is 1000-1300.
    ranges = [
        phase("compile", 100, 400), phase("compile", 500, 700),
        phase("iteration", 1000, 2000),
        phase("compile", 1000, 1300), phase("forward", 1300, 1600),
        phase("backward", 1600, 1800), phase("optimizer", 1800, 1900),
        phase("iteration", 2000, 3000), phase("data", 2000, 2100),
    ]  # fmt: skip
    profile = make_profile(
        ranges=ranges, iterations=[(1000, 2000, False, True), (2000, 3000, False, True)]
    )
    s = build_report(profile).summary
    assert (s["compile_count"], s["compile_wall_ns"]) == (3, 300 + 200 + 300)
    outside = [w for w in s["warnings"] if "outside every iteration" in w]
    assert outside == [
        "2 compilation(s), 0.0 ms, ran outside every iteration (before the first step): "
        "counted in compile_wall_ns, not in any step"
    ]
