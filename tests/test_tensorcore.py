"""Tensor Core classifier: accuracy on the labelled names, one test per rule, the kernels frame.

(a) accuracy over ../shared/tc_kernels.tsv (tc vs no_tc, per architecture);
(b) every rule of ``rules.tensor_cores.RULES`` wins, with its verdict, for real kernel names;
(c) ``classify_kernels`` on a small frame with categorical names.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dlprof_lite.ingest import tensorcore
from dlprof_lite.ingest.tensorcore import (
    NO_NAME_RULE,
    classify_kernel_names,
    classify_kernels,
    classify_names_with_rules,
)
from dlprof_lite.rules.tensor_cores import RULE_IDS, RULES, VERDICTS, WEAK_RULE_IDS, TcRule

MIN_PRECISION = 0.99
MIN_RECALL = 0.98

# ---------------------------------------------------------------------------------------
# (a) accuracy on the labelled file
# ---------------------------------------------------------------------------------------


def accuracy_table(labels: pd.Series, predicted: pd.Series, arch: pd.Series) -> pd.DataFrame:
    """Precision and recall of 'tc' per architecture (plus an 'all' row).

    How ``unknown`` counts: rows *labelled* unknown are left out (the metric is tc vs
    no_tc). A tc row predicted unknown is a recall miss (a false negative), exactly like a
    tc row predicted no_tc. A no_tc row predicted unknown is not a false positive: only a
    'tc' prediction is a positive. Precision with no positive prediction is 1.0.
    """
    frame = pd.DataFrame({"label": labels, "pred": predicted, "arch": arch})
    frame = frame[frame["label"].isin(["tc", "no_tc"])]
    rows = []
    for name, group in [*frame.groupby("arch", sort=True), ("all", frame)]:
        is_tc = group["label"] == "tc"
        said_tc = group["pred"] == "tc"
        tp = int((is_tc & said_tc).sum())
        fp = int((~is_tc & said_tc).sum())
        fn = int((is_tc & ~said_tc).sum())
        rows.append(
            {
                "arch": name,
                "tc": int(is_tc.sum()),
                "no_tc": int((~is_tc).sum()),
                "tp": tp,
                "fp": fp,
                "fn": fn,
                "tc_as_unknown": int((is_tc & (group["pred"] == "unknown")).sum()),
                "no_tc_as_unknown": int((~is_tc & (group["pred"] == "unknown")).sum()),
                "precision": tp / (tp + fp) if tp + fp else 1.0,
                "recall": tp / (tp + fn) if tp + fn else 1.0,
            }
        )
    return pd.DataFrame(rows).set_index("arch")


@pytest.fixture(scope="module")
def labelled(shared_dir: Path) -> pd.DataFrame:
    frame = pd.read_csv(shared_dir / "tc_kernels.tsv", sep="\t", dtype=str, keep_default_na=False)
    assert {"name", "short_name", "arch", "label", "evidence"} <= set(frame.columns)
    assert set(frame["label"]) <= set(VERDICTS)
    return frame


def test_accuracy_per_architecture(labelled: pd.DataFrame) -> None:
    predicted = pd.Series(classify_kernel_names(labelled["name"]), index=labelled.index)
    table = accuracy_table(labelled["label"], predicted, labelled["arch"])
    print("\nTensor Core classifier on tc_kernels.tsv (tc vs no_tc):")
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    wrong = labelled[(predicted != labelled["label"]) & labelled["label"].isin(["tc", "no_tc"])]
    if len(wrong):
        print("labelled tc/no_tc, predicted otherwise:")
        for row, verdict in zip(wrong.itertuples(), predicted[wrong.index]):
            print(f"  {row.label:>5} -> {verdict:<7} [{row.arch}] {row.name[:100]}")
    assert len(table) >= 2
    for arch, row in table.iterrows():
        assert row["precision"] >= MIN_PRECISION, f"{arch}: precision {row['precision']:.3f}"
        assert row["recall"] >= MIN_RECALL, f"{arch}: recall {row['recall']:.3f}"


def test_short_names_never_contradict(labelled: pd.DataFrame) -> None:
    # A short name carries less evidence than the full name, but must never say the
    # opposite of the label (tc for a no_tc kernel, or no_tc for a tc kernel).
    predicted = classify_kernel_names(labelled["short_name"])
    for label, verdict, name in zip(labelled["label"], predicted, labelled["short_name"]):
        assert {label, verdict} != {"tc", "no_tc"}, name


def test_kernels_frame_agrees_with_name_api(labelled: pd.DataFrame) -> None:
    kernels = pd.DataFrame(
        {
            "name": labelled["name"].astype("category"),
            "short_name": labelled["short_name"].astype("category"),
        }
    )
    out = classify_kernels(kernels)
    assert list(out["tc_class"].astype(str)) == classify_kernel_names(labelled["name"])


def test_accuracy_table_counts_unknown_as_stated() -> None:
    labels = pd.Series(["tc", "tc", "no_tc", "no_tc", "unknown"])
    predicted = pd.Series(["tc", "unknown", "unknown", "tc", "tc"])
    table = accuracy_table(labels, predicted, pd.Series(["x"] * 5))
    assert table.loc["x", "tp"] == 1
    assert table.loc["x", "fn"] == 1  # tc predicted unknown: a recall miss
    assert table.loc["x", "fp"] == 1  # only the no_tc predicted tc; unknown labels left out
    assert table.loc["x", "precision"] == 0.5
    assert table.loc["x", "recall"] == 0.5


# ---------------------------------------------------------------------------------------
# (b) one test per rule, on real kernel names
# ---------------------------------------------------------------------------------------

# tsv row 40: cuDNN's CUTLASS wgrad kernel, warp::MmaTensorOp in its template arguments.
ROW40 = (
    "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblo"
    "ck22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEENS4_52Conv2dWgradOutputG"
    "radientTileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi32EEENS_10tfloat32_tENS_9tran"
    "sform29PitchLinearWarpRakedThreadMapINS_16PitchLinearShapeILi64ELi32EEELi128ENSF_ILi8ELi"
    "4EEELi4EEENS_12AlignedArrayISC_Li4ELi16EEEEENSD_11threadblock25RegularTileAccessIterator"
    "ISB_SC_NS_6layout40ColumnMajorTensorOpMultiplicandCongruousILi32ELi32EEELi1ESI_Li16EEELN"
    "S_4arch14CacheOperation4KindE0ENS4_48Conv2dWgradActivationTileAccessIteratorOptimizedINS"
    "A_ILi32ELi128EEESC_NSE_INSF_ILi128ELi32EEELi128ESH_Li4EEESK_EENSN_ISW_SC_NSO_37RowMajorT"
    "ensorOpMultiplicandCongruousILi32ELi32EEELi0ESY_Li16EEELSU_0ENS6_11threadblock9MmaPolicy"
    "INS6_4warp11MmaTensorOpINS7_ILi32ELi64ELi32EEESC_SQ_SC_S11_fNSO_8RowMajorENS15_17MmaTens"
    "orOpPolicyINSS_3MmaINS7_ILi16ELi8ELi8EEELi32ESC_S18_SC_NSO_11ColumnMajorEfS18_NSS_13OpMu"
    "ltiplyAddEEENSA_ILi1ELi1EEEEELi1ELb0EbEENSA_ILi0ELi0EEES1I_Li1EEELi3EbEENS_8epilogue11th"
    "readblock8EpilogueIS8_S1H_Li1ENS1M_22PredicatedTileIteratorINS1M_26OutputTileOptimalThre"
    "adMapINS1M_15OutputTileShapeILi128ELi8ELi2ELi1ELi1EEENS1Q_ILi1ELi4ELi1ELi1ELi4EEELi128EL"
    "i4ELi32EEEfLb0ENSO_9NoPermuteELb0EEENS1L_4warp24FragmentIteratorTensorOpIS17_S1B_fNS_5Ar"
    "rayIfLi4ELb1EEES18_EENS1W_20TileIteratorTensorOpIS17_S1B_fS18_EENS1M_18SharedLoadIterato"
    "rINS1T_18CompactedThreadMapEfLi16EEENS1L_6thread17LinearCombinationIfLi4EffLNS26_9ScaleT"
    "ype4KindE0ELNS_15FloatRoundStyleE2EEENSA_ILi0ELi8EEELi2ELi1EEENS13_30GemmIdentityThreadb"
    "lockSwizzleILi4EEELNS1_8OperatorE2ENS1_17Conv2dProblemSizeELNS1_9GroupModeE0EEEEEvNT_6Pa"
    "ramsE"
)
CUTLASS_SIMT_MANGLED = (
    "_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedINS1_9GemmShapeIL"
    "i128ELi128ELi8EEENS_9transform11threadblock22PredicatedTileIteratorINS_11MatrixShapeILi1"
    "28ELi8EEENS_7complexIfEENS_6layout8RowMajorELi1ENS8_30PitchLinearStripminedThreadMapINSF"
    "_16PitchLinearShapeILi8ELi128EEELi256ELi1EEELi1EEENS9_19RegularTileIteratorISC_SE_NSF_11"
    "ColumnMajorELi1ENS8_33TransposePitchLinearThreadMapSimtISK_EELi8EEENSA_INSB_ILi8ELi128EE"
    "ESE_SG_Li0ENSH_INSI_ILi128ELi8EEELi256ELi1EEELi1EEENSM_ISR_SE_SG_Li0EST_Li8EEESE_SG_NS4_"
    "9MmaPolicyINS1_4warp7MmaSimtINS6_ILi32ELi64ELi8EEESE_SN_SE_SG_SE_SG_NSX_13MmaSimtPolicyI"
    "NSB_ILi4ELi8EEENSF_19RowMajorInterleavedILi2EEENS6_ILi2ELi2ELi1EEEEELi1ELNS_16ComplexTra"
    "nsformE0ELS16_0EbEENSB_ILi2ELi0EEENSB_ILi0ELi0EEELi1EEENS_21NumericArrayConverterISE_SE_"
    "Li4ELNS_15FloatRoundStyleE2EEES1D_bEENS_8epilogue11threadblock8EpilogueIS7_S17_Li1ENS1G_"
    "22PredicatedTileIteratorINS1G_26OutputTileOptimalThreadMapINS1G_15OutputTileShapeILi128E"
    "Li1ELi4ELi4ELi1EEENS1K_ILi1ELi2ELi4ELi1ELi8EEELi256ELi1ELi64EEESE_EENS1F_4warp20Fragment"
    "IteratorSimtISZ_NS1_6thread3MmaINS6_ILi8ELi8ELi1EEESE_SN_SE_SG_SE_SG_NS_4arch13OpMultipl"
    "yAddEbEESG_S15_EENS1P_16TileIteratorSimtISZ_S1W_SE_SG_S15_EENS1G_18SharedLoadIteratorINS"
    "1N_18CompactedThreadMapESE_Li8EEENS1F_6thread17LinearCombinationISE_Li1ESE_SE_LNS23_9Sca"
    "leType4KindE0ELS1C_2EEENSB_ILi0ELi9EEELi1EEENS4_30GemmIdentityThreadblockSwizzleILi1EEEL"
    "b0EEEEEvNT_6ParamsE"
)
# ^ public: a CUTLASS complex SGEMM kernel symbol (read with nm from a cubin), warp::MmaSimt.

# Sources: "tsv" = ../shared/tc_kernels.tsv (arch), "corpus" = ../shared/corpus exports,
# "public" = profiler output quoted in a public repository (kept as printed, even truncated).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "pre_volta_arch": (
        "maxwell_scudnn_128x64_relu_small_nn_v1",  # corpus: trt-samples cookbook_09
        "void fermiCgemm_v3_kernel<bool=1, bool=0, bool=0, bool=0, int=5, int=5, int=3, int=8, "
        "int=8>(int, int, int, float2 const *, int, float2 const *, int, float2*, int, int, "
        "int, float2 const *, float2 const *, float2, float2, int)",  # tsv (volta)
    ),
    "fma_instruction": (
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_"
        "aligna4_alignc4_execute_kernel__5x_cublas",  # tsv (ampere)
    ),
    "cutlass_simt_name": (
        "cutlass_80_simt_sgemm_256x128",  # tsv (blackwell, sm_120)
        "cutlass_simt_sfprop_optimized_128x128_8x2_nhwc",  # tsv
    ),
    "cutlass_simt_template": (CUTLASS_SIMT_MANGLED,),
    "flash_attn_no_mma": (
        # public: torch.profiler table of a bf16 FlashAttention-2 benchmark
        "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, "
        "false, fal...",
        "flash_attn_vec_ext_f16",  # public: llama.cpp profile on a P100 (no fp16 MMA)
    ),
    # public: PyTorch SDPA on a GTX 1650 Ti picked the sm75 f32 mem-efficient kernel
    "fmha_simt_variant": ("fmha_cutlassF_f32_aligned_64x64_rf_sm75",),
    "cudnn_sdpa": (
        "cudnn_generated_fort_native_sdpa_sm100_flash_fprop",  # tsv (blackwell)
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x",  # tsv
    ),
    "blackwell_tcgen05": (
        # public: SGLang B200 kernel table (truncated as printed)
        "void deep_gemm::sm100_fp8_fp4_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0"
        ", 128u, 128u, 0u, 0u, 0u, 240u, 128u, 128u, 1u, 128u, 128u, 128u, 6u, 128u, 128u, 2u, "
        "true, 148u, true, (deep_gemm::GemmType)0, f",
    ),
    "hopper_gmma": (
        "sm90_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize256x128x64_cgasize1x2x1_stage4_gmmastage2"
        "_warpgroupsize2x1x1_hgmma64x128x16",  # tsv (hopper)
    ),
    "xmma_warpgroup": (
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_"
        "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",  # tsv (hopper)
    ),
    "xmma_tensor_shape": (
        "sm89_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x64x64_stage4_warpsize2x2x1_"
        "tensor16x8x32_execute_kernel__5x_cublas",  # tsv (ada)
        "sm90_xmma_gemm_f64f64_f64f64_f64_nt_n_tilesize128x128x16_stage3_warpsize4x2x1_"
        "tensor16x8x16",  # tsv (hopper, DMMA)
    ),
    "cublas_mma_shape": (
        "volta_s884gemm_128x128_ldg8_f2f_nn",  # tsv (volta)
        "trt_turing_h1688gemm_256x64_ldg8_relu_stages_32x1_nn_v1",  # tsv (turing)
        "ampere_fp32_s1684tf32gemm_fp32_128x128_ldg4_nt_v1",  # tsv (ampere)
        "ampere_int32_i16832gemm_int8_128x128_ldg16_stages_64x3_nt_v1",  # tsv (ampere)
        "void cutlass::Kernel<cutlass_75_tensorop_f16_s1688gemm_f16_256x128_nn_align1>"
        "(T1::Params)",  # corpus: casio nerf
    ),
    # public: a hand-written HGEMM whose source issues two mma.sync m16n8k16 per warp
    "ptx_mma_shape": ("hgemm_m16n8k16_kernel",),
    "cute_mma_atom": (
        # public: CuTe DSL Blackwell dense GEMM example (tf32 128x128x8 tcgen05 MMA atom)
        "kernel_cutlass_kernel___main__PersistentDenseGemmKernel_object_at__TiledMMA_"
        "ThrLayoutVMNK11110000_PermutationMNK____MMAAtom_ThrID10_ShapeMNK1281288_TVLayoutA11288"
        "1281128_TVLayoutB11288128_0",
    ),
    "mma_instruction_word": (
        "Volta_hmma_implicit_gemm_fprop_fp32_nhwc_128x128x64x1_1x3x3x0x1",  # tsv (volta)
        "gemm_wmma_t<128,128,3>",  # tsv (hopper)
        "void tcnn::kernel_mlp_fused<64, 8, __half, (tcnn::Activation)0, true>(tcnn::Activation"
        ", __half const*, __half const*, __half*, __half*, unsigned int, unsigned int, unsigned "
        "int, unsigned int, unsigned int, nvcuda::wmma::layout_t, nvcuda::wmma::layout_t)",
    ),  # ^ corpus: instant-ngp
    "cutlass_tensorop_name": (
        "cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_f16_f32_128x128x64_2x1x1_0_ntn_"
        "align8",  # tsv (hopper)
    ),
    "cutlass_tensorop_template": (ROW40,),
    "cublaslt_nvjet": (
        "nvjet_hsh_64x8_64x16_1x1_v_bz_splitK_NNT",  # tsv (blackwell)
        "nvjet_sm90_hss_320x128_64x3_1x2_h_bz_coopB_NNT",  # tsv (hopper)
        "nvjet_tst_192x208_64x4_1x1_h_bz_coopB_bias_TNT",  # corpus: nsys-ai mfu fixture
    ),
    "xmma_mma_dtype": (
        "sm75_xmma_gemm_f16f16_f16f16_f16_nn_n_tilesize128x128x32",  # tsv (turing)
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1",  # tsv
    ),
    "flash_attention": (
        "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_kernel_traitsILi64ELi64ELi256ELi4ELb0E"
        "Lb0EN7cutlass6half_tE19Flash_kernel_traitsILi64E",  # tsv (ada)
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::"
        "CollectiveMa…",  # tsv (hopper)
        "fmha_v2_flash_attention_fp16_64_32_S_qkv_128_causal_sm86_kernel_nl",  # tsv (ampere)
    ),
    "fmha": (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80",  # tsv
        "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
        # public: PyTorch mem-efficient attention, f32 on sm80 = OpClassTensorOp FastF32
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
    ),
    "trtllm_gen_gemm": (
        "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_"
        "rM_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f",  # tsv (blackwell)
    ),
    "marlin": (  # public: nsys cuda_gpu_kern_sum of a vLLM run (truncated by nsys)
        "void marlin::Marlin<(long)1125899906910725, (long)1125899906843648, "
        "(long)1125899906910725, (long)1…",
    ),
    # public: DeepGEMM kernel name as quoted by a profile parser (FP8 on sm90 = wgmma)
    "deep_gemm": ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 2112u, 7168u, 1u, ...>",),
    "flashinfer_prefill": (  # public: SGLang top-kernel table (bf16 prefill)
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<"
        "(flashinfer::MaskMode)1, (unsigned int)128, (unsigned int)2, (unsigned int)2, (unsi"
        "gned int)8, (unsigned int)8, (unsigned int)4, (unsigned int)1, (flashinfer::PosEncodi"
        "ngMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::Defaul"
        "tAttention<(bool)0, (bool)0, (bool)0, (bool)0>>, PagedParams>(T2)",
    ),
    # public: ncu -k target in an AWQ benchmark script
    "awq_gemm": ("gemm_forward_4bit_cuda_m16n128k32",),
    "cublas_simt_gemm": (
        "ampere_dgemm_128x64_nt_v0",  # tsv (ampere, DFMA)
        "ampere_hgemm_256x128_nt_v0",  # tsv (ampere, HFMA2)
        "ampere_igemm_int8_128x128_ldg4_nt_v0",  # tsv (ampere, IDP4A)
        "volta_sgemm_int8_128x128_nt",  # tsv (turing)
        "ampere_fp16_sgemm_fp16_128x64_tn",  # corpus: casio nerf
    ),
    "cudnn_simt": (
        "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",  # tsv (ampere)
        "volta_fp16_scudnn_fp16_128x32_relu_small_nn_v1",  # tsv (turing)
    ),
    "cudnn_legacy_conv": (
        "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, "
        "int, int)",  # tsv (ampere)
        "cudnn::gemm::computeOffsetsKernel(cudnn::gemm::ComputeOffsetsParams)",  # corpus: DLProf
    ),
    "blas_helper": (
        "batched_hw_dp4a_q4k_gemv",  # tsv
        "compute_gemm_pointers(float2 **, const float2 *, int, const float2 *, int, const float2 "
        "*, int, int)",  # corpus: DLProf
        "void mul_mat_vec_q<(ggml_type)8, 1>(void const*)",  # public: llama.cpp trace fixture
    ),
    "aten_native": (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
        "float*, float*, c10::BFloat16*)",  # tsv (hopper)
    ),
    "inductor_pointwise": ("triton_poi_fused_add_cos_sin_0",),  # tsv (ampere)
    "triton": ("triton__0d1d2d3d4d5d", "triton_unk_fused_addmm_gelu_native_dropout"),  # tsv
    "nvfuser_generated": (  # corpus: NVIDIA Fuser report1 (demangled, short)
        "<unnamed>::nvfuser_pointwise_f0_c1_r0_g4(<unnamed>::Tensor<<unnamed>::__bfloat, (int)3,"
        " (int)3>, <unnamed>::Tensor<float, (int)3, (int)3>)",
        "nvfuser_inner_persistent_f1_c1_r0_g2",
    ),
    "xla_fusion": ("fusion_4", "fusion"),  # corpus: alpa jax_profile_mem
    # tsv short name (hopper FlashAttention-3); corpus short name (cutlass_benchmark)
    "cutlass_opaque": ("cutlass::device_kernel", "Kernel"),
    # tsv: a tiled FP32 kernel (blackwell), a Triton kernel labelled unknown (turing)
    "gemm_like_unmarked": ("gemm_tiled", "_decode_paged_kernel"),
    "no_mma_word": (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",  # tsv
        "_ZN4vllm30reshape_and_cache_flash_kernelIttLNS_18Fp8KVCacheDataTypeE0EEE",  # tsv (ada)
        "saxpy(double *, double *, double *, double, int)",  # corpus: pipit saxpy
    ),
}


@pytest.mark.parametrize("rule", RULES, ids=RULE_IDS)
def test_rule_wins_on_its_examples(rule: TcRule) -> None:
    examples = EXAMPLES.get(rule.id)
    assert examples, f"rule {rule.id!r} has no real-name example in EXAMPLES"
    verdicts, rule_ids = classify_names_with_rules(examples)
    for name, verdict, rule_id in zip(examples, verdicts, rule_ids):
        assert rule_id == rule.id, f"{rule.id} is shadowed by {rule_id} on {name[:80]!r}"
        assert verdict == rule.verdict, name


def test_examples_name_only_rules_in_the_table() -> None:
    assert set(EXAMPLES) == set(RULE_IDS)


def test_table_is_well_formed() -> None:
    assert len(set(RULE_IDS)) == len(RULE_IDS)
    for rule in RULES:
        re.compile(rule.pattern)
        assert rule.verdict in VERDICTS
        assert rule.archs and rule.evidence
    # The catch-all closes the table, so every name gets a rule from the table.
    assert RULES[-1].pattern == "" and RULES[-1].id in WEAK_RULE_IDS
    assert all(rule.pattern for rule in RULES[:-1])


def test_missing_names_are_unknown() -> None:
    verdicts, rules = classify_names_with_rules([None, "", "   ", float("nan")])
    assert verdicts == ["unknown"] * 4
    assert rules == [NO_NAME_RULE] * 4


# ---------------------------------------------------------------------------------------
# (c) classify_kernels on a kernels frame
# ---------------------------------------------------------------------------------------

GEMM = "volta_s884gemm_128x128_ldg8_f2f_nn"
SGEMM = "volta_sgemm_128x32_nt"
FLASH = "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)"


def small_kernels() -> pd.DataFrame:
    nvjet = "nvjet_tst_96x64_64x10_1x2_h_bz_bias_TNN"
    rows = [(GEMM, GEMM), (SGEMM, SGEMM), (GEMM, GEMM), (None, nvjet), ("fusion_4", "fusion_4")]
    rows.append((FLASH, "flash::flash_fwd_kernel"))
    # an unused category must not matter
    categories = [FLASH, GEMM, SGEMM, "fusion_4", "unused"]
    return pd.DataFrame(
        {
            "start_ns": np.arange(6, dtype="int64") * 10,
            "name": pd.Categorical([n for n, _ in rows], categories=categories),
            "short_name": pd.Categorical([s for _, s in rows]),
        },
        index=pd.Index([10, 11, 12, 13, 14, 15]),
    )


def test_classify_kernels_adds_columns() -> None:
    kernels = small_kernels()
    out = classify_kernels(kernels)
    assert list(out["tc_class"].astype(str)) == ["tc", "no_tc", "tc", "tc", "unknown", "tc"]
    assert list(out["uses_tensor_cores"]) == [True, False, True, True, False, True]
    assert list(out["tc_rule"].astype(str)) == [
        "cublas_mma_shape",
        "cublas_simt_gemm",
        "cublas_mma_shape",
        "cublaslt_nvjet",  # no name: the short name is the evidence
        "xla_fusion",
        "flash_attention",
    ]
    assert isinstance(out["tc_class"].dtype, pd.CategoricalDtype)
    assert list(out["tc_class"].cat.categories) == list(VERDICTS)
    assert out["uses_tensor_cores"].dtype == bool
    assert isinstance(out["tc_rule"].dtype, pd.CategoricalDtype)
    assert out.index.equals(kernels.index)


def test_classify_kernels_does_not_mutate() -> None:
    kernels = small_kernels()
    before = kernels.copy(deep=True)
    out = classify_kernels(kernels)
    assert out is not kernels
    assert list(kernels.columns) == ["start_ns", "name", "short_name"]
    pd.testing.assert_frame_equal(kernels, before)


def test_classify_kernels_without_short_name_or_rows() -> None:
    out = classify_kernels(small_kernels().drop(columns="short_name"))
    assert out["tc_class"].astype(str).tolist()[3] == "unknown"
    assert out["tc_rule"].astype(str).tolist()[3] == NO_NAME_RULE
    empty = classify_kernels(small_kernels().iloc[:0])
    assert len(empty) == 0 and {"tc_class", "uses_tensor_cores", "tc_rule"} <= set(empty)


def test_each_distinct_name_is_classified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = tensorcore._classify_one

    def counting(name: object) -> tuple[str, str]:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(tensorcore, "_classify_one", counting)
    rows = 200_000
    codes = np.arange(rows) % 3
    kernels = pd.DataFrame(
        {
            "name": pd.Categorical.from_codes(codes, categories=[GEMM, SGEMM, FLASH]),
            "short_name": pd.Categorical.from_codes(codes, categories=[GEMM, SGEMM, "flash"]),
        }
    )
    out = classify_kernels(kernels)
    assert len(calls) <= 6  # three distinct names, three distinct short names
    assert int(out["uses_tensor_cores"].sum()) == int((codes != 1).sum())
