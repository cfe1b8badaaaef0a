"""Kernel, range, layer and iteration tables on hand-built profiles, checked by hand.

The shared profile is :func:`builders.training_profile` (its docstring has the
timeline). Per step: copy 20 ns (data), gemm 100 (TC, fc1 forward), relu 20 (act forward),
sgemm 200 (fc1 backward), adam 50 (optimizer); three steps.
"""

from __future__ import annotations

import pandas as pd
import pytest

from builders import R, make_profile, phase
from dlprof_lite.report.layers.table import layers_table
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.steps.table import device_count, iterations_table
from dlprof_lite.report.tables import kernels_table, ranges_table
from example_profiles import training_profile


@pytest.fixture(scope="module")
def profile():
    return training_profile()


def rows(frame: pd.DataFrame, key: str) -> dict[str, dict]:
    return {r[key]: r for r in frame.to_dict("records")}


def test_kernels_table(profile) -> None:
    table = kernels_table(profile.kernels)
    assert list(table.columns) == column_names("kernels")
    # Sorted by total time: sgemm 3x200, gemm 3x100, adam 3x50, relu 3x20.
    assert table["name"].tolist() == [
        "sgemm_128x64_nt", "sm90_xmma_gemm_bf16bf16_tn", "adam_kernel", "relu_kernel",
    ]  # fmt: skip
    by = rows(table, "name")
    sgemm = by["sgemm_128x64_nt"]
    assert (sgemm["instances"], sgemm["total_ns"], sgemm["avg_ns"]) == (3, 600, 200.0)
    assert (sgemm["median_ns"], sgemm["min_ns"], sgemm["max_ns"], sgemm["std_ns"]) == (
        200.0, 200, 200, 0.0,
    )  # fmt: skip
    # All kernels: 600 + 300 + 150 + 60 = 1110 ns; 600 / 1110 = 54.05 %.
    assert sgemm["pct_kernel_time"] == pytest.approx(600 / 1110 * 100)
    assert table["pct_kernel_time"].sum() == pytest.approx(100.0)
    gemm = by["sm90_xmma_gemm_bf16bf16_tn"]
    assert (gemm["tc_class"], gemm["uses_tensor_cores"], gemm["tc_rule"]) == ("tc", True, "test-tc")
    assert gemm["api_name"] == "cudaLaunchKernel_v7000"
    # Launch calls 10 ns, queue 10 ns (GPU start - call end); host gaps 3 x 190.
    assert (gemm["avg_api_ns"], gemm["avg_queue_ns"], gemm["host_gap_ns"]) == (10.0, 10.0, 570)
    relu = by["relu_kernel"]
    # relu runs 20 ns after a 30 ns launch call: a short launch, 3 times.
    assert (relu["avg_api_ns"], relu["short_launches"], relu["host_gap_ns"]) == (30.0, 3, 300)
    assert by["adam_kernel"]["short_launches"] == 0


def test_kernel_statistics_sample_std_median_and_most_frequent_api() -> None:
    p = make_profile(
        kernels=[
            dict(name="k", start_ns=0, dur_ns=100, api_name="cudaLaunchKernel_v7000",
                 api_start_ns=-50, api_end_ns=-40),
            dict(name="k", start_ns=1000, dur_ns=200, api_name="cuLaunchKernel",
                 api_start_ns=900, api_end_ns=910),
            dict(name="k", start_ns=2000, dur_ns=600, api_name="cuLaunchKernel",
                 api_start_ns=1900, api_end_ns=1910),
            dict(name="once", start_ns=3000, dur_ns=7, api_name="cudaLaunchKernel_v7000",
                 api_start_ns=2900, api_end_ns=2910),
        ],
        session=(-100, 5000),
    )  # fmt: skip
    by = rows(kernels_table(p.kernels), "name")
    k = by["k"]
    # mean 300; deviations -200, -100, 300; sample variance (4 + 1 + 9) e4 / 2 = 7e4.
    assert k["avg_ns"] == 300.0
    assert k["std_ns"] == pytest.approx(70000**0.5)
    assert k["median_ns"] == 200.0
    assert k["api_name"] == "cuLaunchKernel"  # 2 of 3 launches
    # One instance: std 0, as nsys gpukernsum prints it.
    assert by["once"]["std_ns"] == 0.0


def test_ranges_table(profile) -> None:
    table = ranges_table(profile.kernels, profile.memops, profile.ranges)
    assert list(table.columns) == column_names("ranges")
    # Sorted by kernel GPU time, then wall time. The iteration and its phases are start/end
    # ranges, as the annotation writes them, and module ranges push/pop: ingest nests neither
    # under the other, so each is a top-level path of its own.
    assert table["path"].tolist() == [
        "iteration",
        "backward",  # 600, wall 2400
        "bwd:fc1:Linear",  # 600, wall 1200
        "forward",
        "fwd:fc1:Linear",
        "optimizer",
        "fwd:act:ReLU",  # 60, wall 450
        "data",  # 0
    ]
    by = rows(table, "path")
    it = by["iteration"]
    # walls 2000 + 2000 + 3000; kernels 3 x 370; the copies are memops (3 x 20).
    assert (it["instances"], it["wall_ns"], it["gpu_ns"], it["self_gpu_ns"]) == (3, 7000, 1110, 0)
    assert (it["style"], it["depth"], by["forward"]["style"]) == ("start_end", 0, "start_end")
    assert (it["kernels"], it["memops"], it["memop_ns"]) == (12, 3, 60)
    # projected: first GPU start (copy, +120) to last end (adam, +1680) = 1560 per step.
    assert it["projected_ns"] == 3 * 1560
    assert it["tc_gpu_ns"] == 300
    assert it["tc_share"] == pytest.approx(300 / 1110)
    fwd = by["forward"]
    # gemm 100 + relu 20 per step; projected 330..550 = 220 per step; TC 300 of 360.
    assert (fwd["wall_ns"], fwd["gpu_ns"], fwd["projected_ns"]) == (1800, 360, 660)
    assert fwd["tc_share"] == pytest.approx(300 / 360)
    fc1 = by["fwd:fc1:Linear"]
    assert (fc1["name"], fc1["domain"], fc1["style"]) == (
        "fwd:fc1:Linear",
        "dlprof-lite",
        "push_pop",
    )
    assert (fc1["wall_ns"], fc1["gpu_ns"], fc1["self_gpu_ns"], fc1["tc_share"]) == (
        450,
        300,
        300,
        1.0,
    )
    data = by["data"]
    assert (data["gpu_ns"], data["memops"], data["memop_ns"], data["projected_ns"]) == (
        0,
        3,
        60,
        60,
    )
    assert pd.isna(data["tc_share"])  # no kernels: no share


def test_layers_table(profile) -> None:
    table = layers_table(profile.kernels, profile.ranges)
    assert list(table.columns) == column_names("layers")
    assert table["layer"].tolist() == ["fc1", "act"]  # by GPU time: 900, 60
    fc1, act = table.to_dict("records")
    assert (fc1["type"], fc1["calls"]) == ("Linear", 3)
    # fwd:fc1 ranges 3 x 150; bwd:fc1 ranges 3 x 400.
    assert (fc1["forward_wall_ns"], fc1["backward_wall_ns"]) == (450, 1200)
    # forward gemm 3 x 100, backward sgemm 3 x 200.
    assert (fc1["forward_gpu_ns"], fc1["backward_gpu_ns"], fc1["gpu_ns"]) == (300, 600, 900)
    assert (fc1["kernels"], fc1["tc_gpu_ns"], fc1["tc_eligible"]) == (6, 300, True)
    assert fc1["tc_share"] == pytest.approx(1 / 3)
    assert fc1["host_gap_ns"] == 3 * (190 + 390)
    assert (act["type"], act["calls"], act["forward_wall_ns"], act["backward_wall_ns"]) == (
        "ReLU", 3, 450, 0,
    )  # fmt: skip
    assert (act["gpu_ns"], act["tc_share"], act["tc_eligible"]) == (60, 0.0, False)


def test_layer_known_only_from_kernels() -> None:
    # A layer the analysis found without module ranges (emit_nvtx, DLProf payloads).
    p = make_profile(
        kernels=[dict(name="k", start_ns=100, dur_ns=40, layer="aten::conv2d",
                      direction="forward", layer_type="Conv2d", tc=True)],
    )  # fmt: skip
    (row,) = layers_table(p.kernels, p.ranges).to_dict("records")
    assert (row["layer"], row["type"], row["forward_gpu_ns"], row["tc_share"]) == (
        "aten::conv2d", "Conv2d", 40, 1.0,
    )  # fmt: skip
    assert pd.isna(row["calls"])
    assert (row["forward_wall_ns"], row["backward_wall_ns"], row["tc_eligible"]) == (0, 0, True)


def checkpointed_two_roots():
    """A student and a teacher model; the student's ``block`` is checkpointed, so its
    forward runs again in the backward on autograd's thread (tid 2): once as ``rec:`` and
    once, as profiles made before ``rec:`` show it, as ``fwd:`` inside ``bwd:``."""
    auto = dict(tid=2)
    ranges = [
        phase("forward", 0, 1000),
        R("fwd:student:Net", 100, 500, [R("fwd:student.block:Block", 150, 400)]),
        R("fwd:teacher:Net", 600, 900, [R("fwd:teacher.block:Block", 650, 850)]),
        R("bwd:student:Net", 1000, 3000, [
            R("bwd:student.block:Block", 1100, 2900, [
                R("rec:student.block:Block", 1200, 1500, **auto),
                R("fwd:student.block:Block", 2000, 2400, **auto),
            ], **auto),
        ], **auto),
    ]  # fmt: skip
    kernels = [
        dict(name="gemm_fwd", start_ns=200, dur_ns=100, api_start_ns=160, api_end_ns=170,
             api_name="cudaLaunchKernel"),
        dict(name="gemm_teacher", start_ns=700, dur_ns=60, api_start_ns=660, api_end_ns=670,
             api_name="cudaLaunchKernel"),
        dict(name="gemm_rec", start_ns=1300, dur_ns=100, api_start_ns=1210, api_end_ns=1220,
             api_name="cudaLaunchKernel", tid=2),
        dict(name="gemm_bwd", start_ns=1700, dur_ns=200, api_start_ns=1600, api_end_ns=1610,
             api_name="cudaLaunchKernel", tid=2),
        dict(name="gemm_rec", start_ns=2100, dur_ns=100, api_start_ns=2010, api_end_ns=2020,
             api_name="cudaLaunchKernel", tid=2),
    ]  # fmt: skip
    return make_profile(ranges=ranges, kernels=kernels)


def test_layers_table_recompute_and_two_roots() -> None:
    p = checkpointed_two_roots()
    assert p.kernels["direction"].astype(object).tolist() == [
        "forward", "forward", "recompute", "backward", "recompute",
    ]  # fmt: skip
    by = rows(layers_table(p.kernels, p.ranges), "layer")
    assert sorted(by) == ["student", "student.block", "teacher", "teacher.block"]
    block = by["student.block"]
    # One real forward call (250 ns wall, 100 ns GPU); two recomputes (300 + 400 ns wall,
    # 2 x 100 ns GPU), counted apart; its backward: 1800 ns wall, 200 ns GPU.
    assert (block["calls"], block["forward_wall_ns"], block["forward_gpu_ns"]) == (1, 250, 100)
    assert (block["recompute_calls"], block["recompute_wall_ns"], block["recompute_gpu_ns"]) == (
        2, 700, 200,
    )  # fmt: skip
    assert (block["backward_wall_ns"], block["backward_gpu_ns"], block["gpu_ns"]) == (
        1800, 200, 500,
    )  # fmt: skip
    # The recompute kernels are not booked to the enclosing backward of the root.
    root = by["student"]
    assert (root["calls"], root["backward_wall_ns"], root["gpu_ns"]) == (1, 2000, 0)
    assert root["recompute_calls"] == 0
    teacher = by["teacher.block"]
    assert (teacher["calls"], teacher["forward_gpu_ns"], teacher["recompute_calls"]) == (1, 60, 0)


def test_iterations_table(profile) -> None:
    devices = device_count(profile.kernels, profile.memops, profile.gpus)
    assert devices == 1
    table = iterations_table(
        profile.kernels, profile.memops, profile.ranges, profile.iterations, devices
    )
    assert list(table.columns) == column_names("iterations")
    it0, it1, it2 = table.to_dict("records")
    assert (it0["wall_ns"], it0["warmup"], it1["warmup"], it2["wall_ns"]) == (
        2000,
        True,
        False,
        3000,
    )
    for it in (it0, it1, it2):
        # busy per step: 20 + 100 + 20 + 200 + 50 = 390, no overlap; kernels 370 of which 100 TC.
        assert (it["gpu_busy_ns"], it["kernels"], it["kernel_ns"]) == (390, 4, 370)
        assert it["tc_share"] == pytest.approx(100 / 370)
        assert (it["phase_data_ns"], it["phase_forward_ns"], it["phase_backward_ns"]) == (
            20,
            120,
            200,
        )
        assert (it["phase_optimizer_ns"], it["phase_other_ns"], it["data_wall_ns"]) == (50, 0, 200)
        assert it["phase_idle_ns"] == it["wall_ns"] - 390
    # host gaps: 190 + 100 + 390 + 490 = 1170 for the kernels, plus the copy's gap clipped to
    # its step: 510-1120 from 1000 in step 0, 2680-3120 from 3000 in step 1 (so from 5000 in
    # step 2): 120 each.
    assert [it0["host_gap_ns"], it1["host_gap_ns"], it2["host_gap_ns"]] == [1290, 1290, 1290]
    assert it0["launch_overhead_pct"] == pytest.approx(1290 / 2000 * 100)
    assert it2["launch_overhead_pct"] == pytest.approx(1290 / 3000 * 100)


def test_gpu_work_spilling_past_a_step_counts_in_the_next_window() -> None:
    p = make_profile(
        ranges=[phase("iteration", 0, 100), phase("iteration", 100, 200)],
        kernels=[dict(name="long", start_ns=50, dur_ns=100, api_name="cudaLaunchKernel_v7000",
                      api_start_ns=10, api_end_ns=20)],
        iterations=[(0, 100, False, True), (100, 200, False, True)],
    )  # fmt: skip
    table = iterations_table(p.kernels, p.memops, p.ranges, p.iterations, 1)
    # busy time is clocked per window (50 + 50); the kernel itself belongs to step 0.
    assert table["gpu_busy_ns"].tolist() == [50, 50]
    assert table["kernels"].tolist() == [1, 0]
    assert table["phase_idle_ns"].tolist() == [50, 50]


def test_empty_profile_gives_empty_tables_with_declared_columns() -> None:
    p = make_profile()
    for name, table in (
        ("kernels", kernels_table(p.kernels)),
        ("ranges", ranges_table(p.kernels, p.memops, p.ranges)),
        ("layers", layers_table(p.kernels, p.ranges)),
        ("iterations", iterations_table(p.kernels, p.memops, p.ranges, p.iterations, 1)),
    ):
        assert table.empty
        assert list(table.columns) == column_names(name)


def test_communication_kernels_name_their_collective() -> None:
    """The kernels table's ``comm``: the collective of NCCL kernel names (both generations of
    names), empty for a kernel that only mentions NCCL and for compute kernels."""
    names = [
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)",
        "void gemm<ncclKernel_AllReduce>(float*)",
        "volta_sgemm_128x64_nn",
    ]
    p = make_profile(
        kernels=[dict(name=n, start_ns=1000 * i, dur_ns=100, api_name="cudaLaunchKernel_v7000",
                      api_start_ns=1000 * i - 50, api_end_ns=1000 * i - 40)
                 for i, n in enumerate(names)],
        session=(-100, 5000),
    )  # fmt: skip
    comm = {r["name"]: r["comm"] for r in kernels_table(p.kernels).to_dict("records")}
    assert comm == dict(zip(names, ["AllReduce", "SendRecv", "", ""], strict=True))
