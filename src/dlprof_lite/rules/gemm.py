"""GEMM and convolution rules: which module types could use Tensor Cores, and which kernel
names are FP32 GEMMs or convolutions running on CUDA cores.

Place in the pipeline: cited classification data next to the Tensor Core rule table
(:mod:`dlprof_lite.rules.tensor_cores`); the layers table marks TC-eligible modules with
:func:`is_tc_eligible`, and the summary sums the GPU time of FP32 GEMM/conv kernels with
:func:`is_fp32_gemm` to advise mixed precision (or TF32) from kernel names alone, when a
profile has no layer ranges to say which modules ran them.

:data:`FP32_GEMM_RULES` applies to kernels the Tensor Core table did not classify ``tc``;
the first rule whose regex matches (``re.search``) wins. The names follow BLAS and library
conventions, not lists: ``s`` = single-precision real, ``c`` = single-precision complex
(``sgemm``, ``cgemm``, cuDNN ``scudnn``), xmma ``f32f32_f32f32`` with ``ffma`` math, and
cuBLAS/cuDNN templates whose first data type is ``float``. Every rule has a test on real
names (tests/test_gemm_rules.py, from ../shared/tc_kernels.tsv and the corpus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# Module types (and emit_nvtx op names) whose math is a GEMM or a convolution, so that it
# can run on Tensor Cores: NVIDIA Deep Learning Performance Guide, "Linear/Fully-Connected
# Layers", "Convolutional Layers", "Recurrent Layers" and "Matrix Multiplication Background"
# (batched GEMMs of attention) user's guides, docs.nvidia.com/deeplearning/performance.
TC_ELIGIBLE_TYPES: dict[str, re.Pattern[str]] = {
    # Conv1d/2d/3d, ConvTranspose2d, LazyConv2d, HF Conv1D, aten::conv2d, aten::_convolution
    "conv": re.compile(r"conv(?!ert)", re.IGNORECASE),
    # Linear, LazyLinear, NonDynamicallyQuantizableLinear, RowParallelLinear, aten::linear;
    # not UpsamplingBilinear2d or aten::upsample_linear1d (interpolation, no GEMM)
    "linear": re.compile(r"Linear|(?:^|::|\.)linear$"),
    # aten::mm, bmm, addmm, baddbmm, addbmm, matmul, einsum
    "matmul": re.compile(r"matmul|einsum|(?:^|::|\.|_)(?:add|badd)?b?mm$", re.IGNORECASE),
    # MultiheadAttention, LlamaAttention, *Attn, aten::scaled_dot_product_attention
    "attention": re.compile(r"attention|attn", re.IGNORECASE),
    # RNN, LSTM, GRU and their cells, aten::lstm, aten::_cudnn_rnn
    "rnn": re.compile(r"rnn|lstm|gru", re.IGNORECASE),
}


def tc_eligible_family(type_name: str) -> str | None:
    """The :data:`TC_ELIGIBLE_TYPES` family a module type or op name belongs to, if any."""
    for family, pattern in TC_ELIGIBLE_TYPES.items():
        if pattern.search(type_name):
            return family
    return None


def is_tc_eligible(type_name: str) -> bool:
    """True for a conv, linear, matmul/bmm, attention or RNN module type (or op name)."""
    return tc_eligible_family(type_name) is not None


@dataclass(frozen=True)
class Fp32Rule:
    """One row: ``pattern`` searched in the kernel name; ``fp32``: the verdict on a match."""

    id: str
    pattern: str
    fp32: bool
    evidence: str


# Template arguments of cuBLAS/cuDNN kernels: the first data type follows the name and "<",
# after cuBLAS's index types (gemv2T_kernel_val<int, int, float, ...>); float2 is
# single-precision complex. Mangled names (no demangled name in the export) spell the same
# as "I", index types "i", then "f" or "6float2" (Itanium C++ ABI: f = float, i = int).
_FLOAT_FIRST = r"(?:<(?:int, )*float2?\b|Ii*(?:f|6float2))"

FP32_GEMM_RULES: tuple[Fp32Rule, ...] = (
    Fp32Rule(
        "lower_precision_word",
        r"(?<![A-Za-z0-9])(?:fp16|b?f16|half|int8|i8|fp8|e4m3|e5m2)(?![0-9])|Half|BFloat16"
        r"|__nv_bfloat16|__half",
        False,
        "a 16-bit, 8-bit or integer type in the name: volta_fp16_scudnn_fp16_*, "
        "volta_sgemm_int8_* (not FP32 math, whatever the family prefix says)",
    ),
    Fp32Rule(
        "blas_sgemm",
        r"(?<![A-Za-z0-9])sgemm(?![a-z])",
        True,
        "BLAS precision prefix s = single-precision real: cuBLAS volta_/ampere_sgemm_*, "
        "sgemm_largek_lds64, CUTLASS *_simt_sgemm_*, cuDNN implicit/explicit_convolve_sgemm",
    ),
    Fp32Rule(
        "blas_cgemm",
        r"(?<![A-Za-z0-9])g?cgemm(?![a-z])",
        True,
        "BLAS c = single-precision complex: cuBLAS cgemm and gcgemm, the GEMM of cuDNN's FFT "
        "convolutions (volta_gcgemm_32x32_nt next to fft2d_r2c_32x32<float> in the corpus)",
    ),
    Fp32Rule(
        "cudnn_scudnn",
        r"(?<![A-Za-z0-9])scudnn(?![a-z])",
        True,
        "cuDNN s = single precision (half variants read fp16_scudnn_fp16): volta_scudnn_*, "
        "trt_maxwell_scudnn_winograd_*, cudnn_infer_ampere_scudnn_* (PyProf conv.py)",
    ),
    Fp32Rule(
        "cutlass_simt_sconv",
        r"simt_s(?:fprop|dgrad|wgrad)",
        True,
        "CUTLASS procedural names: op class simt, element s (float), conv kind fprop/dgrad/"
        "wgrad (cutlass_simt_sfprop_optimized_*; CUTLASS media/docs/profiler.md)",
    ),
    Fp32Rule(
        "xmma_f32_ffma",
        r"xmma_\w*?f32f32_(?:f32f32_|\w*?_ffma(?![a-z]))",
        True,
        "xmma names spell <A><B>_<math><acc>: f32f32_f32f32, or f32 inputs with ffma math, "
        "is an FP32 GEMM or conv on CUDA cores (sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_*_ffma_*)",
    ),
    Fp32Rule(
        "float_template",
        r"(?:gemv\w*|gemmSN\w*|gemmk1\w*|gemvx::kernel|wgrad_alg\d\w*|dgrad\w*engine\w*"
        r"|winograd\w*|fft2d_[rc]2[rc]\w*)" + _FLOAT_FIRST,
        True,
        "cuBLAS gemv/gemmSN/gemmk1 and cuDNN legacy conv engines (wgrad_alg0_engine, "
        "winogradForward*, fft2d_r2c) instantiated for float or float2 (the first data "
        "type), demangled or mangled",
    ),
)

_COMPILED = tuple((rule, re.compile(rule.pattern)) for rule in FP32_GEMM_RULES)


@lru_cache(maxsize=65536)
def fp32_gemm_rule(name: str) -> str | None:
    """Id of the rule that classifies ``name`` (None: no rule matched: not FP32 GEMM)."""
    for rule, regex in _COMPILED:
        if regex.search(name):
            return rule.id
    return None


def is_fp32_gemm(name: str) -> bool:
    """True for an FP32 GEMM or convolution kernel name (apply to non-Tensor-Core kernels)."""
    rule = fp32_gemm_rule(name)
    return rule is not None and next(r.fp32 for r in FP32_GEMM_RULES if r.id == rule)
