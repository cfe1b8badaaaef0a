"""The idle partition on every real export: the causes add up to the idle time, exactly.

Each corpus export is analysed as it comes (the steps its ranges give, if any) and once per
top-level range name that repeats (``key_range``: most exports have no training steps of
their own, so their repeated ranges stand in for steps). For every report with iterations:
per step, the device causes add up to ``phase_idle_ns`` and to the idle time recomputed here
from the ops (a plain sweep, per process and device), the host causes to ``wall_ns``; every
share in the idle table lies in 0-100 %.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlprof_lite
from conftest import corpus_files
from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column

CORPUS = corpus_files()
IDS = [p.name[:40] for p in CORPUS]


def _repeated_top_level(path: Path, most: int = 2) -> list[str]:
    """Key-range patterns of the top-level ranges that repeat (``aten::mm, op_id = 7``
    counted by its op name), payload-sized names left out."""
    ranges = dlprof_lite.load(path).ranges
    top = ranges.loc[(ranges["depth"] == 0).to_numpy(), "name"].astype(str)
    base = top.str.replace(r",\s*(?:op_id|seq|stashed seq)\s*=.*$", "", regex=True)
    counts = base[base.str.len() < 100].value_counts()
    return [f"^{re.escape(n)}(?:,|$)" for n in counts[counts >= 3].index[:most]]


def _idle_by_sweep(report: dlprof_lite.Report, path: Path) -> list[int]:
    """Per step: wall x timelines minus the union of each timeline's ops inside it."""
    profile = dlprof_lite.load(path, key_range=report.summary.window.key_range)
    ops = pd.concat([profile.kernels[["pid", "device_id", "start_ns", "end_ns"]],
                     profile.memops[["pid", "device_id", "start_ns", "end_ns"]]])  # fmt: skip
    lines = {k: sorted(zip(g["start_ns"], g["end_ns"], strict=True))
             for k, g in ops.groupby(["pid", "device_id"])}  # fmt: skip
    devices = len(lines) or max(len(profile.gpus), 1)
    out = []
    for it in report.iterations.itertuples():
        idle = (it.end_ns - it.start_ns) * devices
        for spans in lines.values():
            reach = it.start_ns  # covered up to here
            for s, e in spans:
                s, e = max(s, reach), min(e, it.end_ns)
                if e > s:
                    idle -= e - s
                    reach = e
        out.append(idle)
    return out


def _check(report: dlprof_lite.Report, path: Path) -> None:
    it = report.iterations
    device = it[[cause_column(DEVICE, c) for c in DEVICE_CAUSES]].to_numpy(dtype=np.int64)
    host = it[[cause_column(HOST, c) for c in HOST_CAUSES]].to_numpy(dtype=np.int64)
    assert (device >= 0).all() and (host >= 0).all()
    assert device.sum(axis=1).tolist() == it["phase_idle_ns"].astype("int64").tolist()
    assert host.sum(axis=1).tolist() == it["wall_ns"].astype("int64").tolist()
    assert device.sum(axis=1).tolist() == _idle_by_sweep(report, path)
    idle = report.idle
    for column in ("share_pct", "step_pct"):
        assert ((idle[column] >= 0) & (idle[column] <= 100 + 1e-9)).all(), column
    for kind in (DEVICE, HOST):
        shares = idle.loc[idle["kind"] == kind, "share_pct"]
        if len(shares):
            assert shares.sum() == pytest.approx(100.0)


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_causes_add_up_to_the_idle_time_on_real_exports(corpus_dir: Path, path: Path) -> None:
    checked = 0
    report = dlprof_lite.analyze(path)
    if len(report.iterations):
        _check(report, path)
        checked += 1
    for pattern in _repeated_top_level(path):
        report = dlprof_lite.analyze(path, key_range=pattern)
        if len(report.iterations):
            _check(report, path)
            checked += 1
    if not checked:
        pytest.skip("no steps and no repeated top-level range in this export")


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["YoonKyonghwan__EfficientCenterFormer__baseline.sqlite",
                                  "hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_"
                                  "perlmutter0.sqlite"])  # fmt: skip
def test_labelling_a_chunk_at_a_time_changes_nothing(
    corpus_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The partition labels long runs a chunk of stretches (and of steps) at a time; chunks
    of 3 stretches and 1 step give every figure the one-chunk run gives (a CPU-side export
    of 304 steps; a GPU one of 5 steps and hundreds of idle stretches)."""
    from dlprof_lite.report.idle import partition

    path = corpus_dir / name
    columns = [cause_column(DEVICE, c) for c in DEVICE_CAUSES] + [
        cause_column(HOST, c) for c in HOST_CAUSES]
    whole = dlprof_lite.analyze(path)
    monkeypatch.setattr(partition, "CHUNK", 3)
    monkeypatch.setattr(partition, "CHUNK_STEPS", 1)
    chunked = dlprof_lite.analyze(path)
    assert len(whole.iterations) >= 5
    pd.testing.assert_frame_equal(whole.iterations[columns], chunked.iterations[columns])
    pd.testing.assert_frame_equal(whole.idle, chunked.idle)
