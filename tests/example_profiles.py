"""The shared example profile: :func:`training_profile`, three steps of a two-layer model
built with :func:`builders.make_profile`, every number chosen so that the expected report
can be worked out by hand (see its docstring)."""

from __future__ import annotations

from builders import R, make_profile, phase
from dlprof_lite.ingest.profile import Profile


def _step(b: int, wall: int) -> list[R]:
    """One annotated training step starting at ``b`` (offsets below are from ``b``): the
    iteration and its phases are start/end ranges, the module ranges push/pop, so, as in a
    real export, each is a top-level range of its own."""
    return [
        phase("iteration", b, b + wall),
        phase("data", b, b + 200),
        phase("forward", b + 200, b + 800),
        R("fwd:fc1:Linear", b + 300, b + 450),
        R("fwd:act:ReLU", b + 450, b + 600),
        phase("backward", b + 800, b + 1600),
        R("bwd:fc1:Linear", b + 900, b + 1300),
        phase("optimizer", b + 1600, b + 1900),
    ]


def _step_ops(b: int, copy_gap: int) -> tuple[list[dict], list[dict]]:
    """Ops of one step. GPU times, from ``b``: copy 120-140, gemm 330-430, relu 530-550,
    sgemm 940-1140, adam 1630-1680. Host gaps: idle time before each op whose launch began
    after the previous op ended (190 = 330-140, 100 = 530-430, 390 = 940-550, 490 = 1630-1140).
    """
    kernels = [
        dict(name="sm90_xmma_gemm_bf16bf16_tn", tc=True, start_ns=b + 330, dur_ns=100,
             api_name="cudaLaunchKernel_v7000", api_start_ns=b + 310, api_end_ns=b + 320,
             host_gap_ns=190),
        dict(name="relu_kernel", start_ns=b + 530, dur_ns=20, api_name="cudaLaunchKernel_v7000",
             api_start_ns=b + 490, api_end_ns=b + 520, host_gap_ns=100),
        dict(name="sgemm_128x64_nt", start_ns=b + 940, dur_ns=200,
             api_name="cudaLaunchKernel_v7000", api_start_ns=b + 920, api_end_ns=b + 930,
             host_gap_ns=390),
        dict(name="adam_kernel", start_ns=b + 1630, dur_ns=50, api_name="cudaLaunchKernel_v7000",
             api_start_ns=b + 1610, api_end_ns=b + 1620, host_gap_ns=490),
    ]  # fmt: skip
    memops = [
        dict(kind="memcpy", copy_kind="HtoD", bytes=1_000_000, src_mem="pageable",
             dst_mem="device", start_ns=b + 120, dur_ns=20, api_name="cudaMemcpyAsync_v3020",
             api_start_ns=b + 100, api_end_ns=b + 110, host_gap_ns=copy_gap),
    ]  # fmt: skip
    return kernels, memops


def training_profile(**overrides) -> Profile:
    """Three steps of a Linear+ReLU model on one H100 (session 0-10000 ns).

    Iterations: 0 = [1000, 3000) warm-up, 1 = [3000, 5000), 2 = [5000, 8000); each step has
    ranges data 200 ns, forward 600 (fc1 150, act 150), backward 800 (fc1 400), optimizer
    300; GPU per step: copy 20 (data), gemm 100 TC (fc1 fwd), relu 20 (act fwd, launch
    call 30 > 20: a short launch), sgemm 200 (fc1 bwd, no TC), adam 50 (optimizer).
    Outside steps: a memset 500-510 (launched at 400), a synchronous DtoH copy 8150-8190 to
    pageable memory (host gap 8150-6680 = 1470), cudaStreamSynchronize 8000-8050 and a
    cudaDeviceSynchronize 4800-4900 inside step 1.
    Host gaps of each step's copy: 1120-510 = 610 (step 0), 440 = 3120-2680 (steps 1, 2).
    """
    kernels, memops = [], []
    for b, gap in ((1000, 610), (3000, 440), (5000, 440)):
        k, m = _step_ops(b, gap)
        kernels += k
        memops += m
    memops += [
        dict(kind="memset", bytes=4096, dst_mem="device", start_ns=500, dur_ns=10,
             api_name="cudaMemsetAsync_v3020", api_start_ns=400, api_end_ns=405),
        dict(kind="memcpy", copy_kind="DtoH", bytes=4096, src_mem="device", dst_mem="pageable",
             start_ns=8150, dur_ns=40, api_name="cudaMemcpy_v3020", api_start_ns=8100,
             api_end_ns=8200, host_gap_ns=1470),
    ]  # fmt: skip
    spec = dict(
        ranges=[*_step(1000, 2000), *_step(3000, 2000), *_step(5000, 3000)],
        kernels=kernels,
        memops=memops,
        api=[
            dict(name="cudaStreamSynchronize_v3020", start_ns=8000, end_ns=8050),
            dict(name="cudaDeviceSynchronize_v3020", start_ns=4800, end_ns=4900),
        ],
        iterations=[
            (1000, 3000, True, True),
            (3000, 5000, False, True),
            (5000, 8000, False, True),
        ],
    )
    spec.update(overrides)
    return make_profile(**spec)
