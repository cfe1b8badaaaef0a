"""The report tables of a generated nsys export against the generator's ground truth.

``scripts/make_profile.py`` writes a training-like export and, from its own arrays, what it
holds: per kernel name, per layer, per iteration, in total. The real pipeline (reader,
analysis, report) must reproduce those numbers.
"""

from __future__ import annotations

import pytest

from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from make_profile import make_profile


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gen") / "train.sqlite"
    truth = make_profile(path, iterations=12, layers=6, kernels_per_layer=2, seed=11)
    # The generator's truth is whole-run: tables over every iteration (--all-iterations).
    return build_report(load(path), all_iterations=True), truth


@pytest.fixture(scope="module")
def windowed(generated):
    """The default report: kernels and layers of the analysed iterations only."""
    report, truth = generated
    return build_report(load(report.summary.system.source)), truth


def test_totals(generated) -> None:
    report, truth = generated
    s, t = report.summary, truth.totals
    assert (s["kernel_count"], s["kernel_ns"], s["tc_gpu_ns"]) == (
        t["kernels"], t["kernel_ns"], t["tc_kernel_ns"],
    )  # fmt: skip
    assert (s["memcpy_count"] + s["memset_count"], s["memcpy_ns"] + s["memset_ns"]) == (
        t["memops"], t["memop_ns"],
    )  # fmt: skip
    assert s["iterations_count"] == t["iterations"]


def test_kernels_per_name(generated) -> None:
    report, truth = generated
    table = report.kernels.set_index("name")
    assert len(table) == len(truth.kernels)
    for name, want in truth.kernels.items():
        assert table.loc[name, "instances"] == want["instances"], name
        assert table.loc[name, "total_ns"] == want["total_ns"], name
        assert table.loc[name, "uses_tensor_cores"] == want["tensor_core"], name


def test_layers(generated) -> None:
    report, truth = generated
    table = report.layers.set_index("layer")
    assert set(table.index) == set(truth.layers)
    for layer, want in truth.layers.items():
        got = table.loc[layer]
        assert got["type"] == want["type"], layer
        assert (got["forward_gpu_ns"], got["backward_gpu_ns"]) == (want["fwd_ns"], want["bwd_ns"])
        assert got["kernels"] == want["fwd_kernels"] + want["bwd_kernels"], layer
        assert (got["tc_gpu_ns"], got["host_gap_ns"]) == (want["tc_ns"], want["host_gap_ns"])
        assert got["calls"] == truth.totals["iterations"], layer  # one forward per step


def test_tables_cover_the_analysed_iterations(windowed) -> None:
    """Warm-up iteration 0 is left out: the kernels and layers tables hold the kernel time
    the generator put in iterations 1..11, and the per-step means are that over 11 steps."""
    report, truth = windowed
    (thread,) = truth.iterations
    s = report.summary
    assert (s["window_scope"], s["window_iter_start"], s["window_iter_stop"]) == ("analysed", 1, 12)
    want = sum(thread["kernel_ns"][1:])
    assert int(report.kernels["total_ns"].sum()) == want == s["window_kernel_ns"]
    assert int(report.layers["gpu_ns"].sum()) <= want
    for layer, row in report.layers.set_index("layer").iterrows():
        assert row["calls"] == 11 and row["calls_per_step"] == 1.0, layer
        assert row["step_forward_gpu_ns"] == pytest.approx(row["forward_gpu_ns"] / 11), layer


def test_iterations(generated) -> None:
    report, truth = generated
    (thread,) = truth.iterations
    table = report.iterations
    assert table["end_ns"].tolist() == thread["end_ns"]
    assert table["kernel_ns"].tolist() == thread["kernel_ns"]
    # Each gap counts only inside its step (the generator clips its own simulated gaps).
    assert table["host_gap_ns"].tolist() == thread["step_host_gap_ns"]
    assert sum(thread["step_host_gap_ns"]) < sum(thread["host_gap_ns"])  # some gaps straddle


def test_host_bound_gaps_per_phase(generated) -> None:
    report, truth = generated
    for phase, want in truth.phases.items():
        got = int(report.iterations[f"phase_{phase}_host_gap_ns"].sum())
        assert got == want["step_host_gap_ns"], phase
