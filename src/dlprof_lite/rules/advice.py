"""The advice's thresholds: each value with its unit, what it judges and where it comes from.

Where a threshold comes from another tool we name the tool and the rule; where it is our own
choice we say "dlprof-lite choice". The advice (:mod:`dlprof_lite.report.advice`) reads them
with :func:`threshold`; ``docs/reference/report.md`` lists them (``report.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlprof_lite.rules.folding import FOLD_FACTOR
from dlprof_lite.rules.iterations import HIGH_VARIANCE_CV, STEADY_TOLERANCE


@dataclass(frozen=True)
class Threshold:
    value: float
    unit: str
    rule: str
    citation: str


_CHOICE = "dlprof-lite choice"
_TB = "PyTorch TensorBoard profiler plugin (torch_tb_profiler, run.py recommendations)"
_NSYS = "Nsight Systems expert-system rule"
_DLPROF = "DLProf Expert Systems"

THRESHOLDS: dict[str, Threshold] = {
    "tc_nontc_share_warn": Threshold(
        0.05,
        "share of kernel time",
        "GPU time of TC-eligible layers in non-Tensor-Core kernels",
        f"{_DLPROF} recommend AMP when eligible ops miss Tensor Cores; {_TB} advises AMP "
        f"when eligible operators' kernels have >0% time and TC use is 0%; 5% is a {_CHOICE}",
    ),
    "tc_nontc_share_high": Threshold(0.25, "share of kernel time", "same, high", _CHOICE),
    "tc_min_compute_capability": Threshold(
        7.0,
        "major.minor",
        "GPU has Tensor Cores",
        f"CUDA C Programming Guide (Tensor Cores from cc 7.0); {_TB} checks computeMajor >= 7",
    ),
    "launch_overhead_warn_pct": Threshold(
        3.0, "% of step", "host-bound GPU gaps per step (launch overhead)", _CHOICE
    ),
    "launch_overhead_high_pct": Threshold(15.0, "% of step", "same, high", _CHOICE),
    "data_stall_warn_pct": Threshold(
        5.0,
        "% of step",
        "host time in data loading per step",
        f"{_TB}: 'high time cost on input data loading' above 5% of step time; "
        f"{_DLPROF} detect data-loading bottlenecks (DLProf 20.07 release notes)",
    ),
    "data_stall_high_pct": Threshold(20.0, "% of step", "same, high", _CHOICE),
    "iteration_cv_warn": Threshold(
        HIGH_VARIANCE_CV,
        "std / mean",
        "variation of analysed iteration times",
        "psf/pyperf check: 'the benchmark result may be unstable' when the standard deviation "
        "is above 10% of the mean (value owned by rules/iterations.py)",
    ),
    "steady_tolerance": Threshold(
        STEADY_TOLERANCE,
        "share of median",
        "a steady iteration is within median x (1 +/- this)",
        f"{_CHOICE} (value owned by rules/iterations.py)",
    ),
    "iteration_min_count": Threshold(
        3, "iterations", "fewest analysed iterations to judge variance", _CHOICE
    ),
    "gpu_util_warn": Threshold(
        0.50,
        "share of time",
        "GPU busy share of the analysed steps (or active span)",
        f"{_TB}: GPU utilization < 0.5; {_NSYS} gpu-low-util flags time chunks under 50% GPU use; "
        f"{_DLPROF} underutilized-GPU detector (DLProf 21.07 release notes)",
    ),
    "gpu_util_high": Threshold(0.20, "share of time", "same, high", _CHOICE),
    "trimmed_capture_share": Threshold(
        0.10,
        "share of session",
        "below it, the events cover too little of the session for session-based shares: "
        "they are taken over the events' span",
        _CHOICE,
    ),
    "launch_coverage_warn": Threshold(
        0.90,
        "share of GPU operations",
        "below it, a warning: launch overhead and layers see only the GPU operations whose "
        "launch call the export holds",
        _CHOICE,
    ),
    "sync_memcpy_min_count": Threshold(
        1,
        "operations",
        "synchronous cudaMemcpy* (no Async), outside the exclusions",
        f"{_NSYS} cuda-sync-memcpy: every cudaMemcpy* without Async, except same-device "
        "copies and host-to-device copies of 64000 bytes or less",
    ),
    "sync_memcpy_small_htod_bytes": Threshold(
        64000, "B", "host-to-device copies this small are exempt", f"{_NSYS} cuda-sync-memcpy"
    ),
    "pageable_async_min_count": Threshold(
        1,
        "operations",
        "cudaMemcpy*Async from or to pageable memory",
        f"{_NSYS} cuda-async-memcpy: async copies on pageable memory run synchronously",
    ),
    "sync_api_warn_pct": Threshold(
        5.0,
        "% of step",
        "time in cudaDeviceSynchronize/cudaStreamSynchronize per step",
        f"{_NSYS} cuda-sync-api lists every such call (info here); 5% for warn is a {_CHOICE}",
    ),
    "tiny_kernel_median_ns": Threshold(
        10_000,
        "ns",
        "median kernel GPU duration",
        f"{_CHOICE}; HTA kernel launch stats flag 'short kernels' (GPU time < launch call)",
    ),
    "tiny_kernel_min_count": Threshold(100, "kernels", "fewest kernels to judge", _CHOICE),
    "fp32_gemm_share_warn": Threshold(
        0.05,
        "share of kernel time",
        "GPU time of FP32 GEMM/conv kernels (by name) when no layer tells eligibility",
        "NVIDIA Deep Learning Performance Guide (Tensor Cores take FP16/BF16/TF32 inputs, "
        f"FP32 math runs on CUDA cores); {_TB} advises AMP when GEMM/conv kernels miss "
        f"Tensor Cores; 5% as tc_nontc_share_warn, a {_CHOICE}",
    ),
    "fp32_gemm_share_high": Threshold(0.25, "share of kernel time", "same, high", _CHOICE),
    "pipeline_bubble_warn_pct": Threshold(
        20.0, "% of step", "a pipeline-parallel run's mean share of the step without compute",
        "GPipe (Huang et al., 2019) and Megatron-LM's 1F1B schedule (Narayanan et al., 2021): "
        "the bubble is (p-1)/(m+p-1) of the step for p stages and m micro-batches, small "
        f"when m >> p (m >= 4p keeps it under ~20 %); 20 % a {_CHOICE}"),
    "layer_mfu_low_pct": Threshold(
        10.0,
        "% MFU",
        "a layer's MFU (its FLOPs' time at the GPU's dense peak over its GPU time) below this",
        "PaLM (Chowdhery et al., 2022) reports 46.2 % MFU for a whole large training run and "
        f"Megatron-LM figures are of the same order; a layer below a fifth of that: a {_CHOICE}",
    ),
    "layer_mfu_min_step_pct": Threshold(
        5.0, "% of step", "least share of the step's time (the layer's GPU time) to be worth "
        "a finding", _CHOICE),
    "layer_small_dim": Threshold(
        128, "elements", "a first input's last dimension below this: matmuls too small to fill "
        "the GPU's Tensor Core tiles and SMs",
        "NVIDIA Deep Learning Performance Guide (Matrix Multiplication Background: small GEMM "
        f"dimensions underfill the GPU; tile quantization); 128 a {_CHOICE}"),
    "activation_memory_share": Threshold(
        0.25, "share of tensor bytes", "saved activations as a share of parameters, gradients, "
        "optimizer state and saved activations together, from which checkpointing is worth it",
        "PyTorch torch.utils.checkpoint documentation (activation checkpointing trades "
        f"recomputation for the memory of saved activations); 25% a {_CHOICE}"),
    "activation_top_share": Threshold(
        0.5, "share of saved bytes", "the share of saved activations that checkpointing the (at "
        "most 3) layers named would free, for the finding to say 'a few layers'", _CHOICE),
    "layer_short_kernel_ns": Threshold(
        10_000, "ns", "a layer's own kernels shorter than this on average: launch-bound work",
        f"{_TB} (kernels shorter than their launch); 10 µs a {_CHOICE}"),
    "exposed_comm_warn_pct": Threshold(
        10.0,
        "% of step",
        "communication kernel time no compute overlaps, per step",
        "HTA communication/computation overlap (low overlap means GPUs wait on collectives); "
        "PyTorch DDP overlaps gradient all-reduce with backward by buckets (bucket_cap_mb); "
        f"10% is a {_CHOICE}",
    ),
    "exposed_comm_high_pct": Threshold(30.0, "% of step", "same, high", _CHOICE),
    "idle_cause_warn_pct": Threshold(
        5.0, "% of step", "device time per step idle for one cause of the idle partition "
        "(sync, comm, compile, gc, host work in a layer, optimizer or other host work; a CPU run:"
        " the main thread's time in sync, comm, compile or gc)",
        "HTA idle time breakdown (host wait: the GPU idle because the CPU is busy); "
        f"5% is a {_CHOICE}"),
    "idle_cause_high_pct": Threshold(20.0, "% of step", "same, high", _CHOICE),
    "annotation_cost_warn_pct": Threshold(
        3.0, "% of step", "estimated host time the module annotation adds per step", _CHOICE
    ),
    "fold_factor": Threshold(
        FOLD_FACTOR, "x hook cost", "median forward call in the warm-up step below which the "
        "annotation folds a module into its parent (rules/folding.py)", _CHOICE
    ),
}


def threshold(key: str) -> float:
    return THRESHOLDS[key].value
