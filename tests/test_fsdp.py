"""FSDP's collectives per layer: real units on the CPU (gloo), and a generated GPU export.

Real: tests/real_scripts/fsdp_train.py trains three blocks and a head under FSDP2
(``fully_shard``) and FSDP1 on two ranks, with widths that make FSDP pad every shard; the script
writes what FSDP itself holds per unit. Each unit's all-gathers (forward and backward) and
reduce-scatter must carry its layer and its padded bytes (not the unpadded ones), and each
call's wait + transfer must be its duration.

Generated: scripts/make_fsdp_profile.py schedules three units' all-gathers and reduce-scatters
on two GPUs against their compute in round numbers; the per-layer time, transfer, wait and
exposed time must equal its hand-made truth, from the annotation's facts; from the kernels
alone each collective lands on the layer whose range launched it. Its tensor-parallel
all-reduces (kernels no recorded call launched) land on the layers they ran in either way.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from make_fsdp_profile import AG, BYTES, CALLS, LAUNCHED_IN, RS, TP_TRUTH, TRUTH, make

SCRIPT = str(Path(__file__).parent / "real_scripts" / "fsdp_train.py")
STEPS = 6


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.nsys
@pytest.mark.slow
@pytest.mark.parametrize("version", [2, 1])
def test_real_units_carry_their_layer_and_padded_bytes(nsys: str, tmp_path: Path,
                                                       version: int) -> None:
    pytest.importorskip("torch.distributed.fsdp")
    out, truth_file = tmp_path / "fsdp.dlprof", tmp_path / "truth.json"
    command = [sys.executable, "-m", "dlprof_lite", "--nsys", nsys, "-o", str(out), "--quiet",
               "--", "torchrun", "--standalone", "--nproc_per_node=2", SCRIPT, "--truth",
               str(truth_file), "--fsdp", str(version), "--steps", str(STEPS)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    units = json.loads(truth_file.read_text(encoding="utf-8"))["units"]
    assert set(units) == {"blocks.0", "blocks.1", "blocks.2", "model"}
    calls = rows(out / "collectives.csv")
    for call in calls:  # each call: its wait and the transfer are its duration, to the ns
        assert int(call["duration_ns"]) == float(call["transfer_ns"]) + float(call["wait_ns"])
        assert call["fsdp"] == "True" and call["layer"] in units, call
        # gloo blocks the calling thread: no kernel overlaps, all of it is exposed
        assert float(call["exposed_ns"]) == int(call["duration_ns"])
    table = rows(out / "collective_layers.csv")
    steps = json.loads((out / "summary.json").read_text(encoding="utf-8"))["window_steps"]
    # by family: all_gather_single, all_gather_into_tensor or (FSDP1 on the CPU) all_gather
    found = {(r["layer"], r["pass"], r["op"].split("_")[0]): r for r in table}
    for layer, sizes in units.items():
        assert sizes["all_gather_bytes"] != sizes["unpadded_bytes"]  # FSDP padded this unit
        forward = found[(layer, "forward", "all")]
        assert float(forward["bytes_mean"]) == sizes["all_gather_bytes"]
        reduce = found[(layer, "backward", "reduce")]
        assert float(reduce["bytes_mean"]) == sizes["reduce_scatter_bytes"]
        for row in (forward, reduce):
            # one call per step: each rank's calls count in its own analysed steps
            assert float(row["calls_per_step"]) == 1.0 and row["fsdp"] == "True", (row, steps)
            assert float(row["time_ns"]) == pytest.approx(
                float(row["transfer_ns"]) + float(row["wait_ns"]), rel=1e-12)
    # gloo blocks: exposed by definition, and no prefetch would hide it: no FSDP advice
    advice = json.loads((out / "advice.json").read_text(encoding="utf-8"))["rows"]
    assert not [a for a in advice if a["problem"].startswith("FSDP")]
    # the blocks are gathered again for their backward (the root keeps its parameters)
    backward = {r["layer"] for r in table if r["pass"] == "backward" and r["op"].startswith("all")}
    assert backward & {"blocks.0", "blocks.1"}


def report_of(tmp_path: Path, *, annotated: bool) -> object:
    path = tmp_path / f"fsdp{int(annotated)}.sqlite"
    make(path, steps=STEPS, annotated=annotated)
    return build_report(load(path))


def test_per_layer_time_wait_and_exposure_equal_the_schedule(tmp_path: Path) -> None:
    report = report_of(tmp_path, annotated=True)
    table = report.collective_layers  # type: ignore[attr-defined]
    got = {(r.layer, r._2, r.op): r for r in table.itertuples()}  # _2: "pass"
    for (layer, phase), want in TP_TRUTH.items():  # not recorded: from their kernels
        row = got.pop((layer, phase, "AllReduce"))
        assert row.time_ns == want["time"] * 1000 and row.exposed_ns == want["exposed"] * 1000
        assert row.group == "0,1#k1" and not row.fsdp
    assert set(got) == set(TRUTH)
    for key, want in TRUTH.items():
        row = got[key]
        assert row.time_ns == want["time"] * 1000, key
        assert row.transfer_ns == want["transfer"] * 1000, key
        assert row.wait_ns == want["wait"] * 1000, key
        assert row.exposed_ns == want["exposed"] * 1000, key
        assert row.hidden_ns == (want["time"] - want["exposed"]) * 1000, key
        assert row.bytes_mean == BYTES[key[0]] and row.calls_per_step == 1.0 and row.fsdp
    calls = report.collectives  # type: ignore[attr-defined]
    assert (calls["duration_ns"] == calls["transfer_ns"] + calls["wait_ns"]).all()
    # exposed reduce-scatters: 300 µs of a 2540 µs iteration (above the tenth); the forward's
    # exposed all-gathers 180 µs (below it)
    problems = [a.problem for a in report.summary.advice]  # type: ignore[attr-defined]
    assert "FSDP backward reduce-scatters are exposed" in problems
    assert "FSDP forward all-gathers are exposed" not in problems


def test_kernels_alone_land_on_the_layer_that_launched_them(tmp_path: Path) -> None:
    report = report_of(tmp_path, annotated=False)
    table = report.collective_layers  # type: ignore[attr-defined]
    names = {AG: "AllGather", RS: "ReduceScatter"}
    want: dict[tuple[str, str, str], int] = {}
    for op, unit, phase, *_ in CALLS:
        key = (LAUNCHED_IN[(unit, phase, op)], phase, names[op])
        want[key] = want.get(key, 0) + TRUTH[(unit, phase, op)]["time"] * 1000
    for (layer, phase), tp in TP_TRUTH.items():
        want[(layer, phase, "AllReduce")] = tp["time"] * 1000
    got = {(r.layer, r._2, r.op): r.time_ns for r in table.itertuples()}
    assert got == want
    assert not table["fsdp"].any()
