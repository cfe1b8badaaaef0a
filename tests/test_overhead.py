"""Launch overhead (ingest/overhead.py) on hand-built kernels and memops with round numbers.

Every expected number is worked out by hand in a comment next to the rows it comes from.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import builders
from dlprof_lite.ingest.overhead import launch_overhead
from dlprof_lite.report.overhead import is_short_kernel, launch_times, overhead_summary

NA = pd.NA


def ops(table: str, rows: list[dict]) -> pd.DataFrame:
    """A contract-shaped kernels/memops frame (:func:`builders.ops`) with no range.

    ``api`` is ``(api_start_ns, api_end_ns)`` or None for an op without an API row.
    """
    full = []
    for row in rows:
        row = dict(row)
        api = row.pop("api", None)
        if api is not None:
            launch = {"api_start_ns": api[0], "api_end_ns": api[1], "tid": 1}
            row = {**launch, "api_name": "cudaLaunchKernel_v7000", **row}
        full.append(row)
    return builders.ops(table, full, range_id=NA, range_path=NA)


def no_memops() -> pd.DataFrame:
    return builders.ops("memops", [])


def test_api_queue_and_host_bound_gaps_on_one_stream() -> None:
    kernels = ops(
        "kernels",
        [
            # k0 first op on the device: no gap. api 10-0 = 10, queue 20-10 = 10.
            {"api": (0, 10), "start_ns": 20, "end_ns": 50},
            # k1 starts when k0 ends (50 = 50): GPU never idle, gap 0. queue 50-25 = 25.
            {"api": (15, 25), "start_ns": 50, "end_ns": 80},
            # k2 idle 115-80 = 35 and launched at 100 > 80: the GPU waited for the CPU, 35.
            # queue 115-110 = 5.
            {"api": (100, 110), "start_ns": 115, "end_ns": 130},
            # k3 idle 140-130 = 10 but launched at 112 < 130, while the GPU was still busy:
            # not the CPU's fault, 0. queue 140-120 = 20.
            {"api": (112, 120), "start_ns": 140, "end_ns": 150},
            # k4 no API row: api/queue <NA>, no gap (launch time unknown).
            {"start_ns": 200, "end_ns": 210},
            # k5 idle 255-210 = 45, launched at 230 > 210: 45. queue 255-260 = -5 -> <NA>.
            # api 30 > GPU duration 10: a short kernel.
            {"api": (230, 260), "start_ns": 255, "end_ns": 265},
        ],
    )
    k, m = launch_overhead(kernels, no_memops())
    api, queue = launch_times(k)
    assert np.array_equal(api, [10, 10, 10, 8, np.nan, 30], equal_nan=True)
    assert np.array_equal(queue, [10, 25, 5, 20, np.nan, np.nan], equal_nan=True)
    assert k["host_gap_ns"].tolist() == [0, 0, 35, 0, 0, 45]
    assert k["host_gap_ns"].dtype == "int64"
    assert is_short_kernel(k).tolist() == [False, False, False, False, False, True]
    assert m.empty and "host_gap_ns" in m.columns
    # Inputs are left as they were.
    assert "host_gap_ns" not in kernels.columns


def test_overlapping_streams_share_the_device_timeline() -> None:
    kernels = ops(
        "kernels",
        [
            # s1 on stream 7 keeps the device busy from 10 to 100.
            {"api": (0, 5), "start_ns": 10, "end_ns": 100, "stream_id": 7},
            # s2 on stream 8 runs inside s1: the running max end is 100 > 20, no gap.
            {"api": (6, 8), "start_ns": 20, "end_ns": 40, "stream_id": 8},
            # s3 on stream 8: its own stream was idle 40..60 and it was launched at 50 > 40,
            # but the device was busy with s1 until 100, so the GPU never waited: 0.
            {"api": (50, 55), "start_ns": 60, "end_ns": 70, "stream_id": 8},
            # s4: idle 130 - max(100, 40, 70) = 30, launched at 120 > 100: 30.
            {"api": (120, 125), "start_ns": 130, "end_ns": 140, "stream_id": 7},
        ],
    )
    k, _ = launch_overhead(kernels, no_memops())
    assert k["host_gap_ns"].tolist() == [0, 0, 0, 30]


def test_devices_and_processes_have_separate_timelines() -> None:
    kernels = ops(
        "kernels",
        [
            # device 0: a at 0..10, then b at 40 launched at 30 > 10: gap 40-10 = 30.
            {"api": (0, 1), "start_ns": 0, "end_ns": 10, "device_id": 0},
            {"api": (30, 35), "start_ns": 40, "end_ns": 50, "device_id": 0},
            # device 1: 5..20, then 30 launched at 25 > 20: gap 30-20 = 10. Were the devices
            # one timeline, device 0's b would see max end 20 and report 20, not 30.
            {"api": (2, 3), "start_ns": 5, "end_ns": 20, "device_id": 1},
            {"api": (25, 28), "start_ns": 30, "end_ns": 45, "device_id": 1},
            # pid 2 also calls its GPU device 0 (its own CUDA_VISIBLE_DEVICES): its op at
            # 12..38 is on another timeline, so it neither fills device 0's 10..40 gap of pid 1
            # nor has a gap itself (first op of pid 2).
            {"api": (11, 12), "start_ns": 12, "end_ns": 38, "device_id": 0, "pid": 2},
        ],
    )
    k, _ = launch_overhead(kernels, no_memops())
    assert k["host_gap_ns"].tolist() == [0, 30, 0, 10, 0]


def test_a_memcpy_between_kernels_is_gpu_work() -> None:
    kernels = ops(
        "kernels",
        [
            {"api": (0, 5), "start_ns": 10, "end_ns": 20},
            # Without the memcpy this kernel would see idle 60-20 = 40 (launched at 38 > 20).
            # The copy runs 40..60, so the device is busy right up to 60: gap 0.
            {"api": (38, 42), "start_ns": 60, "end_ns": 70},
        ],
    )
    # The copy itself: idle 40-20 = 20, launched at 30 > 20: its gap is 20.
    memops = ops("memops", [{"api": (30, 35), "start_ns": 40, "end_ns": 60, "bytes": 1000}])
    k, m = launch_overhead(kernels, memops)
    assert k["host_gap_ns"].tolist() == [0, 0]
    assert m["host_gap_ns"].tolist() == [20]
    assert [list(t) for t in launch_times(m)] == [[5], [5]]  # 35-30, 40-35
    alone, _ = launch_overhead(kernels, no_memops())
    assert alone["host_gap_ns"].tolist() == [0, 40]


def test_summary_per_group_and_in_total() -> None:
    kernels = ops(
        "kernels",
        [
            # conv: api 10, queue 20-10 = 10, first op: gap 0
            {"api": (0, 10), "start_ns": 20, "end_ns": 50},
            # conv: api 10, queue 115-110 = 5, idle 115-50 = 65 launched at 100 > 50: gap 65
            {"api": (100, 110), "start_ns": 115, "end_ns": 130},
            # fc: no API row: no api/queue, gap 0
            {"start_ns": 200, "end_ns": 210},
            # fc: api 30, queue 255-260 < 0 -> none, idle 255-210 = 45 at 230 > 210: gap 45;
            # GPU 10 < api 30: short
            {"api": (230, 260), "start_ns": 255, "end_ns": 265},
        ],
    )
    k, _ = launch_overhead(kernels, no_memops())
    k["layer"] = pd.Categorical(["conv", "conv", "fc", "fc"])
    out = overhead_summary(k, ["layer"]).set_index("layer")
    assert k["host_gap_ns"].tolist() == [0, 65, 0, 45]
    assert out.loc["conv", "host_gap_ns"] == 65 and out.loc["fc", "host_gap_ns"] == 45
    assert out.loc["conv", "api_ns_mean"] == 10.0  # (10 + 10) / 2
    assert out.loc["conv", "queue_ns_mean"] == 7.5  # (10 + 5) / 2
    assert out.loc["fc", "api_ns_mean"] == 30.0  # the op without API row is skipped
    assert np.isnan(out.loc["fc", "queue_ns_mean"])  # no fc op has a queue time
    assert out.loc["fc", "short_kernels"] == 1 and out.loc["conv", "short_kernels"] == 0
    assert out.loc["fc", "ops"] == 2
    total = overhead_summary(k, [])
    assert total.columns.tolist() == [
        "ops",
        "host_gap_ns",
        "api_ns_mean",
        "queue_ns_mean",
        "short_kernels",
    ]
    # 0+65+0+45 = 110 ns of gaps; api mean (10+10+30)/3; queue mean (10+5)/2
    assert total.iloc[0].tolist() == [4, 110, pytest.approx(50 / 3), 7.5, 1]


def test_summary_keeps_ops_outside_every_group() -> None:
    k, _ = launch_overhead(
        ops("kernels", [{"api": (0, 1), "start_ns": 5, "end_ns": 6}] * 2), no_memops()
    )
    k["iteration"] = pd.array([0, NA], dtype="Int64")
    out = overhead_summary(k, ["iteration"])
    assert out["ops"].tolist() == [1, 1]
    assert out["iteration"].isna().tolist() == [False, True]


def test_memops_are_never_short_kernels() -> None:
    # A 1 ns memset launched by a 10 ns call: short by the numbers, but not a kernel.
    k, m = launch_overhead(
        ops("kernels", [{"api": (0, 10), "start_ns": 20, "end_ns": 21}]),
        ops("memops", [{"api": (30, 40), "start_ns": 50, "end_ns": 51, "kind": "memset"}]),
    )
    both = pd.concat([k, m], ignore_index=True)
    assert is_short_kernel(both).tolist() == [True, False]
