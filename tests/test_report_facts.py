"""Run facts (DataLoader settings, annotation cost) and the advice that reads them; FP32
GEMM/conv advice from kernel names alone, on hand-built profiles and the corpus.

The training profile (:func:`builders.training_profile`) has a 200 ns data phase
in steps of 2000 and 3000 ns: 8 % of the 2500 ns mean step, so the data-stall rule warns.
Fact marks are written with the annotation layer's own ``fact_text``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dlprof_lite
from builders import (
    build_gpus,
    build_marks,
    fact_mark,
    make_profile,
    phase,
)
from dlprof_lite.ingest.facts import facts_of
from dlprof_lite.report.build import build_report
from dlprof_lite.report.run_facts import read_run_facts
from dlprof_lite.rules.gemm import is_fp32_gemm
from example_profiles import training_profile
from nsys_db import NsysDb
from nsys_oracle import nsys_report

LOADER = dict(num_workers=4, batch_size=64, pin_memory=False, persistent_workers=False,
              length=100)  # fmt: skip


def advice_of(report, metric: str) -> dict | None:
    rows = [dataclasses.asdict(a) for a in report.summary.advice if a.metric == metric]
    return rows[0] if rows else None


def test_read_run_facts_dedupes_loaders_and_keeps_each_process() -> None:
    marks = build_marks([
        fact_mark("process", dict(rank=0, local_rank=0, world_size=2), 10),
        fact_mark("dataloader", LOADER, 100),
        fact_mark("dataloader", LOADER, 110, pid=2),  # rank 1: the same loader settings
        fact_mark("dataloader", {**LOADER, "num_workers": 0, "batch_size": 1}, 120),
        dict(start_ns=130, name='fact:{"dataloader": 3}', domain="dlprof-lite", pid=1, tid=1),
        dict(start_ns=140, name='fact:{"dataloader": {}}', domain="other", pid=1, tid=1),
        fact_mark("annotation", dict(module_calls=10, ns_per_call=100, steps=2), 900),
        fact_mark("annotation", dict(module_calls=30, ns_per_call=100, steps=2), 910, pid=2),
    ])  # fmt: skip
    facts = read_run_facts(facts_of(marks))
    assert [d["num_workers"] for d in facts.dataloaders] == [4, 0]
    assert dict(facts.annotation) == {
        1: dict(module_calls=10, ns_per_call=100, steps=2),
        2: dict(module_calls=30, ns_per_call=100, steps=2),
    }
    assert read_run_facts(facts_of(build_marks([]))) == type(facts)()


def test_summary_names_the_loaders_and_the_costliest_process() -> None:
    marks = [
        fact_mark("dataloader", LOADER, 100),
        fact_mark("dataloader", {**LOADER, "num_workers": 2, "batch_size": 256}, 200),
        # 10 calls x 100 ns / 2 steps = 500 ns; the other process 30 x 100 / 2 = 1500 ns.
        fact_mark("annotation", dict(module_calls=10, ns_per_call=100, steps=2), 9000),
        fact_mark("annotation", dict(module_calls=30, ns_per_call=100, steps=2), 9000, pid=2),
    ]
    s = build_report(training_profile(marks=marks)).summary
    assert (s["dataloader_count"], s["dataloader_num_workers"]) == (2, 2)
    assert s["dataloader_settings"] == (
        "num_workers=4, batch_size=64, pin_memory=False, persistent_workers=False; "
        "num_workers=2, batch_size=256, pin_memory=False, persistent_workers=False"
    )
    assert s["annotation_cost_ns"] == 1500
    assert s["annotation_cost_pct"] == pytest.approx(1500 / 2500 * 100)  # mean step 2500


def test_data_stall_advice_reads_the_workers_the_script_used() -> None:
    busy = build_report(training_profile(marks=[fact_mark("dataloader", LOADER, 100)]))
    found = advice_of(busy, "step_data_wall_pct")
    assert found is not None and found["severity"] == "warn"
    assert "num_workers=4, batch_size=64" in found["evidence"]
    assert "already uses num_workers=4" in found["recommendation"]
    assert "num_workers>0" not in found["recommendation"]
    assert "set pin_memory=True (now False)" in found["recommendation"]
    assert "set persistent_workers=True (now False)" in found["recommendation"]
    cpu_only = build_report(make_profile(
        ranges=[phase("iteration", 0, 1000), phase("data", 0, 500), phase("forward", 500, 1000)],
        iterations=[(0, 1000, False, True)], marks=[fact_mark("dataloader", LOADER, 10)],
    ))  # fmt: skip
    rec = advice_of(cpu_only, "step_data_wall_pct")["recommendation"]
    assert "persistent_workers=True (now False)" in rec and "pin_memory" not in rec
    pinned = {**LOADER, "pin_memory": True, "persistent_workers": True}
    tuned = build_report(training_profile(marks=[fact_mark("dataloader", pinned, 100)]))
    rec = advice_of(tuned, "step_data_wall_pct")["recommendation"]
    assert "already uses num_workers=4" in rec and "now False" not in rec

    serial = {**LOADER, "num_workers": 0}
    single = build_report(training_profile(marks=[fact_mark("dataloader", serial, 100)]))
    found = advice_of(single, "step_data_wall_pct")
    assert "num_workers>0" in found["recommendation"]
    assert "num_workers=0 now" in found["recommendation"]

    unknown = advice_of(build_report(training_profile()), "step_data_wall_pct")
    assert "num_workers is unknown" in unknown["evidence"]
    assert "num_workers unknown" in unknown["recommendation"]


def test_annotation_cost_advice_above_three_percent_of_the_step() -> None:
    def cost(ns_per_call: int) -> list[dict]:
        # 30 calls over 3 steps: 10 x ns_per_call per step, of a 2500 ns mean step.
        return [fact_mark("annotation", dict(module_calls=30, ns_per_call=ns_per_call,
                                             steps=3), 9000)]  # fmt: skip

    costly = build_report(training_profile(marks=cost(10)))  # 100 ns: 4 %
    found = advice_of(costly, "annotation_cost_pct")
    assert found is not None and found["value"] == pytest.approx(4.0)
    assert "--depth" in found["recommendation"]
    cheap = build_report(training_profile(marks=cost(5)))  # 50 ns: 2 %
    assert cheap.summary["annotation_cost_pct"] == pytest.approx(2.0)
    assert advice_of(cheap, "annotation_cost_pct") is None
    bad = [fact_mark("annotation", dict(module_calls=30, ns_per_call=10, steps=0), 9000)]
    assert build_report(training_profile(marks=bad)).summary["annotation_cost_ns"] is None


def foreign_fp32_profile(gpu: tuple[int, str, int, int, int]):
    """No NVTX ranges: 730 ns of cuBLAS SIMT sgemm, 270 ns elementwise: 73 % FP32 GEMM."""
    kernels = [
        dict(name="volta_sgemm_128x64_nn", start_ns=100, dur_ns=500),
        dict(name="void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16>",
             short_name="gemv2T_kernel_val", start_ns=700, dur_ns=230),
        dict(name="void at::native::vectorized_elementwise_kernel<4, float>",
             short_name="vectorized_elementwise_kernel", start_ns=1000, dur_ns=270),
    ]  # fmt: skip
    return make_profile(kernels=kernels, gpus=(gpu,))


def test_fp32_gemm_advice_from_kernel_names_without_layers() -> None:
    report = build_report(foreign_fp32_profile((0, "NVIDIA A100-SXM4-80GB", 108, 8, 0)))
    s = report.summary
    assert (s["fp32_gemm_ns"], s["fp32_gemm_share"]) == (730, pytest.approx(0.73))
    found = advice_of(report, "fp32_gemm_share")
    assert found is not None and found["severity"] == "high"
    assert "volta_sgemm_128x64_nn 500 ns" in found["evidence"]
    assert "gemv2T_kernel_val 230 ns" in found["evidence"]
    assert "autocast" in found["recommendation"]
    # A GPU without Tensor Cores: nothing to advise.
    pascal = build_report(foreign_fp32_profile((0, "NVIDIA GeForce GTX 1070", 15, 6, 1)))
    assert pascal.summary["fp32_gemm_share"] == pytest.approx(0.73)
    assert advice_of(pascal, "fp32_gemm_share") is None


def test_fp32_gemm_advice_defers_to_the_layer_rule() -> None:
    # fc1 (Linear) ran its backward on sgemm: the layer rule names the layer; no second row.
    report = build_report(training_profile())
    assert report.summary["fp32_gemm_ns"] == 600
    assert advice_of(report, "eligible_non_tc_share") is not None
    assert advice_of(report, "fp32_gemm_share") is None


TRT = "NVIDIA__trt-samples-for-hackathon-cn__cookbook_09-Advance_MultiStream_calculation-bound"


def test_fp32_gemm_advice_on_a_real_export_without_layer_ranges(corpus_dir: Path) -> None:
    # TensorRT FP32 inference on a GTX 1070: cuDNN scudnn/winograd and convolve_sgemm
    # kernels, TensorRT's own NVTX ranges (no layer ranges of ours).
    profile = dlprof_lite.load(corpus_dir / f"{TRT}.qdrep.sqlite")
    report = build_report(profile)
    s = report.summary
    assert report.layers.empty
    assert s["fp32_gemm_share"] > 0.9
    assert s.fp32_gemm_kernels[0].name.startswith("trt_maxwell_scudnn_winograd")
    assert advice_of(report, "fp32_gemm_share") is None  # Pascal: no Tensor Cores
    # The same kernels on a Tensor Core GPU get the advice.
    volta = dataclasses.replace(profile, gpus=build_gpus([(0, "Tesla V100", 80, 7, 0)]))
    found = advice_of(build_report(volta), "fp32_gemm_share")
    assert found is not None and found["severity"] == "high"
    assert "trt_maxwell_scudnn_winograd" in found["evidence"]


FACT_SCRIPT = """
from dlprof_lite.annotate import facts
facts.record("process", {"rank": None, "local_rank": None, "world_size": None})
facts.record("dataloader", {"num_workers": 3, "batch_size": 32, "pin_memory": True,
                            "persistent_workers": False, "length": 10})
facts.record("annotation", {"module_calls": 200, "ns_per_call": 1500, "steps": 4})
"""


@pytest.mark.nsys
def test_fact_marks_survive_a_real_nsys_run(nsys: str, tmp_path: Path) -> None:
    # The annotation layer's own writer, the real nsys, the real reader: the same facts.
    pytest.importorskip("nvtx")
    script = tmp_path / "facts_script.py"
    script.write_text(FACT_SCRIPT, encoding="utf-8")
    out = tmp_path / "facts"
    cmd = [nsys, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", "-o", str(out),
           "--force-overwrite=true", "--export=sqlite", sys.executable, str(script)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    facts = read_run_facts(dlprof_lite.load(out.with_suffix(".sqlite")).facts)
    assert facts.dataloaders == (
        dict(num_workers=3, batch_size=32, pin_memory=True, persistent_workers=False, length=10),
    )
    ((pid, annotation),) = facts.annotation
    assert annotation == dict(module_calls=200, ns_per_call=1500, steps=4) and pid > 0


# A foreign export (no NVTX ranges) on an A100: FP32 GEMM kernels of cuBLAS, cuBLASLt,
# CUTLASS and cuDNN 730 ns of 1000; the rest elementwise. (start, end, demangled name)
FOREIGN_KERNELS = [
    (1000, 1200, "volta_sgemm_128x64_nn"),
    (1300, 1450, "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_"
                 "warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"),
    (1500, 1600, "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
                 "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)"),
    (1700, 1800, "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, "
                 "false, true>(int, int, int, float const*, int, float*, float const*)"),
    (1900, 2080, "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, "
                 "false, false>(float, float)"),
    (2100, 2370, "void at::native::vectorized_elementwise_kernel<4, float>(int, float)"),
]  # fmt: skip


@pytest.mark.nsys
def test_fp32_advice_end_to_end_on_a_foreign_export(nsys: str, tmp_path: Path) -> None:
    export = tmp_path / "foreign.sqlite"
    with NsysDb(export) as db:
        db.process(1)
        db.gpu(0, name="NVIDIA A100-SXM4-80GB", sm_count=108, compute=(8, 0), chip="GA100")
        for i, (start, end, name) in enumerate(FOREIGN_KERNELS):
            db.runtime(start - 100, start - 90, "cudaLaunchKernel_v7000", pid=1, tid=1,
                       correlation_id=i + 1)  # fmt: skip
            db.kernel(start, end, name, pid=1, correlation_id=i + 1)
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "dlprof_lite", "analyze", str(export), "-o", str(out),
           "--quiet"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # Oracle: nsys's own per-name kernel totals, classified by name.
    sums = nsys_report(nsys, export, "gpukernsum")
    fp32 = sums[[is_fp32_gemm(n) for n in sums["Name"]]]["Total Time (ns)"].sum()
    assert fp32 == 730 and summary["fp32_gemm_ns"] == fp32
    assert summary["fp32_gemm_share"] == pytest.approx(fp32 / sums["Total Time (ns)"].sum())
    (row,) = [a for a in summary["advice"] if a["metric"] == "fp32_gemm_share"]
    assert row["severity"] == "high" and "volta_sgemm_128x64_nn 200 ns" in row["evidence"]
