"""FP32 GEMM/conv kernel rules (rules/gemm.py), each on real kernel names.

Every example is a name from ../shared/tc_kernels.tsv or from a corpus export (the test
checks that it is there), so a rule is only as broad as names real profiles carry.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from builders import query
from dlprof_lite.ingest.tensorcore import classify_kernel_names
from dlprof_lite.rules.gemm import FP32_GEMM_RULES, fp32_gemm_rule, is_fp32_gemm, is_matmul_kernel

TRT = "NVIDIA__trt-samples-for-hackathon-cn__cookbook_09-Advance_MultiStream_calculation-bound"
TRT_FILE = f"{TRT}.qdrep.sqlite"
DLPROF_FILE = "MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite"

# (name, rule id, where the name comes from: "tsv" or a corpus file)
EXAMPLES = [
    ("volta_fp16_scudnn_fp16_128x32_relu_small_nn_v1", "lower_precision_word", "tsv"),
    ("volta_sgemm_int8_128x128_nt", "lower_precision_word", "tsv"),
    ("volta_sgemm_128x32_nt", "blas_sgemm", "tsv"),
    ("cutlass_80_simt_sgemm_128x32_8x5_nn_align1", "blas_sgemm", "tsv"),
    ("sgemm_largek_lds64", "blas_sgemm", "tsv"),
    ("implicit_convolve_sgemm", "blas_sgemm", "tsv"),
    ("volta_sgemm_32x32_sliced1x4_tn", "blas_sgemm", DLPROF_FILE),
    ("ampere_gcgemm_64x64_nt", "blas_cgemm", "tsv"),
    ("volta_cgemm_32x32_tn", "blas_cgemm", DLPROF_FILE),
    ("maxwell_gcgemm_32x32_nt", "blas_cgemm", TRT_FILE),
    ("volta_scudnn_128x128_relu_interior_nn_v1", "cudnn_scudnn", "tsv"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "cudnn_scudnn", "tsv"),
    ("trt_maxwell_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148n_nt_v0", "cudnn_scudnn", TRT_FILE),
    ("cutlass_simt_sfprop_optimized_128x128_8x2_nhwc", "cutlass_simt_sconv", "tsv"),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cublas",
        "xmma_f32_ffma",
        "tsv",
    ),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false",
        "float_template",
        "tsv",
    ),
    ("void gemmk1_kernel<float, 256, 5, false, false, false, false", "float_template", "tsv"),
    (
        "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>",
        "float_template",
        "tsv",
    ),
    ("void fft2d_r2c_32x32<float, false, 0u, false>", "float_template", "tsv"),
    (
        "void cudnn::winograd_nonfused::winogradForwardOutput9x9_5x5<float, float>",
        "float_template",
        DLPROF_FILE,
    ),
    (
        "void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4, (int)8, (int)4, (int)4",
        "float_template",
        DLPROF_FILE,
    ),
    # mangled: exports without a demangled name
    (
        "_Z16gemmSN_NN_kernelIfLi128ELi2ELi4ELi8ELi3ELi4E30cublasGemvTensorStridedBatched",
        "float_template",
        DLPROF_FILE,
    ),
    (
        "_Z17gemv2T_kernel_valIii6float2S0_S0_Li128ELi16ELi2ELi2ELb0E16cublasGemvParams",
        "float_template",
        "MohanadOdema__DLProf__nsys_profile.sqlite",
    ),
    (
        "_ZN5cudnn6detail23implicit_convolve_sgemmIffLi1024ELi5ELi5ELi3ELi3ELi3ELi1ELb1ELb0ELb1EEE",
        "blas_sgemm",
        DLPROF_FILE,
    ),
]

# Names no rule may call FP32 GEMM: half/TF32 Tensor Core GEMMs, double and half SIMT
# GEMMs, elementwise and norm kernels on float, a gemm short name without its type.
NOT_FP32 = [
    "ampere_dgemm_128x64_nt_v0",
    "ampere_hgemm_256x128_nt_v0",
    "ampere_s1688gemm_bf16_128x128_ldg8_stages_32x1_nn",
    "sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16",
    "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>",
    "gemmSN_NN_kernel",
    "void gemv2T_kernel_val<int, int, double, double, double, double, 128, 16, 4, 4>",
    "_Z17gemv2T_kernel_valIiiddddLi128ELi16ELi4ELi4ELb0ELb0E16cublasGemvParams",
    "ncclKernel_AllReduce_RING_LL_Sum_float",
]


@pytest.mark.parametrize(("name", "rule", "source"), EXAMPLES)
def test_rule_wins_for_its_real_name(name: str, rule: str, source: str) -> None:
    assert fp32_gemm_rule(name) == rule
    verdict = next(r.fp32 for r in FP32_GEMM_RULES if r.id == rule)
    assert is_fp32_gemm(name) is verdict


def test_every_rule_has_an_example() -> None:
    assert {r.id for r in FP32_GEMM_RULES} == {rule for _, rule, _ in EXAMPLES}


@pytest.mark.parametrize("name", NOT_FP32)
def test_not_fp32_gemm(name: str) -> None:
    assert not is_fp32_gemm(name)


def _corpus_names(path: Path) -> set[str]:
    return {row[0] for row in query(path, "SELECT value FROM StringIds")}


def test_examples_are_real_names(shared_dir: Path, corpus_dir: Path) -> None:
    tsv = pd.read_csv(shared_dir / "tc_kernels.tsv", sep="\t", dtype=str, keep_default_na=False)
    known = {"tsv": set(tsv["name"]) | set(tsv["short_name"])}
    for _, _, source in EXAMPLES:
        if source not in known:
            known[source] = _corpus_names(corpus_dir / source)
    for name, _, source in EXAMPLES:
        # Long demangled names are quoted up to their first template arguments.
        assert any(n.startswith(name) for n in known[source]), (name, source)


def test_no_tensor_core_kernel_of_the_tsv_is_fp32_gemm(shared_dir: Path) -> None:
    tsv = pd.read_csv(shared_dir / "tc_kernels.tsv", sep="\t", dtype=str, keep_default_na=False)
    tc = tsv[tsv["label"] == "tc"]
    assert len(tc) > 50
    assert not [n for n in tc["name"] if is_fp32_gemm(n)]
    # ...and every name a rule calls FP32 is one the Tensor Core table calls no_tc.
    fp32 = [n for n in tsv["name"] if is_fp32_gemm(n)]
    assert len(fp32) >= 20
    assert set(classify_kernel_names(fp32)) == {"no_tc"}


# -- GEMM and convolution kernels in any precision (is_matmul_kernel) -------------------------

# Kernels of conv and linear modules that do no multiply-adds, from an H200 run of ResNet-18
# and GPT-2 in BF16 and FP32 (docs/gpu-validation.md): what the mixed-precision advice must
# not count, since no precision change moves them onto Tensor Cores.
AROUND_MATMUL = [
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
    "(bool)0, (bool)1, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t"
    "<T3>, const T1 *, T2 *)",
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, (bool)1, (bool)0, "
    "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<T3>, const T1 *, "
    "T2 *)",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const>(int, T1, T2)",
    "void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<(unsigned"
    " int)2>, unsigned int, (int)4, (int)64, (int)64>(T1 *, at::native::<unnamed>::CatArrInputT"
    "ensorMetadata<T1, T2, T4, T5>, at::native::<unnamed>::TensorSizeStride<T2, (unsigned int)4>"
    ", int, T2)",
    "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::"
    "implicit_gemm::wgrad_indexed::Warp_specialized_params<xmma__5x_cudnn::Sm90_warpgroup_traits"
    ">>(T1)",
    "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<cutlass__"
    "5x_cudnn::MatrixShape<(int)4, (int)256>, cutlass__5x_cudnn::epilogue::thread::"
    "LinearCombination<float, (int)4, float, float>>>(T1::Params)",
    "void cudnn::fusion::convert_dq_to_16bits<(bool)1>(const void *, void *, unsigned int, "
    "unsigned int, unsigned int, unsigned int, unsigned int, unsigned int)",
    "void cudnn::engines_precompiled::scalePackedTensor_kernel<float, float>(long, T1 *, T2)",
    "void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)",
    "void splitKreduce_kernel<(int)32, (int)16, int, float, float, float, float, (bool)1, "
    "(bool)0, (bool)0>(cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *, const T6 *)",
]
# Multiply-adds from the same runs that ran on CUDA cores, one per family.
MATMUL_NO_TC = [
    "void precomputed_convolve_sgemm<__nv_bfloat16, (int)128, (int)6, (int)7, (int)3, (int)3, "
    "(int)5, (int)1, (bool)0>(int, int, int, const T1 *, int, T1 *, const T1 *, kernel_conv_"
    "params, unsigned long long, int, float, float, int, const T1 *, const T1 *)",
    "void cudnn::detail::dgrad_engine<float, (int)512, (int)6, (int)5, (int)3, (int)3, (int)3, "
    "(bool)0>(int, int, int, const T1 *, int, const T1 *, int, T1 *, kernel_grad_params, "
    "unsigned long long, int, unsigned long long, int, float, int, int, int)",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(T1::Params)",
    "void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(cudnn::winograd_"
    "nonfused::WinogradDataParams<T1, T2>)",
]


def test_fp32_and_tensor_core_gemms_of_the_tsv_are_matmul_kernels(shared_dir: Path) -> None:
    tsv = pd.read_csv(shared_dir / "tc_kernels.tsv", sep="\t", dtype=str, keep_default_na=False)
    fp32 = [n for n in tsv["name"] if is_fp32_gemm(n)]
    tc = list(tsv.loc[tsv["label"] == "tc", "name"])
    assert len(fp32) >= 20 and len(tc) > 50
    assert [n for n in fp32 + tc if not is_matmul_kernel(n)] == []


@pytest.mark.parametrize("name", MATMUL_NO_TC)
def test_cuda_core_matmul_kernels(name: str) -> None:
    assert is_matmul_kernel(name)


@pytest.mark.parametrize("name", AROUND_MATMUL)
def test_kernels_around_a_matmul_are_not_matmul_kernels(name: str) -> None:
    assert not is_matmul_kernel(name)


def test_a_mangled_name_is_read_by_its_own_function() -> None:
    # vLLM's KV-cache copy names "flash" in its own name, not as flash attention
    assert not is_matmul_kernel(
        "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEE")
    assert is_matmul_kernel(
        "_ZN5cudnn6detail23implicit_convolve_sgemmIffLi1024ELi5ELi5ELi3ELi3ELi3ELi1ELb1ELb0ELb1EEE")
