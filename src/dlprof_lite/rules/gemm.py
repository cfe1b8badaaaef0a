"""GEMM and convolution rules: which module types could use Tensor Cores, and which kernel
names are FP32 GEMMs or convolutions running on CUDA cores.

Place in the pipeline: cited classification data next to the Tensor Core rule table
(:mod:`dlprof_lite.rules.tensor_cores`); the layers table marks TC-eligible modules with
:func:`is_tc_eligible`, and the summary sums the GPU time of FP32 GEMM/conv kernels with
:func:`is_fp32_gemm` to advise mixed precision (or TF32) from kernel names alone, when a
profile has no layer ranges to say which modules ran them; :func:`is_matmul_kernel` tells a
layer's GEMM and convolution kernels from the layout, cast and copy kernels around them.

The layers table (:mod:`dlprof_lite.report.layers.kernels`) infers Tensor Core use where
the name table says ``unknown``: :func:`unknown_is_matmul` (names that still say GEMM),
:func:`mma_input_type` and :func:`mma_capable` (which dtypes a GPU's Tensor Cores take).

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


# Kernels that do a GEMM's or a convolution's multiply-adds, in any precision: what Tensor
# Cores could run. Not the work around them in a conv or linear module (cuDNN's NCHW<->NHWC
# layout kernels, autocast's casts, bias, concatenation, split-K reduction, dropout), which
# no precision change moves onto Tensor Cores: counting those made the mixed-precision
# advice fire on BF16 runs (the GPU check on an H200: 18 % of a BF16 ResNet-18's kernel time
# in nchwToNhwcKernel/nhwcToNchwKernel inside its convolutions). The families are those of
# FP32_GEMM_RULES without their precision: BLAS ?gemm/?gemv, cuDNN *scudnn* and its legacy
# engines (implicit/precomputed/explicit_convolve_*, wgrad_alg*, dgrad*engine, winograd*,
# fft2d_*), xmma, CUTLASS and cuBLASLt (nvjet) GEMM/conv names (gemm, fprop, dgrad, wgrad),
# fused attention (fmha, flash, cuDNN's sdpa), and Inductor's tl.dot templates. Matched on
# the function a name calls, not its template arguments (a workspace or reduction kernel
# names the GEMM it serves there). Depthwise convolutions (conv_depthwise2d_*) are left out:
# they run on CUDA cores in every precision, so mixed precision would not move them.
_MATMUL_FAMILY = re.compile(
    r"gemm|gemv|bmm_|nvjet|s\d*cudnn|convolve|winograd|fft2d_[rc]2[rc]"
    r"|s\d*(?:fprop|dgrad|wgrad)|wgrad_alg|dgrad\w*engine"
    r"|fmha|flash_?(?:fwd|bwd|attn|attention)|sdpa|^triton_tem_",
    re.IGNORECASE,
)


# A generic kernel template (CUTLASS's Kernel/Kernel2 and device_kernel, cuBLAS's
# gemvx::kernel) says what it runs in its scope and template arguments:
# cutlass::Kernel2<cutlass_80_simt_sgemm_...> (the layers table shows it so too).
GENERIC_KERNEL = re.compile(r"^(?:Kernel2?|device_kernel|kernel)$")
_SOURCE_NAME = re.compile(r"(\d+)")
# A demangled name's return type: void, or SFINAE's std::enable_if<...>::type (cuBLAS gemvx)
_RETURN_TYPE = re.compile(r"^(?:void\s+|std::enable_if<.*?>::type\s+)")


def _mangled_head(name: str) -> str:
    """The last source name of a mangled (Itanium C++ ABI) function name's nested name:
    ``_ZN4vllm30reshape_and_cache_flash_kernelIt...`` is ``reshape_and_cache_flash_kernel``;
    for a generic template, the whole name (its arguments say what it runs)."""
    rest = name[3:] if name.startswith("_ZN") else name[2:]
    head = ""
    while (size := _SOURCE_NAME.match(rest)) is not None:
        head = rest[size.end():size.end() + int(size[1])]
        rest = rest[size.end() + int(size[1]):]
    return name if not head or GENERIC_KERNEL.match(head) else head


def _kernel_head(name: str) -> str:
    """The function a kernel name calls, without return type, scope, template arguments or
    parameters; a generic template's whole name (its arguments say what it runs)."""
    if name.startswith("_Z"):
        return _mangled_head(name)
    text = _RETURN_TYPE.sub("", name.strip())
    cut = min((i for i in (text.find("<"), text.find("(")) if i > 0), default=len(text))
    head = text[:cut].rsplit("::", 1)[-1]
    return text if GENERIC_KERNEL.match(head) else head


@lru_cache(maxsize=65536)
def is_matmul_kernel(name: str) -> bool:
    """True for a GEMM or convolution kernel name, whatever its precision or Tensor Core use:
    the family words in the function it calls (not in template arguments, where a workspace
    or reduction kernel names the GEMM it serves: init_device_workspace_kernel<...gemm...>)."""
    return _MATMUL_FAMILY.search(_kernel_head(name)) is not None


# ---- Tensor Core use from a layer's compute dtype, where kernel names cannot tell ----
# The first compute capability whose MMA instructions take each input type: PTX ISA,
# "Warp-level matrix multiply-accumulate instructions" (mma.sync target requirements):
# .f16 from sm_70, .bf16 and .tf32 from sm_80, .e4m3/.e5m2 from sm_89; wgmma and tcgen05
# (sm_90, sm_100) take the same types. Keys: the MMA input types the layers table infers.
MMA_MIN_CC: dict[str, tuple[int, int]] = {
    "fp16": (7, 0),
    "bf16": (8, 0),
    "tf32": (8, 0),
    "fp8": (8, 9),
}

# PyTorch dtype names (``str(torch.float16)`` without ``torch.``) -> MMA input type.
_TORCH_MMA_TYPES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
}


def mma_input_type(dtype: str | None, tf32: bool) -> str | None:
    """The MMA input type a matmul in ``dtype`` runs in on Tensor Cores, if it can: FP16,
    BF16 and FP8 as they are; float32 only as TF32, when ``tf32`` says PyTorch lets float32
    matmuls use it (``torch.backends.cuda.matmul.allow_tf32``); else None (FP64, integers)."""
    if dtype is None:
        return None
    if dtype == "float32":
        return "tf32" if tf32 else None
    return _TORCH_MMA_TYPES.get(dtype)


def mma_capable(mma_type: str, cc: tuple[int, int]) -> bool:
    """True when a GPU of compute capability ``cc`` has Tensor Core MMA for ``mma_type``."""
    need = MMA_MIN_CC.get(mma_type)
    return need is not None and cc >= need


# Names the Tensor Core table leaves ``unknown`` that still say "matmul": Inductor names its
# kernels ``triton_<category[:3]>_`` (torch/_inductor/codegen/triton.py, categories from
# wrapper_benchmark.py), and its ``template`` kernels (``triton_tem_``) are the mm/bmm/addmm,
# convolution and flex-attention templates, all built on ``tl.dot``; the gemm_like_unmarked
# rule's GEMM/conv/attention words and a bare CUTLASS kernel say the same. Whether such a
# kernel used Tensor Cores is then a question of its dtype, whatever module launched it.
_MATMUL_TEMPLATE = re.compile(r"^(?:void\s+)?triton_tem_")
MATMUL_NAMED_RULES = frozenset({"gemm_like_unmarked", "cutlass_opaque"})


def unknown_is_matmul(name: str, rule: str) -> bool:
    """True for a kernel the table calls ``unknown`` (``rule``) whose name says it is a
    GEMM, convolution or attention kernel."""
    return rule in MATMUL_NAMED_RULES or _MATMUL_TEMPLATE.search(name) is not None
