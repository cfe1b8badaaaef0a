"""Our correlation against nsys's own reports on every corpus export that has the data.

- per NVTX push/pop range name: kernel instances and total kernel time equal
  ``nsys stats -r nvtxkernsum`` summed over that range's rows;
- per kernel name: average launch-API and queue time equal ``kernexecsum`` (to its
  rounding: nsys prints averages to 0.1 ns).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlprof_lite
from conftest import corpus_files
from dlprof_lite.ingest.correlate import range_membership
from dlprof_lite.report.overhead import launch_times
from nsys_oracle import nsys_report

CORPUS = corpus_files()
IDS = [p.name[:40] for p in CORPUS]


def _nsys_range_name(ranges: pd.DataFrame) -> pd.Series:
    """nsys names a range in a named domain ``domain:name``."""
    name = ranges["name"].astype(str)
    domain = ranges["domain"].astype(str)
    return name.where(domain == "", domain + ":" + name)


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_range_kernel_totals_equal_nvtxkernsum(corpus_dir: Path, nsys: str, path: Path) -> None:
    profile = dlprof_lite.load(path)
    oracle = nsys_report(nsys, path, "nvtxkernsum")
    if oracle.empty:
        assert profile.kernels.empty or profile.ranges.empty
        return
    theirs = (
        oracle[oracle["Style"] == "PushPop"]
        .groupby("NVTX Range")[["Kern Inst", "Total Time (ns)"]]
        .sum()
    )
    pairs = range_membership(profile.kernels, profile.ranges)
    ranges = profile.ranges.set_index("range_id").loc[pairs["range_id"]]
    kernels = profile.kernels
    op = pairs["op_index"].to_numpy()
    # nsys joins a kernel to every runtime row of its correlation id, so a launch recorded
    # twice (pipit: cudaLaunchKernel and cudaLaunchKernel_v7000) counts twice in its total.
    launches = profile.api.groupby(["pid", "correlation_id"]).size()
    weight = launches.reindex(pd.MultiIndex.from_frame(kernels[["pid", "correlation_id"]]))
    frame = pd.DataFrame(
        {
            "range": _nsys_range_name(ranges).to_numpy(),
            "style": ranges["style"].astype(str).to_numpy(),
            "op": op,
            "dur": kernels["dur_ns"].to_numpy()[op] * weight.to_numpy()[op],
        }
    )
    frame = frame[frame["style"] == "push_pop"]
    # "Kern Inst" counts distinct kernels; "Total Time" sums every (kernel, range) pair,
    # so a kernel under two nested ranges of one name counts once there and twice here.
    ours = frame.groupby("range").agg(count=("op", "nunique"), sum=("dur", "sum"))
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["count"].to_numpy() == theirs["Kern Inst"].to_numpy()).all()
    assert (ours["sum"].to_numpy() == theirs["Total Time (ns)"].to_numpy()).all()


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_launch_api_and_queue_averages_equal_kernexecsum(
    corpus_dir: Path, nsys: str, path: Path
) -> None:
    profile = dlprof_lite.load(path)
    oracle = nsys_report(nsys, path, "kernexecsum")
    api_ns, queue_ns = launch_times(profile.kernels)
    if oracle.empty:
        assert not np.isfinite(api_ns).any()
        return
    k = profile.kernels.assign(api_ns=api_ns, queue_ns=queue_ns)
    # nsys joins a kernel to every runtime row with its correlation id; where a process
    # records the launch twice (pipit: cudaLaunchKernel and cudaLaunchKernel_v7000) it
    # counts the kernel twice. We keep one launch per kernel: compare the other names.
    api = profile.api[profile.api["correlation_id"] >= 0]
    twice = api[api.duplicated(["pid", "correlation_id"], keep=False)]
    twice_keys = pd.MultiIndex.from_frame(twice[["pid", "correlation_id"]])
    launched_twice = pd.MultiIndex.from_frame(k[["pid", "correlation_id"]]).isin(twice_keys)
    doubled = set(k.loc[launched_twice, "name"].astype(str))

    o = oracle[~oracle["Kernel Name"].isin(doubled)].copy()
    o["a_sum"] = o["AAvg (ns)"] * o["Count"]
    o["q_sum"] = o["QAvg (ns)"].fillna(0) * o["QCount"]
    theirs = o.groupby("Kernel Name")[["a_sum", "Count", "q_sum", "QCount"]].sum()
    mine = k[k["api_ns"].notna() & ~k["name"].astype(str).isin(doubled)]
    ours = mine.groupby(mine["name"].astype(str)).agg(
        n=("api_ns", "size"), a=("api_ns", "mean"),
        qn=("queue_ns", "count"), q=("queue_ns", "mean"),
    )  # fmt: skip
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["n"].to_numpy() == theirs["Count"].to_numpy()).all()
    assert (ours["qn"].to_numpy() == theirs["QCount"].to_numpy()).all()
    # nsys rounds each row's average to 0.1 ns; a name may span several rows.
    rows = o.groupby("Kernel Name").size().loc[ours.index].to_numpy()
    tol = 0.05 * rows + 1e-6
    a_theirs = (theirs["a_sum"] / theirs["Count"]).to_numpy()
    np.testing.assert_array_less(np.abs(ours["a"].to_numpy(dtype=float) - a_theirs), tol)
    has_q = (ours["qn"] > 0).to_numpy()
    q_theirs = (theirs["q_sum"] / theirs["QCount"]).to_numpy()[has_q]
    q_ours = ours["q"].to_numpy(dtype=float)[has_q]
    np.testing.assert_array_less(np.abs(q_ours - q_theirs), tol[has_q])
