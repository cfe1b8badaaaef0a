"""NVTX ranges that a library pushes for its own calls: never a training step.

Read by ingest when it guesses the step range (:mod:`dlprof_lite.ingest.step_guess`): a guess
whose range is a library's own is refused, whatever its timing. Two kinds of evidence:

- the range's NVTX domain, which a library names itself (:data:`LIBRARY_DOMAINS`);
- the range's name where a library pushes into the default domain, or where an export lost
  the domain (a sliced export drops the domain-create events): :data:`LIBRARY_NAME_RE`.

Each entry cites where the name comes from; tests/test_guessed_steps.py tests every one on
names from the corpus exports or the cited sources.
"""

from __future__ import annotations

import re

# NVTX domain -> the library that names it so.
LIBRARY_DOMAINS = {
    # nsys --trace=cublas / cudnn record each API call as an NVTX range in these domains
    # (corpus: VerticalResearchGroup casio nerf, 107 'cublasSgemmEx' ranges in 'cuBLAS').
    "cuBLAS": "cuBLAS",
    "cuDNN": "cuDNN",
    # NCCL src/include/nvtx.h: struct nccl_domain { name{"NCCL"} }.
    "NCCL": "NCCL",
    # nsys --trace=mpi records MPI calls in the 'MPI' domain (corpus: pipit saxpy MPI_Send).
    "MPI": "MPI",
    # TensorRT's own ranges (ExecutionContext::enqueue, layer names) (corpus: trt-samples).
    "TensorRT": "TensorRT",
    # cudf cpp/include/cudf/detail/nvtx/ranges.hpp: struct libcudf_domain { name{"libcudf"} };
    # cudf python: @annotate(..., domain="cudf_python") (corpus: quasiben cudf null_count).
    "libcudf": "cuDF",
    "cudf_python": "cuDF",
    # rmm include/rmm/detail/nvtx/ranges.hpp: struct librmm_domain { name{"librmm"} }.
    "librmm": "RMM",
}

# Names a library pushes into the default domain (or that lost their domain):
# - cuBLAS / cuDNN / NCCL API calls by their C names (cublasSgemmEx, cudnnConvolutionForward,
#   ncclAllReduce, ncclGroupEnd: the corpus nsys-ai export lost its NCCL domain);
# - nvFuser: NVIDIA/Fuser csrc/instrumentation.h FUSER_PERF_SCOPE(name) pushes
#   nvtxRangePushA(name) in the default domain, named after the C++ scope
#   (FusionExecutorCache::runFusionWithInputs, FusionCache::get, KernelExecutor::runFusion,
#   GpuLower::lower, SegmentCandidateFinder; corpus: NVIDIA Fuser report1), and its Python
#   frontend's 'FusionDefinition ...' and 'Operators.<op>' ranges.
LIBRARY_NAME_RE = re.compile(
    r"^(?P<cublas>cublas(?:Lt)?[A-Z]\w*)$"
    r"|^(?P<cudnn>cudnn[A-Z]\w*)$"
    r"|^(?P<nccl>nccl[A-Z]\w*)$"
    r"|^(?P<nvfuser>(?:Fusion(?:ExecutorCache|KernelRuntime|Cache|Executor|Container"
    r"|Definition)?|KernelExecutor|ExprEvalExecutor|HostIrExecutor|ExecutorDispatch"
    r"|ExecutorRunFusion|GpuLower|SegmentCandidateFinder)(?:::|\.)|FusionDefinition "
    r"|Operators\.\w)"
)
_NAME_LIBRARIES = {"cublas": "cuBLAS", "cudnn": "cuDNN", "nccl": "NCCL", "nvfuser": "nvFuser"}


def library_of(name: str, domain: str) -> str | None:
    """The library whose own range this is (``cuBLAS``, ``nvFuser``...), else None."""
    known = LIBRARY_DOMAINS.get(domain)
    if known is not None:
        return known
    match = LIBRARY_NAME_RE.match(name)
    if match is None:
        return None
    return next(_NAME_LIBRARIES[k] for k, v in match.groupdict().items() if v is not None)
