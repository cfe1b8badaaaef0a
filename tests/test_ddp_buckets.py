"""DDP gradient all-reduce per layer: ingest takes a bucket's ops out of the layer they ran
inside, the layers table shares each bucket's time among its layers by gradient bytes.

Hand-built fixtures with round numbers; the annotation side (which writes the ranges and
facts from DDP's own buckets) is tested in ``test_annotate_ddp.py``.
"""

from __future__ import annotations

import pandas as pd
import pytest

from builders import R, fact_mark, make_profile, phase
from builders import ranges as range_rows
from dlprof_lite.ingest.layers import assign_layers
from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.build import build_report
from dlprof_lite.rules.names import DDP_BUCKET, ddp_bucket_range
from test_layers import OURS, gpu_ops, labels, no_ops

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"


def test_ops_in_a_bucket_range_belong_to_no_layer() -> None:
    rng = range_rows([
        ("bwd:fc2:Linear", 0, 1000, -1, OURS),
        (ddp_bucket_range(3), 500, 700, 0, OURS),
        ("ncclAllReduce", 510, 690, 1, {"domain": "NCCL"}),  # NCCL's own NVTX range
        ("bwd:fc1:Linear", 1000, 2000, -1, OURS),
    ])  # fmt: skip
    kernels = gpu_ops("kernels", rng, [
        {"range_id": 0, "api_start_ns": 100},  # fc2's own backward work
        {"range_id": 2, "api_start_ns": 520},  # the collective, under NCCL's range
        {"range_id": 1, "api_start_ns": 505},  # the averaging, in the bucket's range
        {"range_id": 3, "api_start_ns": 1100},
    ])  # fmt: skip
    k, _ = assign_layers(kernels, no_ops(rng), rng)
    assert labels(k) == [
        ("fc2", "Linear", "backward", "backward"),
        (None, None, None, "backward"),
        (None, None, None, "backward"),
        ("fc1", "Linear", "backward", "backward"),
    ]
    assert k["ddp_bucket"].astype(object).where(k["ddp_bucket"].notna(), None).tolist() == [
        None, 3, 3, None,
    ]  # fmt: skip


def bucket(bucket_id: int, index: int, layers: dict[str, int], generation: int = 1) -> dict:
    value = {"id": bucket_id, "model": "model", "index": index, "generation": generation,
             "bytes": sum(layers.values()), "layers": layers}  # fmt: skip
    return fact_mark(DDP_BUCKET, value, t=10)


def step(base: int) -> list[R]:
    """One iteration: forward, then backward in which fc2's backward holds bucket 0's
    all-reduce (fc2 and fc1 gradients, 100 and 300 bytes) and fc1's holds bucket 1 (fc0)."""
    return [
        phase("iteration", base, base + 1000),
        phase("forward", base, base + 400),
        phase("backward", base + 400, base + 1000),
        R("bwd:fc2:Linear", base + 400, base + 700,
          [R(ddp_bucket_range(0), base + 600, base + 690)]),
        R("bwd:fc1:Linear", base + 700, base + 900),
        R("bwd:fc0:Linear", base + 900, base + 1000,
          [R(ddp_bucket_range(1), base + 950, base + 990)]),
    ]  # fmt: skip


def kernels_of(base: int) -> list[dict]:
    return [{"api_name": "cudaLaunchKernel_v7000", **k} for k in [
        dict(name="gemm_bwd_fc2", start_ns=base + 410, dur_ns=100, api_start_ns=base + 405,
             api_end_ns=base + 408),
        dict(name=NCCL, start_ns=base + 610, dur_ns=400, api_start_ns=base + 605,
             api_end_ns=base + 608, stream_id=9),
        dict(name="gemm_bwd_fc1", start_ns=base + 710, dur_ns=100, api_start_ns=base + 705,
             api_end_ns=base + 708),
        dict(name=NCCL, start_ns=base + 960, dur_ns=200, api_start_ns=base + 955,
             api_end_ns=base + 958, stream_id=9),
    ]]  # fmt: skip


def two_steps(marks: list[dict]) -> Profile:
    """Two analysed steps of :func:`step` with ``marks`` (the bucket facts)."""
    return make_profile(
        ranges=[*step(0), *step(2000)],
        kernels=[*kernels_of(0), *kernels_of(2000)],
        marks=marks,
        iterations=[(0, 1000, False, True), (2000, 3000, False, True)],
        session=(0, 4000),
    )


def test_bucket_time_is_shared_by_gradient_bytes() -> None:
    profile = two_steps([bucket(0, 0, {"fc2": 100, "fc1": 300}), bucket(1, 1, {"fc0": 500})])
    layers = build_report(profile).layers.set_index("layer")
    # 400 ns a step for bucket 0: fc2 holds 1/4 of its bytes, fc1 3/4; bucket 1 is fc0's.
    assert layers.loc["fc2", "grad_sync_ns"] == 2 * 100
    assert layers.loc["fc1", "grad_sync_ns"] == 2 * 300
    assert layers.loc["fc0", "grad_sync_ns"] == 2 * 200
    assert layers.loc["fc1", "step_grad_sync_ns"] == pytest.approx(300)
    assert layers["grad_bytes"].to_dict() == {"fc2": 100, "fc1": 300, "fc0": 500}
    assert layers["grad_buckets"].to_dict() == {"fc2": "0", "fc1": "0", "fc0": "1"}
    # The collective ran inside fc2's backward range, but is none of fc2's GPU time.
    assert layers.loc["fc2", "self_backward_gpu_ns"] == 2 * 100
    assert layers.loc["fc0", "backward_gpu_ns"] == 0


def test_only_the_newest_bucket_generation_gives_bytes() -> None:
    """DDP rebuilds its buckets after the first step: bytes and indices are the rebuilt ones,
    and time is booked by the composition each bucket had when it ran."""
    profile = two_steps([
        bucket(0, 0, {"fc2": 100, "fc1": 300}),
        bucket(1, 1, {"fc0": 500}),
        bucket(1, 0, {"fc0": 500}, generation=2),
        bucket(0, 1, {"fc2": 100, "fc1": 300}, generation=2),
    ])  # fmt: skip
    layers = build_report(profile).layers.set_index("layer")
    assert layers["grad_buckets"].to_dict() == {"fc2": "1", "fc1": "1", "fc0": "0"}
    assert layers.loc["fc1", "grad_sync_ns"] == 2 * 300


def test_without_ddp_the_columns_are_empty() -> None:
    profile = make_profile(
        ranges=[R("bwd:fc2:Linear", 0, 100)],
        kernels=[
            dict(
                name="k",
                start_ns=10,
                dur_ns=5,
                api_start_ns=5,
                api_end_ns=6,
                api_name="cudaLaunchKernel_v7000",
            )
        ],
    )
    layers = build_report(profile).layers
    assert layers["grad_sync_ns"].isna().all() and layers["grad_bytes"].isna().all()
    assert pd.api.types.is_integer_dtype(layers["grad_sync_ns"])


def test_the_console_lists_layers_by_gradient_all_reduce() -> None:
    import io

    from rich.console import Console

    from dlprof_lite.render.console import render

    profile = two_steps([bucket(0, 0, {"fc2": 100, "fc1": 300}), bucket(1, 1, {"fc0": 2048})])
    buffer = io.StringIO()
    render(build_report(profile), None, Console(file=buffer, width=120, highlight=False))
    text = buffer.getvalue()
    assert "Gradient all-reduce by layer" in text
    table = text.split("Gradient all-reduce by layer")[1].splitlines()
    assert "per step" in " ".join(table[:3])
    cells = [[c.strip() for c in line.split("│")] for line in table if line.startswith("fc")]
    assert cells == [["fc1", "0", "300 B", "300 ns"], ["fc0", "1", "2.0 KiB", "200 ns"],
                     ["fc2", "0", "100 B", "100 ns"]]  # fmt: skip
