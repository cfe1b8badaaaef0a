"""The Tensor Core rule table: cited data that says, from a kernel's name alone, whether it
runs on Tensor Cores (``tc``), on CUDA cores (``no_tc``), or cannot be told (``unknown``).

Place in the pipeline: rules (cited data every stage may read). The ingest step
:mod:`dlprof_lite.ingest.tensorcore` applies this table to
the distinct kernel names of a profile and adds ``tc_class`` / ``uses_tensor_cores`` /
``tc_rule`` to ``kernels``; report reads those columns for the TC share and the advice.

The rules are written from naming conventions, not from lists of names:

* instruction shapes that only MMA instructions have (cuBLAS/cuDNN ``s884``/``h1688``/
  ``s16816``/``i16832``/``s1684tf32``; xmma ``tensor16x8x16``; PTX ``m16n8k16``);
* instruction and op-class words (``hmma``/``imma``/``wmma``, ``gmma``/``wgmma``/
  ``warpgroup``, ``tcgen05``/``UMMA``, CUTLASS ``tensorop`` vs ``simt``, ``ffma``);
* library families whose kernels are MMA by construction (cuBLASLt ``nvjet``, FlashAttention,
  FMHA, cuDNN SDPA, Marlin, DeepGEMM, FlashInfer prefill, AWQ), and the SIMT families that
  look similar (``sgemm``/``hgemm``/``dgemm``, ``scudnn``, cuBLAS gemv/split-K helpers);
* names that cannot tell (Triton, XLA fusions, a CUTLASS kernel without template arguments).

Order matters: the first rule whose regex matches (``re.search``) wins. The negative rules
that name a CUDA-core instruction or op class come first, because their names also carry
GEMM words; the weak rules (``gemm_like_unmarked``, ``no_mma_word``) come last.
Every rule has a test on a real kernel name (tests/test_tensorcore.py); a rule that no
longer wins for its example (dead or shadowed) fails that test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["tc", "no_tc", "unknown"]
VERDICTS: tuple[Verdict, ...] = ("tc", "no_tc", "unknown")


@dataclass(frozen=True)
class TcRule:
    """One row of the table: ``pattern`` is searched in the kernel name."""

    id: str
    pattern: str
    verdict: Verdict
    archs: tuple[str, ...]
    evidence: str


ANY = ("any",)
TC_ARCHS = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")

# Element types as xmma names spell them, and the subset an MMA instruction takes as input.
_TYPE = r"(?:bf16|f16|tf32|f32|f64|e4m3|e5m2|e2m1|e3m2|e2m3|int8|i8|u8|s8|i4|u4|i32|s32)"
_MMA_IN = r"(?:bf16|f16|tf32|e4m3|e5m2|e2m1|e3m2|e2m3|int8|i8|u8|s8|i4|u4)"
_ACC = r"(?:bf16|f16|f32|i32|s32)"

# MMA instruction shapes (m n k run together) as cuBLAS, cuDNN, CUTLASS 2 and TensorRT
# print them after the math-type letter: 884 (Volta HMMA, Ampere DMMA), 1688/1684/8816/8832
# (Turing, TF32), 16816/16832/16864 (Ampere+), 161616 etc. (WMMA fragments).
_MMA_SHAPE = r"(?:884|1684|1688|8816|8832|16816|16832|16864|161616|32816|83216)"

# The identifier part of a name: no template arguments, no parameter list.
_HEAD = r"^(?:void\s+)?(?:\(anonymous namespace\)::|<unnamed>::|[\w:.$-])*?"

RULES: tuple[TcRule, ...] = (
    # ---- CUDA-core markers that must win over the GEMM words in the same name ----
    TcRule(
        "pre_volta_arch",
        r"^(?:void\s+)?(?:trt_)?(?:fermi|kepler|maxwell|pascal|sm_?[1-6]\d)(?:_|[A-Z])",
        "no_tc",
        ("fermi", "kepler", "maxwell", "pascal"),
        "cuBLAS/cuDNN/TensorRT prefix a kernel with the family it was built for; Tensor "
        "Cores start with Volta (sm_70), so maxwell_/pascal_/sm6x_ kernels use CUDA cores",
    ),
    TcRule(
        "fma_instruction",
        r"(?<![A-Za-z0-9])(?:ffma|hfma2?|dfma)(?![a-z])",
        "no_tc",
        ANY,
        "xmma names carry the math instruction: '_ffma_' is FP32 FMA on CUDA cores "
        "(sm80_xmma_gemm_f32f32_..._ffma; SCHEMA_NOTES: substring rules misfire on it)",
    ),
    TcRule(
        "cutlass_simt_name",
        r"(?<![A-Za-z])simt(?![a-z])",
        "no_tc",
        ANY,
        "CUTLASS media/docs/profiler.md: op class 'simt' = CUDA cores, 'tensorop' = "
        "Tensor Cores (cutlass_80_simt_sgemm, cutlass3x_sm100_simt_sgemm)",
    ),
    TcRule(
        "cutlass_simt_template",
        r"MmaSimt|OpClassSimt|UniversalFMA",
        "no_tc",
        ANY,
        "CUTLASS 2 warp::MmaSimt / arch::OpClassSimt and CuTe UniversalFMA are the "
        "CUDA-core GEMM building blocks (demangled or mangled template arguments)",
    ),
    TcRule(
        "flash_attn_no_mma",
        r"flash_bwd_(?:dot_do_o|convert_d|clear_d)|flash_fwd_splitkv_combine"
        r"|FlashAttn(?:BwdPreprocess|BwdPostprocess|FwdCombine)"
        r"|flash_attn_(?:ext_)?(?:vec|tile)(?![a-z])|flash_attn_(?:combine|stream_k_fixup)",
        "no_tc",
        ANY,
        "FlashAttention pre/post-processing (rowsum(dO*O), dQ convert, split-KV combine; "
        "flash_bwd_launch_template.h) and llama.cpp's vec/tile kernels, its path for GPUs "
        "without fp16 MMA (ggml-cuda fattn-vec/fattn-tile): no MMA instructions",
    ),
    TcRule(
        "fmha_simt_variant",
        r"fmha_cutlass[FB]_\w*?_sm[56]\d(?!\d)|fmha_cutlass[FB]_f32_\w*?_sm7\d(?!\d)"
        r"|Attention(?:Backward)?Kernel<(?:float, cutlass::arch::Sm[5-7]\d|[\w:]+, "
        r"cutlass::arch::Sm[56]\d)",
        "no_tc",
        ANY,
        "xFormers/PyTorch mem-efficient attention: DefaultGemmType falls back to OpClassSimt "
        "below sm75 and for f32 below sm80 (gemm_kernel_utils.h); the suffix names the arch",
    ),
    # ---- Tensor Core instructions and instruction shapes ----
    TcRule(
        "cudnn_sdpa",
        r"cudnn_generated\w*sdpa|native_sdpa",
        "tc",
        ("ampere", "ada", "hopper", "blackwell"),
        "cuDNN runtime-generated scaled-dot-product attention (fp16/bf16/fp8 only): "
        "..._sdpa_sm90_flash_bprop_wgmma_..., ..._sdpa_sm100_flash_fprop (tcgen05)",
    ),
    TcRule(
        "blackwell_tcgen05",
        r"tcgen05|(?<![A-Z])UMMA|Umma|SM1[0-2]\d[a-z]?_MMA",
        "tc",
        ("blackwell",),
        "Blackwell 5th-gen Tensor Core instructions: PTX tcgen05.mma, CuTe cute::UMMA / "
        "SM100_MMA_* atoms, CUTLASS MainloopSm100TmaUmmaWarpSpecialized",
    ),
    TcRule(
        "hopper_gmma",
        r"(?i:gmma)",
        "tc",
        ("hopper", "blackwell"),
        "Hopper warpgroup MMA: wgmma / HGMMA / IGMMA / QGMMA in cuBLAS xmma names "
        "(hgmma64x128x16), CUTLASS 3 MainloopSm90TmaGmma..., cuDNN ..._wgmma_...",
    ),
    TcRule(
        "xmma_warpgroup",
        r"warpgroup",
        "tc",
        ("hopper", "blackwell"),
        "sm90 xmma kernels are tiled per warpgroup ('warpgroupsize1x1x1') because they issue "
        "wgmma; MODS maps sm90_xmma_gemm_f16* to Instr::HGMMA",
    ),
    TcRule(
        "xmma_tensor_shape",
        r"(?<![A-Za-z])(?:sp)?tensor\d+x\d+x\d+",
        "tc",
        TC_ARCHS,
        "xmma names end with the MMA instruction shape: tensor16x8x16 = HMMA.16816, "
        "tensor16x8x8 = TF32 HMMA.1688, sptensor16x8x32 = sparse MMA (MODS cask map)",
    ),
    TcRule(
        "cublas_mma_shape",
        rf"(?<![A-Za-z0-9])[a-z]{{1,2}}{_MMA_SHAPE}(?=[a-z_]|$)",
        "tc",
        TC_ARCHS,
        "cuBLAS/cuDNN/CUTLASS 2 print math type + MMA shape: volta_s884gemm, turing_h1688gemm, "
        "s1684tf32gemm, ampere_s16816gemm, i16832gemm, s1688cudnn, wmma s161616gemm",
    ),
    TcRule(
        "ptx_mma_shape",
        r"(?<![A-Za-z0-9])m(?:8n8k4|16n8k(?:4|8|16|32|64|128|256)|16n16k(?:8|16)|32n8k16"
        r"|8n32k16|64n\d{1,3}k(?:8|16|32))(?!\d)",
        "tc",
        TC_ARCHS,
        "PTX mma.sync / wmma / wgmma shapes (m16n8k16, m16n16k16, m64nNk16) exist only as "
        "Tensor Core instructions (PTX ISA 'Warp-level matrix multiply-accumulate')",
    ),
    TcRule(
        "cute_mma_atom",
        r"MMAAtom_ThrID\d+_ShapeMNK\d{4,}|(?<![A-Za-z0-9])SM(?:7[05]|8[069]|90|1[0-2]\d)a?"
        r"_\d+x\d+x\d+_",
        "tc",
        TC_ARCHS,
        "CuTe MMA atoms: SM80_16x8x16_F32F16F16F32_TN, and CuTe DSL names "
        "'TiledMMA_..._MMAAtom_..._ShapeMNK1281288' (a UniversalFMA atom is ShapeMNK111)",
    ),
    TcRule(
        "mma_instruction_word",
        r"(?<![A-Za-z])(?:[hidqbow]?mma|HMMA|IMMA|DMMA|QMMA|WMMA|Wmma)(?![a-z])",
        "tc",
        TC_ARCHS,
        "hmma/imma/dmma = Tensor Core SASS, wmma = CUDA C++ nvcuda::wmma API "
        "(Volta_hmma_implicit_gemm, gemm_wmma, tcnn::kernel_mlp_fused(..nvcuda::wmma..))",
    ),
    TcRule(
        "cutlass_tensorop_name",
        r"(?<![a-z])(?:sp|bs)?tensorop(?![a-z])",
        "tc",
        TC_ARCHS,
        "CUTLASS procedural names: op class 'tensorop' (also wmma_tensorop, sptensorop, "
        "bstensorop) = Tensor Cores (media/docs/profiler.md; cutlass3x_sm90_tensorop_...)",
    ),
    TcRule(
        "cutlass_tensorop_template",
        r"(?:Mma|OpClass)TensorOp|TensorOpMultiplicand",
        "tc",
        TC_ARCHS,
        "CUTLASS 2 template arguments of a Tensor Core GEMM/conv: warp::MmaTensorOp, "
        "arch::OpClassTensorOp, layout::*TensorOpMultiplicand* (demangled or mangled)",
    ),
    TcRule(
        "cublaslt_nvjet",
        r"(?<![A-Za-z0-9])nvjet_",
        "tc",
        ("hopper", "blackwell"),
        "cuBLASLt >= 12.6 'nvjet' GEMMs are wgmma/tcgen05 kernels; ncu on "
        "nvjet_sm90_hss_320x128: tensor pipe 92%, 762 TFLOP/s (tc_kernels.tsv)",
    ),
    TcRule(
        "xmma_mma_dtype",
        rf"xmma\w*?_{_TYPE}{_TYPE}_{_MMA_IN}{_ACC}_",
        "tc",
        TC_ARCHS,
        "xmma names spell <A><B>_<math><acc>_<C>: a math type of f16/bf16/tf32/fp8/int8 is "
        "an MMA input type (f32 math is the FFMA path): sm80_xmma_gemm_bf16bf16_bf16f32_f32",
    ),
    # ---- Library families that are MMA kernels by construction ----
    TcRule(
        "flash_attention",
        r"flash_(?:fwd|bwd|fprop|bprop)|Flash(?:Attn)?(?:Fwd|Bwd)|flash_?attn"
        r"|[Ff]lash_?[Aa]ttention",
        "tc",
        ("ampere", "ada", "hopper", "blackwell"),
        "FlashAttention 2/3/4 main kernels: MMA_Atom<SM80_16x8x16_*> (FA2 kernel_traits.h), "
        "wgmma (FA3 hopper/), tcgen05 (FA4); fp16/bf16/fp8 only",
    ),
    TcRule(
        "fmha",
        r"(?i:fmha)|Attention(?:Backward)?Kernel<[\w:]+, cutlass::arch::Sm",
        "tc",
        TC_ARCHS,
        "fused multi-head attention kernels (TensorRT fmha_v2, TRT-LLM fmhaSm100a, "
        "xFormers/PyTorch fmha_cutlassF/B sm75+ half and sm80 f32) use OpClassTensorOp",
    ),
    TcRule(
        "trtllm_gen_gemm",
        r"^(?:bmm|gemm|Gemm|batchedGemm|BatchedGemm)_\w*_sm1[0-2]\d[a-z]?$",
        "tc",
        ("blackwell",),
        "TensorRT-LLM-gen GEMMs for sm100 (bmm_..._m128x16x32_..._sm100f): generated only "
        "for tcgen05 block-scaled/FP8/BF16 MMA",
    ),
    TcRule(
        "marlin",
        r"(?<![A-Za-z])Marlin<",
        "tc",
        ("ampere", "ada", "hopper", "blackwell"),
        "Marlin mixed-precision GEMM (IST-DASLab, vLLM marlin::Marlin<...>): ldmatrix + "
        "mma.sync m16n8k16 by design",
    ),
    TcRule(
        "deep_gemm",
        r"deep_gemm::sm\d+_\w*gemm",
        "tc",
        ("hopper", "blackwell"),
        "DeepGEMM sm90/sm100 GEMMs (deep_gemm::sm90_fp8_gemm_1d2d_impl): TMA + wgmma/tcgen05",
    ),
    TcRule(
        "flashinfer_prefill",
        r"(?:Batch|Single)PrefillWith\w*Kernel",
        "tc",
        ("ampere", "ada", "hopper", "blackwell"),
        "FlashInfer prefill attention computes QK^T and PV with mma.sync m16n8k16 "
        "(flashinfer include/flashinfer/attention/prefill.cuh)",
    ),
    TcRule(
        "awq_gemm",
        r"gemm_forward_4bit_cuda",
        "tc",
        ("turing", "ampere", "ada", "hopper"),
        "AWQ W4A16 GEMM (llm-awq / vLLM gemm_forward_4bit_cuda_m16nXk32): dequantize in "
        "registers, then ldmatrix + mma.sync",
    ),
    # ---- CUDA-core families whose names carry GEMM words ----
    TcRule(
        "cublas_simt_gemm",
        r"(?<![A-Za-z0-9])(?:[sdhcz]|gc|gz|i)gemm(?![a-z])",
        "no_tc",
        ANY,
        "cuBLAS sgemm/dgemm/hgemm/cgemm/igemm without an MMA shape: FFMA/DFMA/HFMA2/IDP4A "
        "(MODS: ampere_sgemm_* -> FFMA, ampere_hgemm_* -> HFMA2, ampere_dgemm_* -> DFMA)",
    ),
    TcRule(
        "cudnn_simt",
        r"(?<![A-Za-z0-9])[sdhi]cudnn(?![a-z])",
        "no_tc",
        ANY,
        "cuDNN 'scudnn' (and h/d/i) kernels are SIMT implicit GEMM with no MMA shape; PyProf "
        "conv.py lists _scudnn_ apart from _s884cudnn_/_s1688cudnn_",
    ),
    TcRule(
        "cudnn_legacy_conv",
        r"wgrad_alg\d|dgrad_alg\d|dgrad2?d?_engine|reduce_wgrad|im2col|col2im|[Ww]inograd"
        r"|fft\d?d?_[rc]2[rc]|flip_filter|grouped_direct|compute\w*Offsets",
        "no_tc",
        ANY,
        "cuDNN legacy conv algorithms and helpers (wgrad_alg0_engine, winograd, fft2d, "
        "im2col, computeOffsets): FP32 CUDA-core code and index math",
    ),
    TcRule(
        "blas_helper",
        r"gemv|mul_mat_vec|gemmSN|gemmk1|splitKreduce|compute_gemm_pointers|epilogue::impl",
        "no_tc",
        ANY,
        "cuBLAS level-2 and helper kernels (gemv, small-N gemmSN, k=1 gemmk1, split-K "
        "reduce, standalone epilogue) and llama.cpp mul_mat_vec (dp4a GEMV): SIMT",
    ),
    TcRule(
        "aten_native",
        r"^(?:void\s+)?(?:\(anonymous namespace\)::)?(?:at::native::|_ZN2at6native)",
        "no_tc",
        ANY,
        "PyTorch ATen native kernels (elementwise, reduce, norm, softmax, index, conv "
        "depthwise) are CUDA-core code; ATen sends matmul/conv to cuBLAS/cuDNN",
    ),
    TcRule(
        "inductor_pointwise",
        r"^(?:void\s+)?triton_(?:poi|red|per)_",
        "no_tc",
        ANY,
        "TorchInductor pointwise/reduction/persistent-reduction kernels are generated "
        "without tl.dot, so no MMA (matmul templates are triton_tem_)",
    ),
    # ---- Names that cannot tell ----
    TcRule(
        "triton",
        r"^(?:void\s+)?triton_",
        "unknown",
        ANY,
        "other Triton kernels: the name does not say whether it calls tl.dot nor with which "
        "dtypes (MMA, wgmma or FMA)",
    ),
    TcRule(
        "nvfuser_generated",
        r"(?<![A-Za-z0-9])nvfuser_\w+?_f\d+_c\d+_r\d+_g\d+",
        "unknown",
        ANY,
        "nvFuser names each generated kernel nvfuser_<scheduler>_f<fusion>_c<concrete>_r"
        "<runtime>_g<group> (NVIDIA/Fuser KernelExecutor::kernelName, createKernelId): the "
        "code is generated per fusion, and the name says nothing of the instructions it uses",
    ),
    TcRule(
        "xla_fusion",
        r"^(?:[a-z][a-z0-9_]*_)?fusion(?:[._]\d+)*$",
        "unknown",
        ANY,
        "XLA names kernels after the HLO fusion ('fusion_4'); a fusion may hold a Triton "
        "or cuDNN GEMM or only elementwise code",
    ),
    TcRule(
        "cutlass_opaque",
        r"^(?:void\s+)?(?:cutlass\w*::)?(?:device_kernel|Kernel2?)(?:<|\(|$)",
        "unknown",
        ANY,
        "cutlass::Kernel / device_kernel with no op class in its template arguments (or a "
        "bare short name) can be a SIMT or a Tensor Core GEMM",
    ),
    TcRule(
        "gemm_like_unmarked",
        _HEAD + r"(?i:(?<!fb)gemm(?!a)|matmul|mul_mat|(?<![a-z])mma|bmm|conv(?!ert)|fprop"
        r"|dgrad|wgrad|attention|attn|(?<![a-z])att(?![a-z])|mha|sdpa|fwd|bwd|mlp|decode"
        r"|prefill|fused_moe|(?<![a-z])mm(?![a-z])|einsum)",
        "unknown",
        ANY,
        "a GEMM, convolution or attention kernel whose name carries no instruction, shape "
        "or op-class marker (hand-written or generated): either path is possible",
    ),
    TcRule(
        "no_mma_word",
        r"",
        "no_tc",
        ANY,
        "Tensor Cores only execute matrix multiply-accumulate; a name with no MMA marker, "
        "MMA library family or GEMM/conv/attention word is elementwise, reduction, copy, "
        "collective, sort or scan code (NCCL, CUB, Eigen, ATen, cuDNN bn/softmax)",
    ),
)

RULE_IDS: tuple[str, ...] = tuple(rule.id for rule in RULES)

# Rules that say "the name carries no evidence": when the full name only matches one of
# these, the short name is consulted as a second witness.
WEAK_RULE_IDS: frozenset[str] = frozenset(
    rule.id for rule in RULES if rule.verdict == "unknown" or rule.pattern == ""
)
