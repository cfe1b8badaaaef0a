"""The rules package: each rule on real names, and importable without pandas, numpy or torch.

Tensor Core and FP32 GEMM rules have their own tests on real names (test_tensorcore.py,
test_gemm_rules.py); this file covers communication kernels, input suffixes, NVTX names,
step names and the iteration sources. Real names come from ../shared/tc_kernels.tsv (HTA's
A100 traces) and the corpus exports.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pandas as pd
import pytest

from dlprof_lite.rules import apis, comm, inputs, iterations, names, steps

MFU_2GPU = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"


def _kernel_names(path: Path) -> list[str]:
    """Every distinct demangled kernel name of a corpus export."""
    sql = (
        "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    )
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            return [row[0] for row in db.execute(sql)]
        except sqlite3.OperationalError:  # an export without kernels
            return []


def _tsv(shared_dir: Path) -> pd.DataFrame:
    return pd.read_csv(shared_dir / "tc_kernels.tsv", sep="\t", dtype=str, keep_default_na=False)


# ---- communication kernels ---------------------------------------------------------------


def test_nccl_kernels_of_the_tsv_are_communication(shared_dir: Path) -> None:
    tsv = _tsv(shared_dir)
    said = tsv["evidence"].str.contains("communication kernel", regex=False)
    nccl = sorted(set(tsv.loc[said, "name"]))
    # Both argument lists NCCL 2.1x kernels were traced with, two collectives.
    assert len(nccl) >= 4
    assert {comm.comm_kernel(n) for n in nccl} == {"AllReduce", "SendRecv"}
    others = tsv.loc[~said, "name"]
    assert len(others) > 200
    assert not [n for n in others if comm.is_comm_kernel(n)]


def test_nccl_2_19_kernel_of_a_real_two_gpu_export(corpus_dir: Path) -> None:
    found = _kernel_names(corpus_dir / MFU_2GPU)
    hits = [n for n in found if comm.is_comm_kernel(n)]
    assert hits == ["ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"]
    assert comm.comm_kernel(hits[0]) == "SendRecv"
    assert len(found) > 10  # the other kernels (GEMMs, elementwise, flash) are compute


def test_no_kernel_of_the_rest_of_the_corpus_is_communication(corpus_dir: Path) -> None:
    checked = 0
    for path in sorted(corpus_dir.glob("*.sqlite")):
        if path.name == MFU_2GPU:
            continue
        found = _kernel_names(path)
        checked += len(found)
        assert not [n for n in found if comm.is_comm_kernel(n)], path.name
    assert checked > 100


@pytest.mark.parametrize(
    ("name", "func"),
    [
        # NCCL >= 2.19 per-collective kernels, as src/device/generate.py names them
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)", "AllReduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)", "AllGather"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096>)", "Generic"),
        ("void ncclKernel_ReduceScatter_RING_SIMPLE_Sum_half(ncclWorkElem)", "ReduceScatter"),
        # a user kernel that mentions NCCL, and HTA-style substrings that are no kernel of it
        ("void my_ncclKernel_copy<float>(float*)", None),
        ("void at::native::reduce_kernel<512, 1>(nccl_like)", None),
        ("ncclKernelish", None),
    ],
)
def test_comm_kernel_names(name: str, func: str | None) -> None:
    assert comm.comm_kernel(name) == func


# ---- input suffixes ----------------------------------------------------------------------


def test_every_corpus_export_is_an_accepted_input(corpus_dir: Path) -> None:
    files = [p for p in corpus_dir.iterdir() if p.is_file() and p.suffix != ".tsv"]
    exports = [p for p in files if p.suffix == ".sqlite"]
    assert len(exports) >= 15
    for path in exports:
        assert inputs.is_input(path) and not inputs.is_report(path), path.name
    # An export named after its report (run.nsys-rep.sqlite) is an export, not a report.
    assert any(".nsys-rep." in p.name or ".qdrep." in p.name for p in exports)


@pytest.mark.parametrize(
    ("name", "report"),
    [
        ("run.nsys-rep", True),
        ("old.qdrep", True),
        ("stream.qdstrm", True),
        ("RUN.NSYS-REP", True),
        ("run.sqlite", False),
        ("run.SQLite", False),
    ],
)
def test_accepted_suffixes(name: str, report: bool) -> None:
    assert inputs.is_input(name)
    assert inputs.is_report(name) is report


@pytest.mark.parametrize("name", ["run.json", "run.nsys-rep.zip", "report.csv", "run"])
def test_other_files_are_no_input(name: str) -> None:
    assert not inputs.is_input(name) and not inputs.is_report(name)


def test_suffix_tuples_agree() -> None:
    assert inputs.INPUT_SUFFIXES == (".sqlite", ".nsys-rep", ".qdrep", ".qdstrm")
    assert set(inputs.PROFILE_SUFFIXES) < set(inputs.REPORT_SUFFIXES) < set(inputs.INPUT_SUFFIXES)


# ---- NVTX names, step names, iteration sources -------------------------------------------


@pytest.mark.parametrize(
    ("direction", "qualname", "type_name", "parsed"),
    [
        (names.FORWARD, "layer1.0.conv1", "Conv2d", "forward"),
        (names.BACKWARD, "student.fc1", "Linear", "backward"),
        (names.RECOMPUTE, "blocks.3.attn", "Attention", "recompute"),
        (names.FORWARD, "", "Net", "forward"),  # a root with no qualified name: "model"
    ],
)
def test_module_range_round_trip(
    direction: str, qualname: str, type_name: str, parsed: str
) -> None:
    text = names.module_range(direction, qualname, type_name)
    module = names.parse_module_range(text)
    assert module == names.ModuleRange(parsed, qualname or names.ROOT_MODULE, type_name)
    assert module.direction in names.DIRECTIONS


def test_phase_names() -> None:
    assert names.PHASES[:4] == ("data", "forward", "backward", "optimizer")
    assert names.OPTIMIZER == "optimizer" and names.COMPILE in names.PHASES
    assert names.parse_module_range("forward") is None


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("ProfilerStep#12", "ProfilerStep##"),  # torch.profiler's own step ranges
        ("train_step_3", "train_step_#"),
        ("epoch 1 step 30", "epoch # step #"),
        ("aten::addmm, seq = 8", None),  # an emit_nvtx op, never a step
        ("fwd:step1:Linear", None),  # our module range
        ("epoch 3", None),  # no step word
    ],
)
def test_step_keys(name: str, key: str | None) -> None:
    assert steps.step_key(name) == key


def test_no_range_name_of_the_corpus_is_a_numbered_step(corpus_dir: Path) -> None:
    """No corpus export has step ranges: a rule that called one a step would be too broad."""
    seen = 0
    for path in sorted(corpus_dir.glob("*.sqlite")):
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            try:
                rows = db.execute(
                    "SELECT DISTINCT coalesce(e.text, s.value) FROM NVTX_EVENTS e "
                    "LEFT JOIN StringIds s ON s.id = e.textId"
                ).fetchall()
            except sqlite3.OperationalError:
                continue
        found = [r[0] for r in rows if isinstance(r[0], str)]
        seen += len(found)
        assert not [n for n in found if steps.step_key(n)], path.name
    assert seen > 100


def test_guessed_sources_are_sources() -> None:
    assert set(iterations.GUESSED) < set(iterations.SOURCES)
    assert "key-range" not in iterations.GUESSED and "annotation" not in iterations.GUESSED
    assert iterations.STEADY_TOLERANCE > 0 and 0 < iterations.HIGH_VARIANCE_CV < 1


def test_rules_import_no_pandas_numpy_or_torch() -> None:
    code = (
        "import sys\n"
        "import dlprof_lite.rules.comm, dlprof_lite.rules.gemm, dlprof_lite.rules.inputs\n"
        "import dlprof_lite.rules.iterations, dlprof_lite.rules.names, dlprof_lite.rules.steps\n"
        "import dlprof_lite.rules.tensor_cores, dlprof_lite.rules.facts\n"
        "import dlprof_lite.errors, dlprof_lite.progress\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'torch', 'rich') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- CUDA API names ----------------------------------------------------------------------


def _api_names(path: Path) -> set[str]:
    sql = (
        "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId"
    )
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        try:
            return {row[0] for row in db.execute(sql)}
        except sqlite3.OperationalError:
            return set()


def test_launch_and_sync_apis_on_real_api_names(corpus_dir: Path) -> None:
    seen: set[str] = set()
    for path in sorted(corpus_dir.glob("*.sqlite")):
        seen |= _api_names(path)
    frame = pd.Series(sorted(seen))
    launch = set(frame[frame.str.contains(apis.LAUNCH_API_PATTERN)])
    # Kernel launches, with and without nsys's version suffix, and copies.
    assert {"cudaLaunchKernel", "cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020"} <= launch
    assert not [n for n in launch if "Synchronize" in n or n.startswith("cudaMalloc")]
    assert {n for n in seen if n.startswith("cudaLaunchKernel")} <= launch
    sync = {n for n in seen if n.startswith(apis.SYNC_APIS)}
    assert "cudaDeviceSynchronize_v3020" in sync and "cudaStreamSynchronize_v3020" in sync
    assert not (sync & launch)
    versioned = set(frame[frame.str.contains(apis.VERSION_SUFFIX_PATTERN)])
    assert "cudaLaunchKernel_v7000" in versioned and "cudaLaunchKernel" not in versioned


# ---- names wrappers added (rules/wrappers.py; the classes: test_annotate_wrappers.py) ------


def test_legacy_names_lose_the_wrapper_segments() -> None:
    from dlprof_lite.rules.wrappers import adds_wrappers, without_wrappers

    assert without_wrappers("module.layer1.0.conv1") == "layer1.0.conv1"
    assert without_wrappers("_lightning_module.fc") == "fc"
    assert without_wrappers("_lightning_module") == "model"
    assert without_wrappers("_orig_mod.fc") == "fc"
    assert without_wrappers("_fsdp_wrapped_module.layer1._fsdp_wrapped_module.0") == "layer1.0"
    assert without_wrappers("student.fc") == "student.fc"
    assert adds_wrappers("module.module", "module")  # a user's attribute under DDP
    assert adds_wrappers("_lightning_module", "model")
    assert adds_wrappers("_fsdp_wrapped_module.layer1._fsdp_wrapped_module.0", "layer1.0")
    assert not adds_wrappers("module.fc", "module.fc")
    assert not adds_wrappers("encoder.fc", "fc")
    assert not adds_wrappers("module.fc", "_orig_mod.fc")

