"""Launch overhead: API time, queue time and host-bound GPU gaps of every kernel and memop.

Place in the pipeline: an analysis step of ``ingest`` (see :mod:`dlprof_lite.ingest.load`),
run after ``correlate.attach_launches`` has joined each GPU op to the API call that launched
it. It adds the derived column ``host_gap_ns``; the report computes ``api_ns`` and
``queue_ns`` from the op's own columns where it needs them
(:func:`dlprof_lite.report.overhead.launch_times`: kept as columns they cost 18 MB per
million kernels for two aggregations) and aggregates them per kernel, iteration, layer and
phase (:mod:`dlprof_lite.report.overhead`).

Definitions (docs/design.md "Launch overhead"):

- ``api_ns = api_end_ns - api_start_ns``: time the CPU spent inside the launch call, as the
  "API" column of nsys ``cuda_kern_exec_trace`` / ``cuda_kern_exec_sum`` and HTA's
  ``get_cuda_kernel_launch_stats`` (``cpu_duration``).
- ``queue_ns = start_ns - api_end_ns`` when >= 0, else ``<NA>``: time the op waited on the GPU
  after its launch call returned, as the "Queue" column of ``cuda_kern_exec_*`` (HTA calls
  it ``launch_delay``). A negative value means the op started before the call returned and
  has no queue time.
- short kernel: GPU duration < ``api_ns``, HTA's "short GPU kernels" — the CPU took longer
  to launch the kernel than the GPU took to run it (counted by the report:
  :func:`dlprof_lite.report.overhead.is_short_kernel`).
- ``host_gap_ns``: on one device of one process, over kernels *and* memops sorted by GPU
  start, the idle time before an op (``start_ns`` minus the latest end of every earlier op)
  when positive *and* the op's launch call started after that earlier work had ended:
  the GPU ran dry and had to wait for the CPU to issue more work. 0 otherwise, and 0 for an
  op without an API row (its launch time is unknown). The sum of these gaps in a step is the
  step's estimated launch overhead.

``device_id`` is the CUDA ordinal seen by the process (CUPTI ``deviceId``), so gaps are found
per ``(pid, device_id)``: two ranks that each see their own GPU as device 0 must not share
one timeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import pandas as pd


def launch_overhead(
    kernels: pd.DataFrame, memops: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Copies of ``kernels`` and ``memops`` with ``host_gap_ns``."""
    gaps = _host_gaps([kernels, memops])
    out = []
    for frame, gap in zip((kernels, memops), gaps, strict=True):
        new = frame.copy(deep=False)  # new columns only: the input is never touched
        new["host_gap_ns"] = gap
        out.append(new)
    return out[0], out[1]


def _int64(series: pd.Series) -> pd.Series:
    return series if str(series.dtype) == "Int64" else series.astype("Int64")


def _host_gaps(frames: Sequence[pd.DataFrame]) -> list[np.ndarray]:
    """Host-bound gap before each op of each frame, all frames on one timeline per device.

    Plain numpy over the stacked columns (a lexsort, a grouped running max): no DataFrame
    of a million rows is built, sorted or split again.
    """

    def col(name: str) -> np.ndarray:
        return np.concatenate([f[name].to_numpy(dtype=np.int64) for f in frames])

    # -1 never exceeds a previous end, so an op without API row gets no gap.
    api = np.concatenate([_int64(f["api_start_ns"]).fillna(-1).to_numpy(np.int64)
                          for f in frames])  # fmt: skip
    start, end = col("start_ns"), col("end_ns")
    device = (col("pid") << 32) | col("device_id")  # the timeline: (pid, device_id)
    order = np.lexsort((end, start, device))
    device, start, end, api = device[order], start[order], end[order], api[order]
    # Latest end of all earlier ops on the device: the running max, shifted by one op.
    # Overlapping ops on other streams are covered by the max, not just the previous op.
    running_end = pd.Series(end).groupby(device, sort=False).cummax().to_numpy()
    prev_end = np.roll(running_end, 1)
    same_device = np.zeros(len(order), dtype=bool)
    same_device[1:] = device[1:] == device[:-1]
    host_bound = same_device & (start > prev_end) & (api > prev_end)
    gap = np.empty(len(order), dtype=np.int64)
    gap[order] = np.where(host_bound, start - prev_end, 0)
    bounds = np.cumsum([0, *(len(f) for f in frames)])
    return [gap[a:b] for a, b in pairwise(bounds)]
