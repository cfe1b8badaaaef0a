"""What each layer ran (report/layers/kernels.py): kernels and their shares, device, input
shapes and dtypes, and Tensor Core use inferred from the dtype where names cannot tell.

Oracles: hand-built fixtures with round numbers (shares, device, inference), the Tensor
Core rule table itself for each kernel's verdict (a Triton name must stay ``unknown``), a
real nsys profile of a small CPU script whose shapes and dtypes are fixed by the script, and
the corpus exports re-counted row by row in plain Python.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pytest

from builders import (
    R,
    build_gpus,
    build_iterations,
    build_kernels,
    build_marks,
    build_ranges,
    fact_mark,
)
from dlprof_lite.ingest.facts import facts_of
from dlprof_lite.ingest.tensorcore import classify_names_with_rules
from dlprof_lite.report.layers.kernels import (
    LAYER_KERNEL_COLUMNS,
    TC_INFERRED,
    display_name,
    layer_implementations,
)
from dlprof_lite.report.run_facts import module_facts
from dlprof_lite.rules.gemm import mma_capable, mma_input_type, unknown_is_matmul

A100 = (0, "NVIDIA A100-SXM4-80GB", 108, 8, 0)
T4 = (0, "Tesla T4", 40, 7, 5)
UNKNOWN_GPU = (0, "NVIDIA A100-PCIE-40GB", 0, 0, 0)  # as the casio export records device 0

TRITON_MM = "triton_tem_fused_addmm_0"
CUTLASS_TC = "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x128_tn>(T1::Params)"


def kernel(name: str, start: int, dur: int, **extra: object) -> dict:
    """A kernel spec whose Tensor Core verdict comes from the real rule table."""
    (verdict,), (rule,) = classify_names_with_rules([name])
    return dict(name=name, start_ns=start, dur_ns=dur, tc_class=verdict, tc_rule=rule, **extra)


def module(layer: str, type_name: str, t: int, **fields: object) -> dict:
    """A ``module`` fact mark as the annotation writes it (defaults: float32 on CUDA)."""
    value = dict(layer=layer, type=type_name, in_shape="8x64", dtype="float32",
                 param_dtype="float32", autocast=None, tf32=False, tf32_conv=False,
                 device="cuda")  # fmt: skip
    return fact_mark("module", {**value, **fields}, t)


def implementations(
    ranges: list[R], kernels: list[dict], marks: list[dict], gpu: tuple = A100, layers=()
) -> pd.DataFrame:
    r = build_ranges(ranges)
    k = build_kernels(kernels, r, build_iterations([]))
    out = layer_implementations(k, facts_of(build_marks(marks)), build_gpus([gpu]), layers)
    assert list(out.columns) == list(LAYER_KERNEL_COLUMNS)
    assert out["layer"].is_unique
    return out.set_index("layer")


# --- shares and names --------------------------------------------------------------------


def test_top_three_kernels_with_shares_of_the_layers_gpu_time() -> None:
    """fc1 ran 1000 ns: a CUTLASS tensorop GEMM 800 (two launches), elementwise 150,
    a reduction 40, a copy 10: three listed with their shares and verdicts, one more."""
    ranges = [R("fwd:model:Net", 0, 10_000, [R("fwd:fc1:Linear", 100, 5000)])]
    kernels = [
        kernel(CUTLASS_TC, 200, 600),
        kernel(CUTLASS_TC, 1200, 200),
        kernel("void at::native::vectorized_elementwise_kernel<4, AddFunctor>()", 1500, 150,
               short_name="vectorized_elementwise_kernel"),
        kernel("void at::native::reduce_kernel<512, 1>()", 1700, 40, short_name="reduce_kernel"),
        kernel("void at::native::copy_kernel()", 1800, 10, short_name="copy_kernel"),
    ]  # fmt: skip
    kernels[0]["short_name"] = kernels[1]["short_name"] = "Kernel"
    fc1 = implementations(ranges, kernels, []).loc["fc1"]
    assert fc1["distinct_kernels"] == 4
    assert fc1["top_kernels"] == (
        "Kernel<cutlass_80_tensorop_bf16_s16816gemm_bf16… 80% tc; "
        "vectorized_elementwise_kernel 15% no tc; reduce_kernel 4% no tc; +1 more"
    )
    assert fc1["device"] == "gpu" and fc1["tc_inferred"] is None


def test_display_names() -> None:
    assert display_name("void foo<int>(int)", "foo") == "foo"
    assert display_name("cutlass::device_kernel<Gemm<float>>", "device_kernel") == (
        "device_kernel<Gemm>"
    )
    long = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1"
    shown = display_name(long, long)
    assert len(shown) == 48 and shown.endswith("…") and long.startswith(shown[:-1])


def test_layers_without_kernels_have_no_shares() -> None:
    out = implementations([R("fwd:act:ReLU", 0, 100)], [], [module("act", "ReLU", 10)])
    assert out.loc["act", "distinct_kernels"] == 0 and out.loc["act", "top_kernels"] is None


# --- device ------------------------------------------------------------------------------


def test_wrapper_column_from_the_module_facts() -> None:
    """The wrappers a layer's model ran in, from its fact; empty without one (a fact written
    before the field existed, or a layer with no fact)."""
    ranges = [R("fwd:model:Net", 0, 1000, [R("fwd:fc:Linear", 100, 500)]),
              R("fwd:old:Net", 2000, 3000)]  # fmt: skip
    marks = [module("model", "Net", 1, wrapper="DistributedDataParallel, Lightning"),
             module("fc", "Linear", 101, wrapper="DistributedDataParallel, Lightning"),
             module("old", "Net", 2001)]  # fmt: skip
    out = implementations(ranges, [], marks, layers=["model", "fc", "old", "none"])
    assert out["wrapper"].to_dict() == {"model": "DistributedDataParallel, Lightning",
                                        "fc": "DistributedDataParallel, Lightning",
                                        "old": None, "none": None}  # fmt: skip


def test_device_from_kernels_and_recorded_device() -> None:
    """model holds fc1 (kernels) and flat (a view: no kernels, CUDA inputs): both GPU, and so
    is the container without kernels of its own; emb got CPU inputs and launched a copy
    (mixed); cpu_head ran on the CPU; old is a layer with wall time and neither fact nor
    kernels (a profile annotated before facts): no GPU work, cpu."""
    ranges = [
        R("fwd:model:Net", 0, 10_000, [
            R("fwd:emb:Embedding", 100, 900),
            R("fwd:fc1:Linear", 1000, 2000),
            R("fwd:flat:Flatten", 2000, 2100),
        ]),
        R("fwd:cpu_head:Linear", 11_000, 12_000),
    ]  # fmt: skip
    kernels = [
        kernel("void at::native::copy_kernel()", 500, 50, short_name="copy_kernel"),
        kernel("ampere_sgemm_128x64_tn", 1100, 300),
    ]
    marks = [
        module("model", "Net", 1, param_dtype=None),
        module("emb", "Embedding", 101, dtype="int64", device="cpu"),
        module("fc1", "Linear", 1001),
        module("flat", "Flatten", 2001, param_dtype=None),
        module("cpu_head", "Linear", 11_001, device="cpu"),
    ]
    out = implementations(ranges, kernels, marks, layers=["old"])
    assert out["device"].to_dict() == {
        "model": "gpu", "emb": "mixed", "fc1": "gpu", "flat": "gpu", "cpu_head": "cpu",
        "old": "cpu",
    }  # fmt: skip
    assert out.loc["model", "distinct_kernels"] == 0  # its own kernels: its children's are theirs


def test_device_without_facts_comes_from_kernels_inside_the_layer() -> None:
    ranges = [R("fwd:model:Net", 0, 1000, [R("fwd:fc1:Linear", 100, 500)]),
              R("fwd:idle:Identity", 2000, 2100)]  # fmt: skip
    out = implementations(ranges, [kernel("ampere_sgemm_64x64_nn", 200, 100)], [],
                          layers=["model", "fc1", "idle"])  # fmt: skip
    assert out["device"].to_dict() == {"fc1": "gpu", "model": "gpu", "idle": "cpu"}


# --- shapes and dtypes -------------------------------------------------------------------


def test_compute_dtype_autocast_for_matmul_layers_else_parameters_else_input() -> None:
    marks = [
        module("fc", "Linear", 1, autocast="bfloat16"),
        module("norm", "LayerNorm", 2, autocast="bfloat16", dtype="bfloat16"),
        module("act", "ReLU", 3, autocast="bfloat16", dtype="bfloat16", param_dtype=None),
        module("half", "Linear", 4, dtype="float16", param_dtype="float16"),
        module("emb", "Embedding", 5, dtype="int64", in_shape="8x128"),
        module("f64", "Linear", 6, autocast="bfloat16", dtype="float64", param_dtype="float64"),
    ]
    out = implementations([], [], marks)
    assert out["dtype"].to_dict() == {"fc": "bfloat16", "norm": "float32", "act": "bfloat16",
                                      "half": "float16", "emb": "float32",
                                      "f64": "float64"}  # fmt: skip
    assert out.loc["emb", "in_dtype"] == "int64" and out.loc["emb", "in_shape"] == "8x128"


def test_first_fact_of_a_layer_wins_and_foreign_marks_are_ignored() -> None:
    marks = build_marks([
        module("fc", "Linear", 10, in_shape="8x64"),
        module("fc", "Linear", 20, in_shape="16x64"),
        dict(start_ns=5, name='fact:{"module": {"layer": "x"}}', domain="other", pid=1, tid=10),
        dict(start_ns=6, name="fact:{not json", domain="dlprof-lite", pid=1, tid=10),
    ])  # fmt: skip
    facts = module_facts(facts_of(marks))
    assert facts["layer"].tolist() == ["fc"] and facts["in_shape"].tolist() == ["8x64"]


# --- Tensor Cores inferred ---------------------------------------------------------------

_LINEAR = [R("fwd:fc:Linear", 0, 1000)]


def _inferred(gpu: tuple, name: str = TRITON_MM, type_name: str = "Linear", **fact) -> object:
    ranges = [R(f"fwd:fc:{type_name}", 0, 1000)]
    out = implementations(ranges, [kernel(name, 100, 500)], [module("fc", type_name, 1, **fact)],
                          gpu=gpu)  # fmt: skip
    return out.loc["fc", "tc_inferred"]


def test_triton_matmul_in_bf16_on_an_sm80_gpu_is_inferred_tensor_core() -> None:
    (verdict,), _ = classify_names_with_rules([TRITON_MM])
    assert verdict == "unknown"  # the name cannot tell: what the inference is for
    out = implementations(_LINEAR, [kernel(TRITON_MM, 100, 500)],
                          [module("fc", "Linear", 1, autocast="bfloat16")])  # fmt: skip
    assert out.loc["fc", "tc_inferred"] == TC_INFERRED
    assert out.loc["fc", "top_kernels"] == f"{TRITON_MM} 100% tc?"  # the name verdict stays


@pytest.mark.parametrize(
    ("gpu", "fact", "expected"),
    [
        (T4, dict(autocast="bfloat16"), None),  # BF16 MMA needs sm_80
        (T4, dict(autocast="float16"), TC_INFERRED),  # FP16 MMA from sm_70
        (A100, dict(dtype="float8_e4m3fn", param_dtype="float8_e4m3fn"), None),  # FP8: sm_89
        ((0, "NVIDIA H100", 132, 9, 0), dict(param_dtype="float8_e4m3fn"), TC_INFERRED),
        (A100, dict(tf32=False), None),  # FP32 matmuls without TF32: CUDA cores
        (A100, dict(tf32=True), TC_INFERRED),
        (T4, dict(tf32=True), None),  # TF32 needs sm_80
        (A100, dict(param_dtype="float64", dtype="float64", tf32=True), None),
        (UNKNOWN_GPU, dict(autocast="bfloat16"), None),  # compute capability not recorded
    ],
)
def test_inference_needs_the_dtype_and_the_gpu(gpu: tuple, fact: dict, expected: object) -> None:
    assert _inferred(gpu, **fact) == expected


def test_no_inference_without_a_reason_to() -> None:
    # a name the rules settle: its verdict stands and nothing is inferred
    assert _inferred(A100, name=CUTLASS_TC, autocast="bfloat16") is None
    assert _inferred(A100, name="ampere_sgemm_128x64_tn", autocast="bfloat16") is None
    # not a matmul-class layer, and no name that says matmul (an Inductor foreach kernel)
    foreach = "triton_for_fused_0"
    assert _inferred(A100, name=foreach, type_name="ReLU", autocast="bfloat16") is None
    # conv in float32: cuDNN's TF32 switch decides, not the matmul one
    assert _inferred(A100, type_name="Conv2d", tf32=True) is None
    assert _inferred(A100, type_name="Conv2d", tf32_conv=True) == TC_INFERRED
    assert _inferred(A100, type_name="Linear", tf32_conv=True) is None
    assert _inferred(A100, type_name="Conv2d", autocast="float16") == TC_INFERRED
    # an XLA fusion and a bare CUTLASS kernel cannot tell either
    assert _inferred(A100, name="fusion_4", param_dtype="bfloat16") == TC_INFERRED
    assert _inferred(A100, name="cutlass::Kernel", param_dtype="float16") == TC_INFERRED
    # no fact (an older profile, emit_nvtx): dtype unknown, no inference
    out = implementations(_LINEAR, [kernel(TRITON_MM, 100, 500)], [])
    assert out.loc["fc", "tc_inferred"] is None and out.loc["fc", "dtype"] is None


def test_compiled_model_gemm_templates_are_inferred_from_the_models_autocast() -> None:
    """Under torch.compile only the root model has ranges: its Inductor mm template kernels
    (triton_tem_) are matmuls by name, so the root's autocast dtype settles them; its
    pointwise kernels are CUDA-core by name and are never inferred."""
    ranges = [R("fwd:model:GPT", 0, 10_000)]
    fact = module("model", "GPT", 1, dtype="int64", param_dtype=None, autocast="bfloat16")
    kernels = [kernel("triton_tem_fused_addmm_gelu_0", 100, 700),
               kernel("triton_poi_fused_add_1", 900, 300)]  # fmt: skip
    out = implementations(ranges, kernels, [fact])
    assert out.loc["model", "tc_inferred"] == TC_INFERRED
    assert out.loc["model", "dtype"] == "int64"  # its own input: token ids
    assert out.loc["model", "top_kernels"] == (
        "triton_tem_fused_addmm_gelu_0 70% tc?; triton_poi_fused_add_1 30% no tc"
    )
    pointwise_only = implementations(ranges, kernels[1:], [fact])
    assert pointwise_only.loc["model", "tc_inferred"] is None
    no_autocast = implementations(ranges, kernels, [{**fact, "name": fact["name"].replace(
        '"autocast":"bfloat16"', '"autocast":null')}])  # fmt: skip
    assert no_autocast.loc["model", "tc_inferred"] is None  # int64 input, no parameters


@pytest.mark.parametrize(
    ("name", "matmul"),
    [
        ("_decode_paged_kernel", True),  # vLLM's Triton paged-attention decode (tc_kernels.tsv)
        ("triton_tem_fused_addmm_0", True),  # Inductor template category: mm/conv/attention
        ("triton__0d1d23d", False),  # older Triton names: nothing to tell (tc_kernels.tsv)
        ("triton_unk_fused_addmm_gelu_native_dropout", False),  # category unknown to Inductor
        ("fusion_4", False),  # an XLA fusion may be elementwise only
    ],
)
def test_unknown_names_that_say_matmul(name: str, matmul: bool) -> None:
    (verdict,), (rule,) = classify_names_with_rules([name])
    assert verdict == "unknown" and unknown_is_matmul(name, rule) is matmul


def test_mma_input_types() -> None:
    assert [mma_input_type(d, False) for d in ("float16", "bfloat16", "float8_e5m2")] == [
        "fp16", "bf16", "fp8"]  # fmt: skip
    assert mma_input_type("float32", True) == "tf32" and mma_input_type("float32", False) is None
    assert mma_input_type("float64", True) is None and mma_input_type(None, True) is None
    assert mma_capable("fp16", (7, 0)) and not mma_capable("bf16", (7, 5))
    assert mma_capable("fp8", (8, 9)) and not mma_capable("fp8", (8, 6))


# --- real data ---------------------------------------------------------------------------

SCRIPT = """
import torch
from torch import nn

model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
head = nn.Linear(10, 4).to(torch.float64)
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01)
for step in range(3):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = head(model(torch.randn(2, 3, 8, 8)).double())  # autocast leaves float64 alone
    out.sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_shapes_and_dtypes_from_a_real_profile(nsys: str, tmp_path: Path) -> None:
    """A real ``nsys profile`` of a CPU script through the product's launcher: the shapes
    and dtypes the script fixes (a bf16-autocast conv net, a float64 head) come back; the
    head ran under autocast too, which leaves float64 matmuls in float64."""
    pytest.importorskip("torch")
    import dlprof_lite
    from dlprof_lite.launch import profile_program

    script = tmp_path / "net.py"
    script.write_text(SCRIPT, encoding="utf-8")
    run = profile_program([sys.executable, str(script)], out_dir=tmp_path / "out", nsys=nsys,
                          echo=False, timeout=300)  # fmt: skip
    profile = dlprof_lite.load(run.sqlite_path)
    out = layer_implementations(profile.kernels, profile.facts, profile.gpus).set_index("layer")
    rows = out[["in_shape", "in_dtype", "dtype"]].apply(tuple, axis=1).to_dict()
    assert rows == {
        "model": ("2x3x8x8", "float32", "float32"),
        "0": ("2x3x8x8", "float32", "bfloat16"),  # Conv2d under bf16 autocast
        "1": ("2x8x6x6", "bfloat16", "bfloat16"),
        "2": ("2x8x6x6", "bfloat16", "bfloat16"),
        "3": ("2x288", "bfloat16", "bfloat16"),
        "head": ("2x10", "float64", "float64"),
    }
    assert module_facts(profile.facts).set_index("layer").loc["head", "autocast"] == "bfloat16"
    assert set(out["device"]) == {"cpu"} and (out["distinct_kernels"] == 0).all()
    assert out["top_kernels"].isna().all() and out["tc_inferred"].isna().all()


def _recount(kernels: pd.DataFrame) -> dict[str, tuple[int, float]]:
    """Per layer, row by row: distinct kernel names and the largest name's share."""
    names: dict[str, set[str]] = defaultdict(set)
    time: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for layer, name, short, dur in zip(kernels["layer"], kernels["name"], kernels["short_name"],
                                       kernels["dur_ns"], strict=True):  # fmt: skip
        if isinstance(layer, str):
            names[layer].add(name)
            time[layer][display_name(name, short)] += int(dur)
    return {layer: (len(names[layer]), max(t.values()) / sum(t.values()))
            for layer, t in time.items()}  # fmt: skip


MFU_2GPU = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"


@pytest.mark.corpus
@pytest.mark.parametrize(
    "export",
    ["MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite",
     MFU_2GPU],
)  # fmt: skip
def test_corpus_layers_recounted(corpus_dir: Path, export: str) -> None:
    import dlprof_lite

    profile = dlprof_lite.load(corpus_dir / export)
    out = layer_implementations(profile.kernels, profile.facts, profile.gpus).set_index("layer")
    expected = _recount(profile.kernels)
    assert expected and set(out.index) == set(expected)
    for layer, (distinct, top) in expected.items():
        row = out.loc[layer]
        assert row["distinct_kernels"] == distinct, layer
        share = re.search(r" (<1%|\d+%) ", row["top_kernels"].split("; ")[0])
        assert share is not None and share[1] == _pct(top), (layer, row["top_kernels"])
        assert row["device"] == "gpu" and row["tc_inferred"] is None  # no facts: no inference


def _pct(share: float) -> str:
    return "<1%" if share < 0.005 else f"{share * 100:.0f}%"


@pytest.mark.corpus
def test_corpus_name_verdicts_kept(corpus_dir: Path) -> None:
    """The 2x H100 slice: cuBLASLt nvjet GEMMs are Tensor Core by name, FlashAttention too;
    ncclDevKernel and elementwise kernels are not."""
    import dlprof_lite

    profile = dlprof_lite.load(corpus_dir / MFU_2GPU)
    out = layer_implementations(profile.kernels, profile.facts, profile.gpus).set_index("layer")
    addmm = out.loc["aten::addmm", "top_kernels"].split("; ")
    assert all(part.startswith("nvjet_") and part.endswith("% tc") for part in addmm)
    assert out.loc["FlashAttnFunc", "top_kernels"] == "flash_fwd_kernel 100% tc"
    assert "ncclDevKernel_SendRecv" in out.loc["AllToAll4D", "top_kernels"]
    assert all(p.endswith("no tc") for p in out.loc["AllToAll4D", "top_kernels"].split("; "))
