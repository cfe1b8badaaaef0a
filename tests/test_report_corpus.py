"""The kernels table against ``nsys stats -r gpukernsum`` on real corpus exports.

gpukernsum groups by name *and* grid and block sizes; names with one launch configuration
compare row to row. Its StdDev is the sample standard deviation (ddof=1; 0.0 for one
instance), checked here against our ``std_ns``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlprof_lite.ingest.load import load
from dlprof_lite.report.tables import kernels_table
from nsys_oracle import nsys_report

FILES = (
    "quasiben__nvtx-examples__workflow.sqlite",
    "MohanadOdema__DLProf__nsys_profile.sqlite",
    "wenscarl__cutlass_benchmark__report1.sqlite",
)


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("name", FILES)
def test_kernel_statistics_equal_gpukernsum(corpus_dir: Path, nsys: str, name: str) -> None:
    export = corpus_dir / name
    oracle = nsys_report(nsys, export, "gpukernsum")
    single = oracle.groupby("Name").filter(lambda g: len(g) == 1).set_index("Name")
    ours = kernels_table(load(export).kernels).set_index("name")
    assert len(single) > 0
    for kernel, want in single.iterrows():
        got = ours.loc[kernel]
        assert got["instances"] == want["Instances"], kernel
        assert got["total_ns"] == want["Total Time (ns)"], kernel
        assert (got["min_ns"], got["max_ns"]) == (want["Min (ns)"], want["Max (ns)"]), kernel
        for col, theirs in (("avg_ns", "Avg (ns)"), ("median_ns", "Med (ns)"),
                            ("std_ns", "StdDev (ns)")):  # fmt: skip
            assert round(got[col], 1) == pytest.approx(want[theirs], abs=0.051), (kernel, col)
    total = oracle["Total Time (ns)"].sum()
    assert ours["total_ns"].sum() == total
