"""Interval arithmetic of the report (unions, coverage of windows), on hand-made intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.intervals import (
    busy_in_windows,
    busy_per_device,
    covered_between,
    in_windows,
    merge,
    total,
)


def arr(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_merge_overlapping_nested_touching_and_disjoint() -> None:
    # [0,10) and [5,20) overlap; [6,8) is nested; [20,25) touches; [30,40) stands alone;
    # [50,50) is empty and disappears.
    starts, ends = merge(arr(30, 0, 5, 6, 20, 50), arr(40, 10, 20, 8, 25, 50))
    assert starts.tolist() == [0, 30]
    assert ends.tolist() == [25, 40]
    assert total((starts, ends)) == 25 + 10


def test_merge_of_nothing() -> None:
    starts, ends = merge(arr(), arr())
    assert len(starts) == len(ends) == 0
    assert covered_between((starts, ends), arr(0), arr(100)).tolist() == [0]


def test_covered_between_windows() -> None:
    segments = merge(arr(0, 30), arr(25, 40))
    # window [10, 35): 10..25 (15) + 30..35 (5) = 20; [25, 30) holds nothing;
    # [-5, 100) holds everything (25 + 10); [38, 39) is inside a segment: 1.
    got = covered_between(segments, arr(10, 25, -5, 38), arr(35, 30, 100, 39))
    assert got.tolist() == [20, 0, 35, 1]


def test_in_windows() -> None:
    # windows [0,10) and [20,30): 10 and 30 are outside (half-open), 19 between.
    got = in_windows(arr(-1, 0, 9, 10, 19, 20, 29, 30), arr(0, 20), arr(10, 30))
    assert got.tolist() == [False, True, True, False, False, True, True, False]


def test_busy_is_per_device_then_summed() -> None:
    ops = pd.DataFrame(
        {
            "pid": [7, 7, 7],
            "device_id": [0, 0, 1],
            "start_ns": [0, 5, 0],
            "end_ns": [10, 15, 10],
        }
    )
    busy = busy_per_device(ops)
    # device 0: [0,15) = 15; device 1: [0,10) = 10 (overlap across devices is not merged).
    assert {d: total(s) for d, s in busy.items()} == {(7, 0): 15, (7, 1): 10}
    assert busy_in_windows(ops, arr(0, 10), arr(10, 20)).tolist() == [20, 5]
