"""The analysis of generated exports equals their ground truth, in the harder shapes:
one NVTX range per kernel (the emit_nvtx shape), two processes reusing correlation ids,
and two threads per process launching on their own devices.
"""

from __future__ import annotations

import pandas as pd
import pytest

from dlprof_lite.ingest.load import load
from make_profile import make_profile


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gen") / "ranks.sqlite"
    truth = make_profile(path, iterations=6, layers=5, kernels_per_layer=2, threads=2,
                         processes=2, per_kernel_ranges=True, seed=5)  # fmt: skip
    return load(path), truth


def test_every_kernel_correlates_to_its_own_process_launch(generated) -> None:
    profile, truth = generated
    k = profile.kernels
    assert len(k) == truth.totals["kernels"]
    assert k["api_start_ns"].notna().all()
    assert (k["api_end_ns"] <= k["start_ns"]).all()  # launched before it ran, same process


def test_host_bound_gaps_total(generated) -> None:
    profile, truth = generated
    total = int(profile.kernels["host_gap_ns"].sum() + profile.memops["host_gap_ns"].sum())
    assert total == truth.totals["host_gap_ns"]


def test_gpu_time_per_phase(generated) -> None:
    profile, truth = generated
    per_phase = profile.kernels.groupby("phase", observed=True)["dur_ns"].sum()
    for phase, want in truth.phases.items():
        assert int(per_phase.get(phase, 0)) == want["kernel_ns"], phase


def test_forward_and_backward_gpu_time_per_layer(generated) -> None:
    profile, truth = generated
    k = profile.kernels
    by = k.groupby(["layer", "direction"], observed=True)["dur_ns"].sum()
    for layer, want in truth.layers.items():
        assert int(by.get((layer, "forward"), 0)) == want["fwd_ns"], layer
        assert int(by.get((layer, "backward"), 0)) == want["bwd_ns"], layer


def test_tensor_core_time_and_iterations(generated) -> None:
    profile, truth = generated
    k = profile.kernels
    assert int(k.loc[k["uses_tensor_cores"], "dur_ns"].sum()) == truth.totals["tc_kernel_ns"]
    # Iterations come from the thread with the most key instances; every thread ran them.
    assert len(profile.iterations) == truth.iterations[0]["count"]


def test_host_bound_gaps_per_phase(generated) -> None:
    profile, truth = generated
    ops = [profile.kernels[["phase", "host_gap_ns"]], profile.memops[["phase", "host_gap_ns"]]]
    per_phase = pd.concat(ops).groupby("phase", observed=True)["host_gap_ns"].sum()
    for phase, want in truth.phases.items():
        assert int(per_phase.get(phase, 0)) == want["host_gap_ns"], phase
