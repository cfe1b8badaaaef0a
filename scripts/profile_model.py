"""The training step that ``make_profile.py`` writes: kernel catalogue, model, timing model.

Test and benchmark tooling, outside the ``annotate → launch → ingest → report`` pipeline. A
``Template`` is one iteration on one thread as a flat list of CPU tokens (range push, range pop,
kernel launch, memcpy, sync) plus the GPU operations they launch; ``simulate`` draws the times
of many iterations at once with numpy. Range names follow ``dlprof_lite.rules.names``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlprof_lite.rules.names import ITERATION, PHASES, module_range

PUSH, POP, LAUNCH, COPY, SYNC = range(5)
# Per token kind, in units of 2 ns: CPU time before the token (lo, hi), API call length (lo, hi).
# fmt: off
COSTS = np.array([
    [150, 450, 0, 0],            # push: nvtx push overhead
    [100, 300, 0, 0],            # pop
    [750, 4_500, 1_250, 3_000],  # launch: Python between ops, cudaLaunchKernel
    [20_000, 100_000, 3_000, 7_000],  # memcpy: data loader wait, cudaMemcpyAsync
    [250, 750, 1_000, 1_000],    # sync: the wait for the GPU is added by simulate()
])
# fmt: on
COPY_NS = 42_000  # 1 MiB host-to-device at about 25 GB/s


@dataclass(frozen=True)
class Kernel:
    """One kernel of the catalogue: demangled name, bare name, Tensor Core flag, mean ns."""

    name: str
    short: str
    tc: bool
    ns: int
    grid: int = 256
    block: int = 128
    registers: int = 64


def _k(name: str, short: str | None, tc: bool, ns: int, grid: int = 256) -> Kernel:
    return Kernel(name, short or name, tc, ns, grid, 256 if tc else 128, 128 if tc else 48)


_ELEMWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::"
_XMMA = "_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage3_warpsize2x2x1_g1"
# Tensor Core flags by what each kernel does (HMMA/GMMA or not), never by a substring rule.
# fmt: off
CATALOG_BY_KEY: dict[str, Kernel] = {
    "conv_fprop": _k(f"sm80_xmma_fprop{_XMMA}_tensor16x8x16", None, True, 20_000),
    "conv_dgrad": _k(f"sm80_xmma_dgrad{_XMMA}_tensor16x8x16", None, True, 24_000),
    "conv_wgrad": _k(f"sm80_xmma_wgrad{_XMMA}_tensor16x8x16", None, True, 28_000),
    "gemm_xmma": _k("sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x32_stage4_"
                    "warpsize2x2x1_tensor16x8x16", None, True, 16_000),
    "gemm_ampere": _k("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
                      None, True, 14_000),
    "gemm_nvjet": _k("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", None, True, 12_000),
    "wino_data": _k("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>"
                    "(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
                    "winogradForwardData4x4", False, 9_000),
    "wino_out": _k("void cudnn::winograd_nonfused::winogradForwardOutput4x4<float, float>"
                   "(cudnn::winograd_nonfused::WinogradOutputParams<float, float>)",
                   "winogradForwardOutput4x4", False, 7_000),
    "sgemm_nn": _k("volta_sgemm_128x64_nn", None, False, 30_000),
    "sgemm_nt": _k("volta_sgemm_128x64_nt", None, False, 32_000),
    # FP32 SIMT kernels whose names look Tensor-Core-like (real names from the corpus notes).
    "xmma_ffma": _k("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x2x1_"
                    "ffma_aligna4_alignc4", None, False, 26_000),
    "simt": _k("cutlass_80_simt_sgemm_128x128_8x4_nn_align1", None, False, 28_000),
    "add": _k(f"{_ELEMWISE}CUDAFunctor_add<float>, at::detail::Array<char *, 3>>(int, T2, T3)",
              "vectorized_elementwise_kernel", False, 4_000, 1024),
    "relu": _k(f"{_ELEMWISE}(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase &, "
               "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda(float)#1}, "
               "at::detail::Array<char *, 2>>(int, T2, T3)",
               "vectorized_elementwise_kernel", False, 3_000, 1024),
    "relu_bwd": _k(f"{_ELEMWISE}(anonymous namespace)::threshold_kernel_impl<float>("
                   "at::TensorIteratorBase &, float, float)::{lambda(float, float)#1}, "
                   "at::detail::Array<char *, 3>>(int, T2, T3)",
                   "vectorized_elementwise_kernel", False, 3_600, 1024),
    "bn_fwd": _k("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>"
                 "(cudnnTensorStruct, const T1 *, cudnnTensorStruct, T1 *, const T2 *)",
                 "bn_fw_tr_1C11_kernel_NCHW", False, 6_000),
    "bn_bwd": _k("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>"
                 "(T1, T1, T1, T1, cudnnTensorStruct, const T2 *, cudnnTensorStruct)",
                 "bn_bw_1C11_kernel_new", False, 9_000),
    "reduce": _k("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
                 "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>>, "
                 "unsigned int, float, 4>>(T3)", "reduce_kernel", False, 5_000),
    "adam": _k("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
               "at::native::(anonymous namespace)::TensorListMetadata<4>, "
               "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>(T1, T2, T3...)",
               "multi_tensor_apply_kernel", False, 20_000, 320),
}
# fmt: on
CATALOG = list(CATALOG_BY_KEY.values())
_INDEX = {key: i for i, key in enumerate(CATALOG_BY_KEY)}

# (type, Tensor Core variant) -> forward kernels, backward kernels, forward op, backward node.
# fmt: off
LAYER_KINDS = {
    ("Conv2d", True): ("conv_fprop add", "conv_dgrad conv_wgrad reduce",
                       "aten::conv2d", "ConvolutionBackward0"),
    ("Conv2d", False): ("wino_data sgemm_nn wino_out", "sgemm_nt xmma_ffma reduce",
                        "aten::conv2d", "ConvolutionBackward0"),
    ("BatchNorm2d", False): ("bn_fwd", "bn_bwd", "aten::batch_norm", "CudnnBatchNormBackward0"),
    ("ReLU", False): ("relu", "relu_bwd", "aten::relu", "ReluBackward0"),
    ("Linear", True): ("gemm_nvjet gemm_ampere add", "gemm_xmma gemm_ampere reduce",
                       "aten::linear", "AddmmBackward0"),
    ("Linear", False): ("sgemm_nn add", "simt sgemm_nt reduce", "aten::linear", "AddmmBackward0"),
}
# fmt: on


@dataclass(frozen=True)
class Layer:
    """One module: qualified name, type, its kernels per direction (catalogue indices)."""

    name: str
    type: str
    tc: bool
    fwd: tuple[int, ...]
    bwd: tuple[int, ...]
    fwd_op: str
    bwd_op: str


def build_model(layers: int, kernels_per_layer: int) -> list[Layer]:
    """A CNN: ``features.N`` (Conv2d, BatchNorm2d, ReLU, ...) then ``classifier.N`` (Linear,
    ReLU, ...). Every third conv/linear layer runs non-Tensor-Core kernels."""
    n_feat = max(1, math.ceil(layers * 0.75)) if layers > 1 else 1
    out, eligible = [], 0
    for i in range(layers):
        if i < n_feat:
            name, typ = f"features.{i}", ("Conv2d", "BatchNorm2d", "ReLU")[i % 3]
        else:
            j = i - n_feat
            name, typ = f"classifier.{j}", ("Linear", "ReLU")[j % 2]
        tc = typ in ("Conv2d", "Linear") and eligible % 3 != 2
        eligible += typ in ("Conv2d", "Linear")
        fwd, bwd, fwd_op, bwd_op = LAYER_KINDS[(typ, tc)]
        pick = [[_INDEX[key] for key in keys.split()] for keys in (fwd, bwd)]
        f, b = ([ks[m % len(ks)] for m in range(kernels_per_layer)] for ks in pick)
        out.append(Layer(name, typ, tc, tuple(f), tuple(b), fwd_op, bwd_op))
    return out


@dataclass(frozen=True)
class Template:
    """One iteration on one thread: CPU tokens, GPU ops, ranges, and which ranges hold which op.

    Per token: ``kind``. Per GPU op: ``op_tok`` (its API call's token), ``op_api`` (index into
    ``api_tok``), ``op_cat`` (catalogue index, -1 for a memcpy), ``op_ns`` (mean duration),
    ``op_layer`` (-1 outside modules), ``op_dir`` (0 forward, 1 backward, -1), ``op_phase``
    (index into PHASES). Per range: ``range_push``/``range_pop`` tokens, ``range_name`` (index
    into ``vocab``). ``chain_op``/``chain_name``: every (op, enclosing range name) pair.
    """

    kind: np.ndarray
    api_tok: np.ndarray
    op_tok: np.ndarray
    op_api: np.ndarray
    op_cat: np.ndarray
    op_ns: np.ndarray
    op_layer: np.ndarray
    op_dir: np.ndarray
    op_phase: np.ndarray
    range_push: np.ndarray
    range_pop: np.ndarray
    range_name: np.ndarray
    chain_op: np.ndarray
    chain_name: np.ndarray
    vocab: list[str]
    vocab_registered: np.ndarray
    sync_tok: int
    sync_api: int
    stall_p: float

    @property
    def n_tokens(self) -> int:
        return len(self.kind)

    @property
    def n_kernels(self) -> int:
        return int((self.op_cat >= 0).sum())


class _Builder:
    """Collects the tokens of one iteration in CPU order, tracking the open ranges."""

    def __init__(self) -> None:
        self.cols: dict[str, list[int]] = {name: [] for name in (
            "kind", "op_tok", "op_cat", "op_layer", "op_dir", "op_phase", "range_push",
            "range_pop", "range_name", "chain_op", "chain_name")}  # fmt: skip
        self.vocab: dict[str, int] = {}  # range name -> index
        self.registered: list[bool] = []  # per name: StringIds (nvtx package) or inline text
        self.open: list[int] = []

    def push(self, name: str, registered: bool = True) -> None:
        c = self.cols
        if name not in self.vocab:
            self.vocab[name] = len(self.vocab)
            self.registered.append(registered)
        self.open.append(len(c["range_push"]))
        c["range_push"].append(len(c["kind"]))
        c["range_pop"].append(-1)
        c["range_name"].append(self.vocab[name])
        c["kind"].append(PUSH)

    def pop(self) -> None:
        self.cols["range_pop"][self.open.pop()] = len(self.cols["kind"])
        self.cols["kind"].append(POP)

    def op(self, kind: int, cat: int, layer: int, direction: int, phase: int) -> None:
        c = self.cols
        for r in self.open:
            c["chain_op"].append(len(c["op_tok"]))
            c["chain_name"].append(c["range_name"][r])
        c["op_tok"].append(len(c["kind"]))
        c["kind"].append(kind)
        for col, value in (("op_cat", cat), ("op_layer", layer), ("op_dir", direction),
                           ("op_phase", phase)):  # fmt: skip
            c[col].append(value)

    def build(self, stall_p: float) -> Template:
        a = {name: np.asarray(col, dtype=np.int64) for name, col in self.cols.items()}
        api_tok = np.flatnonzero(a["kind"] >= LAUNCH)
        sync_tok = int(np.flatnonzero(a["kind"] == SYNC)[0])
        cat_ns = np.array([k.ns for k in CATALOG] + [COPY_NS])  # op_cat -1 picks COPY_NS
        return Template(
            **a, api_tok=api_tok, op_api=np.searchsorted(api_tok, a["op_tok"]),
            op_ns=cat_ns[a["op_cat"]], vocab=list(self.vocab),
            vocab_registered=np.array(self.registered, dtype=bool),
            sync_tok=sync_tok, sync_api=int(np.searchsorted(api_tok, sync_tok)), stall_p=stall_p,
        )  # fmt: skip


def build_template(model: list[Layer], *, per_kernel_ranges: bool, optimizer_kernels: int,
                   memcpy: bool, stall_probability: float) -> Template:  # fmt: skip
    """iteration ⊃ phase ⊃ module ⊃ (emit_nvtx op range) ⊃ launch, then a stream sync.

    Op ranges are inline text in the default domain, as ``emit_nvtx`` writes them; backward
    nodes carry their forward op's sequence number. Sequence numbers restart every iteration
    so that the number of distinct range names stays bounded.
    """
    t = _Builder()

    def launch(cat: int, layer: int, direction: int, phase: int, op_name: str | None) -> None:
        if per_kernel_ranges and op_name:
            t.push(op_name, registered=False)
        t.op(LAUNCH if cat >= 0 else COPY, cat, layer, direction, phase)
        if per_kernel_ranges and op_name:
            t.pop()

    t.push(ITERATION)
    t.push(PHASES[0])
    if memcpy:
        launch(-1, -1, -1, 0, "aten::copy_")
    t.pop()
    for phase, direction in ((1, 0), (2, 1)):
        t.push(PHASES[phase])
        order = range(len(model)) if direction == 0 else reversed(range(len(model)))
        for li in order:
            layer = model[li]
            t.push(module_range(("fwd", "bwd")[direction], layer.name, layer.type))
            for m, cat in enumerate(layer.bwd if direction else layer.fwd):
                seq = 1 + sum(len(x.fwd) for x in model[:li]) + m % len(layer.fwd)
                op = layer.bwd_op if direction else layer.fwd_op
                launch(cat, li, direction, phase, f"{op}, seq = {seq}")
            t.pop()
        t.pop()
    t.push(PHASES[3])
    for _ in range(optimizer_kernels):
        launch(_INDEX["adam"], -1, -1, 3, "aten::_fused_adam_")
    t.pop()
    t.cols["kind"].append(SYNC)
    t.pop()
    return t.build(stall_probability)


def simulate(tpl: Template, n: int, rng: np.random.Generator,
             clock: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Absolute CPU token times and GPU op times of ``n`` iterations starting at ``clock``.

    Each op is ready a launch latency after its API call returns and runs when the stream is
    free: ``end_i = S_i + max_{j<=i}(ready_j - S_{j-1})`` with ``S`` the running sum of
    durations, a prefix maximum per iteration (the sync empties the stream in between).
    """
    k = tpl.kind
    pre = 2 * rng.integers(COSTS[k, 0], COSTS[k, 1] + 1, size=(n, tpl.n_tokens))
    stall = rng.random((n, tpl.n_tokens)) < tpl.stall_p * (k == LAUNCH)
    pre += stall * (2 * rng.integers(10_000, 60_000, size=(n, tpl.n_tokens)))
    api = 2 * rng.integers(COSTS[k, 2], COSTS[k, 3] + 1, size=(n, tpl.n_tokens))
    cpu_end = np.cumsum(pre + api, axis=1)
    cpu_start = cpu_end - api
    ready = cpu_end[:, tpl.op_tok] + 2 * rng.integers(500, 1500, size=(n, len(tpl.op_tok))) + 1
    dur = 2 * np.round(tpl.op_ns * rng.uniform(0.8, 1.25, size=ready.shape) / 2).astype(np.int64)
    fin = np.cumsum(dur, axis=1)
    gpu_end = fin + np.maximum.accumulate(ready - (fin - dur), axis=1)
    s = tpl.sync_tok  # the sync returns once the GPU is done; later tokens move by the wait
    wait = np.maximum(0, gpu_end[:, -1] + 2 * rng.integers(500, 1500, size=n) + 1 - cpu_end[:, s])
    cpu_end[:, s:] += wait[:, None]
    cpu_start[:, s + 1 :] += wait[:, None]
    length = cpu_end[:, -1] + 2 * rng.integers(1_000, 4_000, size=n)
    base = (clock + np.concatenate(([0], np.cumsum(length)[:-1])))[:, None]
    return {"cpu_start": cpu_start + base, "cpu_end": cpu_end + base, "dur": dur,
            "gpu_start": gpu_end - dur + base, "gpu_end": gpu_end + base,
            "next_clock": np.int64(base[-1, 0] + length[-1])}  # fmt: skip


def host_gaps(start: np.ndarray, end: np.ndarray, launch: np.ndarray,
              prev_end: int | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Idle ns before each op of one device (ops sorted by start) and its host-bound part:
    the idle time of ops whose launch call started after the previous GPU operation ended."""
    last = np.maximum.accumulate(end)
    first = start[0] if prev_end is None else prev_end
    before = np.maximum(np.concatenate(([first], last[:-1])), first)
    idle = np.maximum(start - before, 0)
    return idle, np.where(launch > before, idle, 0)
