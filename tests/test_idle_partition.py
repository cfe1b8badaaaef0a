"""The idle partition on a generated step with planted causes: every nanosecond worked out by
hand (round numbers), on the device and on the main thread.

One step ``[0, 10000)`` on one device. The main thread (tid 10) waits for data, runs a
forward (``model`` > ``conv1``, ``fc``) with a stream sync inside conv1, a garbage collection
inside fc and a compilation; autograd's thread (tid 11) runs the backward (fc, then conv1
with a DDP bucket's all-reduce inside); the main thread steps the optimizer. A copy without
a launch call leaves its gap unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from builders import R, make_profile, phase
from dlprof_lite.report.build import build_report
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column

MAIN, AUTOGRAD = 10, 11


def _kernel(start: int, dur: int, api: tuple[int, int], tid: int = MAIN) -> dict:
    return {"name": "k", "start_ns": start, "dur_ns": dur, "api_start_ns": api[0],
            "api_end_ns": api[1], "api_name": "cudaLaunchKernel_v7000", "tid": tid}  # fmt: skip


def planted(extra: tuple[dict, ...] = (), **overrides: object):
    ranges = [
        phase("iteration", 0, 10_000), phase("data", 0, 2_000), phase("forward", 2_000, 5_000),
        phase("compile", 4_500, 4_800), phase("backward", 5_000, 8_000),
        phase("optimizer", 8_000, 10_000),
        R("fwd:model:Net", 2_000, 5_000, [
            R("fwd:conv1:Conv2d", 2_100, 3_000),
            R("fwd:fc:Linear", 3_000, 4_500, [R("gc:0", 3_500, 3_700)]),
        ]),
        R("bwd:fc:Linear", 5_100, 6_000, tid=AUTOGRAD),
        R("bwd:conv1:Conv2d", 6_000, 7_500, [R("ddp:bucket:0", 6_500, 6_700, tid=AUTOGRAD)],
          tid=AUTOGRAD),
    ]  # fmt: skip
    kernels = [
        _kernel(1_000, 500, (900, 950)),  # the batch's copy, launched in the data phase
        _kernel(2_700, 100, (2_650, 2_690)),  # conv1, after its sync
        _kernel(3_800, 100, (3_750, 3_790)),  # fc
        _kernel(4_900, 150, (4_850, 4_880)),  # after the compilation
        _kernel(5_200, 100, (5_150, 5_180), AUTOGRAD),
        _kernel(7_000, 400, (6_900, 6_950), AUTOGRAD),
        _kernel(9_000, 500, (8_500, 8_600)),  # the optimizer's
        *extra,
    ]
    memops = [{"start_ns": 4_000, "dur_ns": 100, "tid": pd.NA}]  # no launch call in the export
    sync = {"name": "cudaStreamSynchronize_v3020", "start_ns": 2_200, "end_ns": 2_600}
    profile = make_profile(ranges=ranges, kernels=kernels, memops=memops, api=[sync],
                           iterations=[(0, 10_000, False, True)], **overrides)  # fmt: skip
    return build_report(profile)


# Device: idle [0, 1000) data until the copy's launch returned (950), then queued; ...
DEVICE_PLANTED = {
    "data": 950 + 500,
    "sync": 400,
    "comm": 200,
    "compile": 300,
    "gc": 200,
    "launch": 40 + 40 + 30 + 30 + 50 + 100,
    "layer": 100 + 350 + 950 + 50 + 750 + 700,
    "optimizer": 500 + 500,  # before the launch; after the last kernel, its launcher's state
    "other": 50 + 600,  # autograd's thread between ranges; the main thread after backward
    "queued": 50 + 10 + 10 + 20 + 20 + 50 + 400,
    "unknown": 100,
}
DEVICE_LAYERS = {("model", "forward"): 150, ("conv1", "forward"): 350, ("fc", "forward"): 950,
                 ("fc", "backward"): 750, ("conv1", "backward"): 700}  # fmt: skip
HOST_PLANTED = {
    "data": 2_000, "sync": 400, "comm": 200, "compile": 300, "gc": 200,
    "layer": 300 + 500 + 1_300 + 1_300 + 900, "optimizer": 2_000, "other": 100 + 500,
}  # fmt: skip
HOST_LAYERS = {("model", "forward"): 300, ("conv1", "forward"): 500, ("fc", "forward"): 1_300,
               ("fc", "backward"): 900, ("conv1", "backward"): 1_300}  # fmt: skip


@pytest.fixture(scope="module")
def report():
    return planted()


def _by(idle: pd.DataFrame, kind: str, keys: list[str]) -> dict:
    mine = idle[idle["kind"] == kind]
    sums = mine.groupby(keys)["total_ns"].sum()
    return {k: int(v) for k, v in sums.items()}


def test_each_planted_device_nanosecond_lands_on_its_cause(report) -> None:
    it = report.iterations.iloc[0]
    assert it["phase_idle_ns"] == 10_000 - (500 + 100 + 100 + 100 + 150 + 100 + 400 + 500)
    got = {c: int(it[cause_column(DEVICE, c)]) for c in DEVICE_CAUSES}
    assert got == DEVICE_PLANTED
    assert sum(got.values()) == it["phase_idle_ns"]
    assert _by(report.idle, DEVICE, ["cause"]) == {k: v for k, v in DEVICE_PLANTED.items() if v}


def test_the_layer_and_phase_of_each_device_cause(report) -> None:
    idle = report.idle
    layers = idle[(idle["kind"] == DEVICE) & (idle["cause"] == "layer")]
    assert {(r.layer, r.phase): r.total_ns for r in layers.itertuples()} == DEVICE_LAYERS
    sync = idle[(idle["kind"] == DEVICE) & (idle["cause"] == "sync")].iloc[0]
    assert (sync["layer"], sync["phase"]) == ("conv1", "forward")  # the layer that called it
    gc = idle[(idle["kind"] == DEVICE) & (idle["cause"] == "gc")].iloc[0]
    assert (gc["layer"], gc["phase"]) == ("fc", "forward")


def test_each_planted_host_nanosecond_lands_on_its_cause(report) -> None:
    it = report.iterations.iloc[0]
    got = {c: int(it[cause_column(HOST, c)]) for c in HOST_CAUSES}
    assert got == HOST_PLANTED
    assert sum(got.values()) == it["wall_ns"] == 10_000
    layers = report.idle[(report.idle["kind"] == HOST) & (report.idle["cause"] == "layer")]
    assert {(r.layer, r.phase): r.total_ns for r in layers.itertuples()} == HOST_LAYERS


def test_shares_and_summary(report) -> None:
    idle = report.idle
    device = idle[idle["kind"] == DEVICE]
    assert device["share_pct"].sum() == pytest.approx(100.0)
    assert device["step_pct"].sum() == pytest.approx(8_050 / 10_000 * 100)
    assert idle[idle["kind"] == HOST]["share_pct"].sum() == pytest.approx(100.0)
    assert ((idle["share_pct"] >= 0) & (idle["share_pct"] <= 100)).all()
    s = report.summary.idle
    assert s.idle_data_ns == DEVICE_PLANTED["data"]
    assert s.idle_sync_ns == 400 and s.host_gc_ns == 200 and s.host_layer_ns == 4_300


def test_a_second_device_doubles_nothing_it_does_not_explain() -> None:
    """A second device with one early op: idle before it (data until its launch returned,
    then queued) and after it, explained by the thread that launched it, instant by instant
    (the main thread: data until 2000, then the forward's states)."""
    one = planted().iterations.iloc[0]
    second = {**_kernel(100, 100, (10, 50)), "device_id": 1}  # one op in the data phase
    gpus = ((0, "NVIDIA H100 80GB HBM3", 132, 9, 0), (1, "NVIDIA H100 80GB HBM3", 132, 9, 0))
    it = planted((second,), gpus=gpus).iterations.iloc[0]
    causes = {c: int(it[cause_column(DEVICE, c)]) for c in DEVICE_CAUSES}
    assert sum(causes.values()) == it["phase_idle_ns"] == one["phase_idle_ns"] + 10_000 - 100
    assert causes["data"] == DEVICE_PLANTED["data"] + 50 + 1_800
    assert causes["queued"] == DEVICE_PLANTED["queued"] + 50
    assert causes["sync"] == 2 * 400 and causes["gc"] == 2 * 200


def test_a_profile_without_gpu_work_books_its_device_by_the_main_thread() -> None:
    ranges = [phase("iteration", 0, 1_000), phase("data", 0, 300), phase("forward", 300, 600),
              R("fwd:model:Net", 300, 600), phase("backward", 600, 800),
              R("bwd:model:Net", 600, 800), phase("optimizer", 800, 1_000)]  # fmt: skip
    report = build_report(make_profile(ranges=ranges, iterations=[(0, 1_000, False, True)]))
    it = report.iterations.iloc[0]
    host = {c: int(it[cause_column(HOST, c)]) for c in HOST_CAUSES}
    assert host == {"data": 300, "sync": 0, "comm": 0, "compile": 0, "gc": 0, "layer": 500,
                    "optimizer": 200, "other": 0}  # fmt: skip
    device = {c: int(it[cause_column(DEVICE, c)]) for c in DEVICE_CAUSES}
    assert sum(device.values()) == it["phase_idle_ns"] == 1_000
    assert device["data"] == 300 and device["layer"] == 500


def test_causes_are_one_list() -> None:
    """Each cause is named once (rules/idle.py): the summary's fields are its columns."""
    from dataclasses import fields

    from dlprof_lite.report.summary_types import Idle

    names = [f.name for f in fields(Idle)]
    assert names == [cause_column(DEVICE, c) for c in DEVICE_CAUSES] + [
        cause_column(HOST, c) for c in HOST_CAUSES]
    assert np.all([c in DEVICE_CAUSES for c in HOST_CAUSES])


def test_advice_names_the_cause_and_the_layer(report) -> None:
    found = {a.metric: a for a in report.summary.advice}
    layer = found["idle.step_pct[device layer]"]
    assert layer.severity == "high" and layer.value == pytest.approx(29.0)  # 2900 of 10000 ns
    assert "(most in fc)" in layer.problem and "conv1 (backward)" in layer.evidence
    assert found["idle.step_pct[device optimizer]"].severity == "warn"
    # below idle_cause_warn_pct (5 %): no finding; data and launch have findings of their own
    assert {"idle.step_pct[device sync]", "idle.step_pct[device gc]",
            "idle.step_pct[device data]"}.isdisjoint(found)  # fmt: skip
