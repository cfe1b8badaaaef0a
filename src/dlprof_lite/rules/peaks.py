"""Peak throughput of NVIDIA GPUs: the denominator of MFU, as cited datasheet data.

MFU (model FLOPs utilisation) is the FLOP/s a run achieved divided by the GPU's peak FLOP/s
for the dtype its math ran in. This module is the one place those peaks live: one
:class:`Peak` row per GPU product, each with the datasheet (title and URL) its figures come
from, looked up by the CUDA device name that nsys (``TARGET_INFO_GPU.name``) and
``torch.cuda.get_device_name`` report.

Place in the pipeline: rules (cited data every stage may read); it imports nothing of ours.

What the figures are, in TFLOP/s:

* **Dense, never sparse.** NVIDIA quotes Tensor Core rates "with sparsity" (2:4 structured
  sparsity, which doubles them) and says the dense rate is half. Training and ordinary
  inference run dense GEMMs, so every Tensor Core figure here is dense: the datasheet's dense
  figure where it prints one, else its sparse figure halved. Each row's comment says which.
* ``fp32`` is the CUDA-core (non-Tensor) FP32 rate; FP32 matmuls that run on Tensor Cores
  count as ``tf32``. ``fp64`` is the highest FP64 rate the datasheet gives: the FP64 Tensor
  Core rate where there is one (A100, A30, Hopper), since DGEMM runs there.
* ``tf32``, ``fp16``, ``bf16``, ``fp8`` are Tensor Core rates with FP32 accumulate where the
  datasheet distinguishes accumulators. GeForce cards run FP16/BF16 with FP32 accumulate at
  half their FP16-accumulate rate; training accumulates in FP32, so that is the rate given.
* A dtype a row does not name has no figure: the GPU lacks it (no BF16 or TF32 before
  Ampere, no FP8 before Ada/Hopper) or its datasheet gives none (e.g. FP64 on most PCIe cards).

An unknown GPU, a dtype a row does not name, or a MIG slice (a fraction of a GPU whose share
of the peak its name does not state) gives no peak and so no MFU: a guessed peak would print
a wrong percentage that looks right. Rows are matched in order, first match wins
(``re.search``, case-insensitive), so a specific row (H100 NVL) comes before a general one
(H100 SXM). Every row has a test on the device names it must and must not match
(tests/test_peaks.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class Peak:
    """One GPU product: dense peak TFLOP/s by dtype, from the datasheet named in ``source``.

    ``patterns`` are regexes searched (case-insensitive) in the CUDA device name; ``tflops``
    maps a key of :data:`DTYPES` to TFLOP/s; ``source`` is ``"<datasheet title>, <URL>"``.
    """

    gpu: str
    patterns: tuple[str, ...]
    tflops: Mapping[str, float]
    source: str

    def __post_init__(self) -> None:
        bad = [k for k, v in self.tflops.items() if k not in DTYPES or not v > 0]
        if bad:
            raise ValueError(f"{self.gpu}: dtype keys must be in {DTYPES} with a positive value")


def _dense(**tflops: float) -> Mapping[str, float]:
    """A read-only dtype -> TFLOP/s map (the keys are checked by :class:`Peak`)."""
    return MappingProxyType({k: float(v) for k, v in tflops.items()})


_H100 = (
    "NVIDIA H100 Tensor Core GPU datasheet, "
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
)
_H100_PAGE = (
    "NVIDIA H100 Tensor Core GPU, product page specifications (H100 NVL), "
    "https://www.nvidia.com/en-us/data-center/h100/"
)
_H200_PAGE = (
    "NVIDIA H200 Tensor Core GPU, product page specifications, "
    "https://www.nvidia.com/en-us/data-center/h200/"
)
_GA102 = (
    "NVIDIA Ampere GA102 GPU Architecture whitepaper V2.0, "
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
_V100 = (
    "NVIDIA V100 Tensor Core GPU datasheet, "
    "https://images.nvidia.com/content/technologies/volta/pdf/"
    "volta-v100-datasheet-update-us-1165301-r5.pdf"
)

PEAKS: tuple[Peak, ...] = (
    # ---- Hopper: NVL and PCIe before SXM, whose "HBM3" the others do not carry ----
    # Tensor Core rows are printed with sparsity: TF32 835, FP16/BF16 1,671, FP8 3,341 halved.
    Peak(
        "H100 NVL",
        (r"\bH100\b.*\bNVL\b",),
        _dense(fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5),
        _H100_PAGE,
    ),
    # Sparse TF32 756, FP16/BF16 1,513, FP8 3,026 halved.
    Peak(
        "H100 PCIe",
        (r"\bH100\b.*\bPCIe\b",),
        _dense(fp64=51, fp32=51, tf32=378, fp16=756.5, bf16=756.5, fp8=1513),
        _H100,
    ),
    # torch/nsys call the SXM5 part "NVIDIA H100 80GB HBM3". Sparse TF32 989, FP16/BF16
    # 1,979, FP8 3,958 halved (the whitepaper's dense 989.4 is the same rate, unrounded).
    Peak(
        "H100 SXM5",
        (r"\bH100\b.*\b(?:SXM\d?|HBM3)\b",),
        _dense(fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979),
        _H100,
    ),
    # Grace Hopper: an H100 with the SXM5 rates. Sparse TF32 989, FP16/BF16 1,979, FP8 3,958
    # halved. Before H200: neither pattern may match the other's name.
    Peak(
        "GH200",
        (r"\bGH200\b",),
        _dense(fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979),
        "NVIDIA GH200 Grace Hopper Superchip datasheet, https://nvdam.widen.net/content/"
        "tf2prbffgy/original/grace-hopper-superchip-datasheet-nvidia-2705455.pdf",
    ),
    # Sparse TF32 835, FP16/BF16 1,671, FP8 3,341 halved.
    Peak(
        "H200 NVL",
        (r"\bH200\b.*\bNVL\b",),
        _dense(fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5),
        _H200_PAGE,
    ),
    # "NVIDIA H200" is the SXM part. Sparse TF32 989, FP16/BF16 1,979, FP8 3,958 halved.
    Peak(
        "H200 SXM",
        (r"\bH200\b",),
        _dense(fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979),
        _H200_PAGE,
    ),
    # ---- Ampere data center: "A100" must not match "A10", nor "A10" "A100" or "A10G" ----
    # SXM4 and PCIe, 40 and 80 GB, share every figure. The datasheet prints dense and sparse
    # (TF32 156 | 312*): dense taken, nothing halved.
    Peak(
        "A100 (SXM4 and PCIe)",
        (r"\bA100\b",),
        _dense(fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312),
        "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/"
        "Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    ),
    # AWS's part: faster CUDA cores, half the A10's Tensor Core rate. Dense printed, nothing
    # halved (FP16/BF16 70 | 140*).
    Peak(
        "A10G",
        (r"\bA10G\b",),
        _dense(fp32=35, tf32=35, fp16=70, bf16=70),
        "NVIDIA A10G Tensor Core GPU datasheet (AWS), https://d1.awsstatic.com/"
        "product-marketing/ec2/NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf",
    ),
    # Dense printed, nothing halved (TF32 62.5 | 125*, FP16/BF16 125 | 250*).
    Peak(
        "A10",
        (r"\bA10\b",),
        _dense(fp32=31.2, tf32=62.5, fp16=125, bf16=125),
        "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/"
        "Solutions/Data-Center/a10/pdf/a10-datasheet.pdf",
    ),
    # Dense printed, nothing halved (TF32 82 | 165*, FP16/BF16 165 | 330*).
    Peak(
        "A30",
        (r"\bA30\b",),
        _dense(fp64=10.3, fp32=10.3, tf32=82, fp16=165, bf16=165),
        "NVIDIA A30 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/"
        "Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf",
    ),
    # Dense printed, nothing halved (TF32 74.8 | 149.6*, BF16 with FP32 accumulate 149.7 |
    # 299.4*, FP16 with FP16 accumulate 149.7 | 299.4*). FP16 with FP32 accumulate is not
    # printed; it is the BF16 rate, as on every non-GeForce Ampere part (A6000 row below).
    Peak(
        "A40",
        (r"\bA40\b",),
        _dense(fp32=37.4, tf32=74.8, fp16=149.7, bf16=149.7),
        "NVIDIA A40 datasheet, "
        "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf",
    ),
    # ---- Ada data center: "L40S" before "L40"; "L4" matches neither ----
    # Dense printed, nothing halved (TF32 183 | 366*, FP16/BF16 362.05 | 733*, FP8 733 | 1,466*).
    Peak(
        "L40S",
        (r"\bL40S\b",),
        _dense(fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733),
        "NVIDIA L40S GPU datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413",
    ),
    # Dense printed, nothing halved (TF32 90.5 | 181*, FP16/BF16 181.05 | 362.1*, FP8 362 | 724*).
    Peak(
        "L40",
        (r"\bL40\b",),
        _dense(fp32=90.5, tf32=90.5, fp16=181.05, bf16=181.05, fp8=362),
        "NVIDIA L40 GPU datasheet, https://resources.nvidia.com/en-us-l40/l40-datasheet",
    ),
    # Only sparse printed: TF32 120, FP16/BF16 242, FP8 485 halved.
    Peak(
        "L4",
        (r"\bL4\b",),
        _dense(fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5),
        "NVIDIA L4 Tensor Core GPU datasheet, https://resources.nvidia.com/en-us-l4/l4-datasheet",
    ),
    # ---- Volta and Turing: no sparsity, nothing halved; FP16 is FP16 x FP16 + FP32 ----
    # "V100S" before "V100": the V100 patterns need "V100" followed by a non-letter anyway.
    Peak(
        "V100S PCIe",
        (r"\bV100S\b.*\bPCIe\b",),
        _dense(fp64=8.2, fp32=16.4, fp16=130),
        _V100,
    ),
    Peak("V100 SXM2", (r"\bV100\b.*\bSXM2\b",), _dense(fp64=7.8, fp32=15.7, fp16=125), _V100),
    Peak("V100 PCIe", (r"\bV100\b.*\bPCIe\b",), _dense(fp64=7, fp32=14, fp16=112), _V100),
    # "Mixed precision (FP16/FP32) 65 TFLOPS".
    Peak(
        "T4",
        (r"\bT4\b",),
        _dense(fp32=8.1, fp16=65),
        "NVIDIA T4 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/"
        "Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
    ),
    # "Deep learning 130.5 Tensor TFLOPS" (FP16 multiply, FP16 or FP32 accumulate).
    Peak(
        "Quadro RTX 8000",
        (r"\bRTX 8000\b",),
        _dense(fp32=16.3, fp16=130.5),
        "NVIDIA Quadro RTX 8000 datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
        "design-visualization/quadro-product-literature/"
        "quadro-rtx-8000-us-nvidia-946977-r1-web.pdf",
    ),
    # ---- Workstation and GeForce: the whitepapers' tables print dense | sparse ----
    # Appendix C: FP16/BF16 with FP32 accumulate 154.8 | 309.7*, TF32 77.4 | 154.8*; nothing
    # halved (the datasheet's "Tensor performance 309.7" is the sparse rate).
    Peak(
        "RTX A6000",
        (r"\bRTX A6000\b(?!.*\bAda\b)",),
        _dense(fp32=38.7, tf32=77.4, fp16=154.8, bf16=154.8),
        _GA102,
    ),
    # Appendix A, GeForce: FP16/BF16 with FP32 accumulate 71 | 142* (FP16 accumulate would be
    # 142), TF32 35.6 | 71*; nothing halved. Not the 3090 Ti or a laptop part.
    Peak(
        "GeForce RTX 3090",
        (r"\bRTX 3090\b(?!\s*Ti\b)(?!.*\b(?:Laptop|Mobile)\b)",),
        _dense(fp32=35.6, tf32=35.6, fp16=71, bf16=71),
        _GA102,
    ),
    # Appendix A, GeForce: FP16/BF16 with FP32 accumulate 165.2 | 330.4*, FP8 with FP32
    # accumulate 330.3 | 660.6*, TF32 82.6 | 165.2*; nothing halved. Not the 4090 D (fewer SMs)
    # or the laptop part (a different chip).
    Peak(
        "GeForce RTX 4090",
        (r"\bRTX 4090\b(?!\s*(?:D|Ti)\b)(?!.*\b(?:Laptop|Mobile)\b)",),
        _dense(fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3),
        "NVIDIA Ada GPU Architecture whitepaper, "
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    ),
)

# A MIG instance ("NVIDIA A100-SXM4-40GB MIG 3g.20gb") has a share of the GPU's SMs that its
# name does not give exactly: no peak rather than the whole GPU's.
_MIG = re.compile(r"\bMIG\b", re.IGNORECASE)


@cache
def _compiled() -> tuple[tuple[Peak, tuple[re.Pattern[str], ...]], ...]:
    return tuple((p, tuple(re.compile(x, re.IGNORECASE) for x in p.patterns)) for p in PEAKS)


def peak_for(device_name: str) -> Peak | None:
    """The first row whose pattern matches the CUDA device name; ``None`` for an unknown GPU."""
    if _MIG.search(device_name):
        return None
    for peak, patterns in _compiled():
        if any(p.search(device_name) for p in patterns):
            return peak
    return None


def peak_tflops(device_name: str, dtype: str) -> float | None:
    """Dense peak TFLOP/s of the GPU for ``dtype``; ``None`` for an unknown GPU or a dtype its
    row does not name; ``ValueError`` for a dtype not in :data:`DTYPES`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    peak = peak_for(device_name)
    return None if peak is None else peak.tflops.get(dtype)
