"""The peak-throughput table (rules/peaks.py): sources, dense figures, and device-name lookup.

(a) every row is cited and well formed; (b) figures against the datasheets, and ratio checks
that catch a sparse ("with sparsity") figure entered where a dense one belongs; (c) real
CUDA device names, as nsys and torch report them, reach the intended row, each row is
reached by one (no dead or shadowed row), and unknown GPUs get no peak; (d) the GPU names in
the corpus exports.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import corpus_files
from dlprof_lite.rules.peaks import DTYPES, PEAKS, Peak, peak_for, peak_tflops

# ---------------------------------------------------------------------------------------
# (a) every row is cited and well formed


@pytest.mark.parametrize("peak", PEAKS, ids=lambda p: p.gpu)
def test_row_is_cited_and_well_formed(peak: Peak) -> None:
    title, _, url = peak.source.rpartition(", ")
    assert title.strip(), "a source names its datasheet"
    assert url.startswith("https://") and " " not in url
    assert peak.patterns and all(peak.patterns)
    assert peak.tflops, "a row with no figure is no row"
    assert set(peak.tflops) <= set(DTYPES)
    assert all(v > 0 for v in peak.tflops.values())


def test_gpu_names_are_unique() -> None:
    names = [p.gpu for p in PEAKS]
    assert len(names) == len(set(names))


def test_rows_are_read_only() -> None:
    with pytest.raises(TypeError):
        PEAKS[0].tflops["fp16"] = 1.0  # type: ignore[index]


def test_a_row_with_a_bad_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="dtype keys"):
        Peak("X", ("X",), {"float16": 1.0}, "X datasheet, https://example.com")
    with pytest.raises(ValueError, match="dtype keys"):
        Peak("X", ("X",), {"fp16": 0.0}, "X datasheet, https://example.com")


# ---------------------------------------------------------------------------------------
# (b) figures against the datasheets (sparse printed figures halved where noted)

DATASHEET = [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),  # 1,979 with sparsity
    ("NVIDIA H100 80GB HBM3", "fp8", 1979.0),  # 3,958 with sparsity
    ("NVIDIA H100 80GB HBM3", "fp32", 67.0),
    ("NVIDIA H100 80GB HBM3", "fp64", 67.0),  # FP64 Tensor Core
    ("NVIDIA H100 PCIe", "fp16", 756.5),  # 1,513 with sparsity
    ("NVIDIA H100 NVL", "tf32", 417.5),  # 835 with sparsity
    ("NVIDIA H200", "bf16", 989.5),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-PCIE-40GB", "tf32", 156.0),
    ("NVIDIA A100 80GB PCIe", "fp64", 19.5),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-PCIE-32GB", "fp16", 112.0),
    ("Tesla T4", "fp16", 65.0),
    ("NVIDIA A10", "bf16", 125.0),
    ("NVIDIA A10G", "bf16", 70.0),
    ("NVIDIA L4", "fp8", 242.5),  # 485 with sparsity
    ("NVIDIA L40S", "bf16", 362.05),
    ("NVIDIA RTX A6000", "fp16", 154.8),
    ("NVIDIA GeForce RTX 3090", "fp16", 71.0),  # FP32 accumulate, not 142
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2),  # FP32 accumulate, not 330.3
]


@pytest.mark.parametrize(("name", "dtype", "tflops"), DATASHEET)
def test_figure_matches_the_datasheet(name: str, dtype: str, tflops: float) -> None:
    assert peak_tflops(name, dtype) == pytest.approx(tflops)


def near(ratio: float, target: float) -> bool:
    return abs(ratio / target - 1) <= 0.03


@pytest.mark.parametrize("peak", PEAKS, ids=lambda p: p.gpu)
def test_no_sparse_figure_beside_dense_ones(peak: Peak) -> None:
    """On every architecture here a Tensor Core step tf32 -> fp16 -> fp8 doubles the dense
    rate, and bf16 runs at the fp16 rate. A figure entered "with sparsity" breaks the ratio."""
    t = peak.tflops
    if "fp16" in t and "bf16" in t:
        assert t["bf16"] == t["fp16"]
    if "tf32" in t:
        assert "fp16" in t and near(t["fp16"] / t["tf32"], 2), "fp16 / tf32 is not 2"
        assert t["fp32"] <= t["tf32"], "the Tensor Core path is never slower than CUDA cores"
    if "fp8" in t:
        assert near(t["fp8"] / t["fp16"], 2), "fp8 / fp16 is not 2"
    present = [t[k] for k in ("tf32", "fp16", "fp8") if k in t]
    assert present == sorted(present)


def test_dtypes_follow_the_architecture() -> None:
    """No BF16 or TF32 before Ampere, no FP8 before Ada and Hopper."""
    for name in ("Tesla V100-SXM2-16GB", "Tesla T4", "Quadro RTX 8000"):
        assert peak_tflops(name, "bf16") is None
        assert peak_tflops(name, "tf32") is None
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA A10", "NVIDIA GeForce RTX 3090"):
        assert peak_tflops(name, "fp8") is None
    assert peak_tflops("NVIDIA L4", "fp64") is None  # the datasheet gives none


def test_an_unknown_dtype_is_an_error() -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        peak_tflops("NVIDIA H100 80GB HBM3", "bfloat16")


# ---------------------------------------------------------------------------------------
# (c) device names -> rows

# (device name as torch.cuda.get_device_name / nsys TARGET_INFO_GPU report it, row's gpu)
EXAMPLES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100 (SXM4 and PCIe)"),
    ("NVIDIA A100-SXM4-40GB", "A100 (SXM4 and PCIe)"),
    ("NVIDIA A100-PCIE-40GB", "A100 (SXM4 and PCIe)"),
    ("NVIDIA A100 80GB PCIe", "A100 (SXM4 and PCIe)"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
    ("Tesla T4", "T4"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    ("Quadro RTX 8000", "Quadro RTX 8000"),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
]


@pytest.mark.parametrize(("name", "gpu"), EXAMPLES)
def test_device_name_reaches_its_row(name: str, gpu: str) -> None:
    peak = peak_for(name)
    assert peak is not None and peak.gpu == gpu
    assert peak_for(name.lower()) is peak  # case does not matter


def test_every_row_is_reached_by_a_real_name() -> None:
    """A row no example reaches is dead, or shadowed by an earlier, broader one."""
    reached = {gpu for _, gpu in EXAMPLES}
    assert reached == {p.gpu for p in PEAKS}


UNKNOWN = [
    "",
    "NVIDIA GeForce GTX 1080",
    "AMD Instinct MI300X",
    "NVIDIA GeForce RTX 4090 Laptop GPU",  # AD103, not the desktop AD102
    "NVIDIA GeForce RTX 4090 D",  # fewer SMs
    "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 4060 Laptop GPU",
    "NVIDIA RTX 6000 Ada Generation",  # not the RTX A6000
    "NVIDIA A100-SXM4-40GB MIG 3g.20gb",  # a slice of the GPU
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    "NVIDIA H20",  # not an H200
    "NVIDIA H800",
    "NVIDIA B200",  # no clear dense figure yet
]


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_gpu_has_no_peak(name: str) -> None:
    assert peak_for(name) is None
    assert all(peak_tflops(name, d) is None for d in DTYPES)


# ---------------------------------------------------------------------------------------
# (d) the GPUs of the corpus exports: each known product on its row, the others None

CORPUS_GPUS: dict[str, str | None] = {
    "NVIDIA A100-PCIE-40GB": "A100 (SXM4 and PCIe)",
    "NVIDIA A100-SXM4-40GB": "A100 (SXM4 and PCIe)",
    "NVIDIA A40": "A40",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
    "Quadro RTX 8000": "Quadro RTX 8000",
    "NVIDIA GeForce RTX 2070 SUPER": None,
    "NVIDIA GeForce RTX 3070": None,
    "NVIDIA GeForce RTX 4060": None,
    "NVIDIA GeForce GTX 1070": None,
    "NVIDIA RTX A2000 12GB": None,
    "NVIDIA RTX A5000": None,
    "NVIDIA TITAN RTX": None,
}


@pytest.mark.parametrize(("name", "gpu"), CORPUS_GPUS.items())
def test_corpus_gpu_name(name: str, gpu: str | None) -> None:
    peak = peak_for(name)
    assert (peak.gpu if peak else None) == gpu


def gpu_names(path: Path) -> set[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        try:
            return {row[0] for row in db.execute("SELECT name FROM TARGET_INFO_GPU")}
        except sqlite3.OperationalError:  # an export without the table
            return set()


def test_every_corpus_gpu_is_decided(corpus_dir: Path) -> None:
    """A GPU new to the corpus must be added to CORPUS_GPUS: a row, or None on purpose."""
    found = set().union(*(gpu_names(p) for p in corpus_files()))
    assert found, f"no GPU names in {corpus_dir}"
    assert found <= set(CORPUS_GPUS), sorted(found - set(CORPUS_GPUS))
