"""The GPU check (scripts/gpu_check.sh, docs/gpu-validation.md) without a GPU.

The dry run is the device script's own logic on this machine: the real nsys profiles the
workload under dlprof-lite's bootstrap (tiny models on the CPU, NVTX only), the workload's own
clock times its steps and layers, Kineto runs the same steps, and everything is bundled as the
device tool would bring it back. The comparison then imports and analyses those profiles and
holds them to the workload's clock: the plumbing the GPU run relies on, checked end to end.

The Tensor Core check reads real ncu counters from an H200 (tests/fixtures/ncu_tensor_pipe.csv,
a few kernels of that run): dlprof-lite's name verdicts must equal what the tensor pipe did.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def compare_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_check_compare", REPO / "scripts" / "gpu_check" / "compare.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def table_rows(markdown: str, title: str) -> list[list[str]]:
    section = markdown.split(f"### {title}", 1)[1].split("\n### ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines()[2:] if line.startswith("| ") and "---" not in line
            ][1:]  # fmt: skip


def test_tensor_core_verdicts_equal_ncus_tensor_pipe(tmp_path: Path) -> None:
    (tmp_path / "ncu.log").write_bytes((FIXTURES / "ncu_tensor_pipe.csv").read_bytes())
    section = compare_module().tensor_cores(tmp_path)
    assert section.checked == 9 and section.failed == 0, section.rows

    def verdict(prefix: str) -> str:
        return next(str(row[2]) for row in section.rows if row[0].startswith(prefix))

    # the random-number kernel: tensor-pipe HFMA2 instructions, no MMA
    assert verdict("void at::<unnamed>::distribution") == "no_tc"
    assert verdict("nvjet_sm90_tst") == "tc"
    assert verdict("sm80_xmma_gemm_f32f32") == "no_tc"  # strict FP32: FFMA on CUDA cores


@pytest.mark.nsys
@pytest.mark.slow
def test_the_dry_run_profiles_bundles_and_compares(nsys: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, GPU_CHECK_WORK=str(tmp_path / "work"), NSYS_TARGET=nsys,
               PYTHON=sys.executable, OUT=str(out))  # fmt: skip
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "run", "--dry-run", "--budget", "150",
         "--configs", "cnn:fp32,gpt:bf16"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    for name in ("probe_carried_0", "run_cnn_fp32", "run_gpt_bf16"):
        line = next(x for x in summary.splitlines() if f"] {name}:" in x)
        assert "exit 0" in line and "oracle yes" in line and "FAILED" not in line, line
    assert "kineto: exit 0, 2 configs" in summary
    parts = sorted(out.glob("results.tgz.*"))
    assert parts and all(p.stat().st_size <= 15 * 2**20 for p in parts)

    markdown = tmp_path / "results.md"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check/compare.py", str(out), "--work",
         str(tmp_path / "unpacked"), "--markdown", str(markdown)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = markdown.read_text(encoding="utf-8")
    imported = table_rows(text, "Import and analysis")
    assert sorted(r[0] for r in imported if r[-1] == "yes") == ["run_cnn_fp32", "run_gpt_bf16"]
    layers = table_rows(text, "Per-layer time per step against the CUDA events")
    roots = [r for r in layers if r[1] == "<root> forward"]
    # the model's forward: the NVTX range against the script's own clock around the same call
    assert len(roots) == 2 and all(r[-1] == "yes" for r in roots), roots
    assert {r[0] for r in layers} == {"cnn fp32", "gpt bf16"}
    flops = table_rows(text, "FLOPs per step: dlprof-lite's count against FlopCounterMode "
                             "on the GPU")  # fmt: skip
    # on the same device the replay and FlopCounterMode on real tensors count the same
    assert [(r[0], r[-1]) for r in flops] == [("cnn_fp32", "yes"), ("gpt_bf16", "yes")]


def test_kernels_match_by_function_across_the_two_spellings() -> None:
    """nsys and Kineto name the same kernel differently (template parameters as ``T1``, an
    anonymous namespace as ``<unnamed>``, a name c++filt cannot demangle left mangled): real
    pairs from the H200 run, each matched to its function, and to no other."""
    compare = compare_module()
    with open(FIXTURES / "kernel_spellings.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert len(rows) == 5 and rows[-1]["kineto"].startswith("_ZN17cutlass")
    for row in rows:
        assert row["nsys"] != row["kineto"]
        assert compare.base_name(row["nsys"]) == compare.base_name(row["kineto"]) == row["function"]
