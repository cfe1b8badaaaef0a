"""Layers, directions and phases (ingest/layers.py) from all three layer sources.

Hand-built ``ranges`` and kernels with round numbers (``range_id`` set as the correlate step
would: the innermost range the launch started in), and the real DLProf export of the corpus.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from builders import START_END, ops, query_frame, ranges
from dlprof_lite.ingest.columns import used_categorical
from dlprof_lite.ingest.layers import (
    _levels,
    _nearest,
    _nearest_many,
    assign_layers,
    classify_range_names,
    label_ranges,
)
from dlprof_lite.rules.gemm import is_tc_eligible, tc_eligible_family
from dlprof_lite.rules.names import DIRECTIONS, ModuleRange, parse_module_range
from dlprof_lite.rules.payloads import layer_from_funcstack

NA = pd.NA
OURS = {"domain": "dlprof-lite"}


def gpu_ops(table: str, rng: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """Contract-shaped kernels or memops (:func:`builders.ops`); each row gives ``range_id``
    (or None), ``tid``, ``api_start_ns``; ``range_path`` is looked up as the correlate step
    would."""
    paths = dict(zip(rng["range_id"], rng["path"].astype(object), strict=True))
    full = []
    for row in rows:
        rec = {"tid": 1, "api_name": "cudaLaunchKernel", "range_id": None, **row}
        launch = rec["api_start_ns"]
        rec.update(api_end_ns=launch + 1, start_ns=launch + 2, end_ns=10**6)
        rec["range_path"] = paths.get(rec["range_id"]) if rec["range_id"] is not None else NA
        full.append(rec)
    return ops(table, full, range_id=None, range_path=NA)


def labels(frame: pd.DataFrame) -> list[tuple]:
    """(layer, layer_type, direction, phase) per op, <NA> as None."""
    cols = frame[["layer", "layer_type", "direction", "phase"]].astype(object)
    return [tuple(None if pd.isna(v) else v for v in row) for row in cols.itertuples(index=False)]


def no_ops(rng: pd.DataFrame) -> pd.DataFrame:
    return gpu_ops("memops", rng, [])


# --- (a) our annotation: module ranges and phases ---------------------------------------


def annotated() -> pd.DataFrame:
    auto = {**OURS, "tid": 2}  # autograd's backward thread: no phase range there
    se = {**OURS, "style": START_END}  # iteration and phases: start/end, top-level
    return ranges(
        [
            ("iteration", 0, 1000, -1, se),  # 0
            ("data", 0, 100, -1, se),  # 1
            ("forward", 100, 400, -1, se),  # 2
            ("fwd:model:Net", 110, 390, -1, OURS),  # 3
            ("fwd:conv1:Conv2d", 120, 200, 3, OURS),  # 4
            ("fwd:fc:Linear", 210, 300, 3, OURS),  # 5
            ("backward", 400, 800, -1, se),  # 6
            ("bwd:fc:Linear", 450, 550, -1, auto),  # 7
            ("bwd:conv1:Conv2d", 560, 700, -1, auto),  # 8
            ("optimizer", 800, 1000, -1, se),  # 9
            # "forward" in the default domain is somebody else's range, not a phase.
            ("forward", 1200, 1300, -1),  # 10
        ]
    )


def test_annotation_layers_directions_and_phases() -> None:
    rng = annotated()
    kernels = gpu_ops("kernels", rng, [
        {"range_id": 1, "api_start_ns": 50},  # data phase, no module
        {"range_id": 4, "api_start_ns": 150},  # conv1 forward
        {"range_id": 3, "api_start_ns": 205},  # the root module's own op
        {"range_id": 5, "api_start_ns": 250},  # fc forward
        {"range_id": 7, "api_start_ns": 500, "tid": 2},  # fc backward, autograd thread
        {"range_id": 8, "api_start_ns": 600, "tid": 2},  # conv1 backward
        # Autograd thread, in no range (AccumulateGrad): 750 is inside the span of the
        # main thread's backward phase (400..800) in the same process -> backward.
        {"range_id": None, "api_start_ns": 750, "tid": 2},
        {"range_id": 9, "api_start_ns": 900},  # optimizer
        {"range_id": 6, "api_start_ns": 420},  # backward phase, launched on the main thread
        {"range_id": None, "api_start_ns": 1100, "tid": 3},  # no range, no phase span
        {"range_id": 10, "api_start_ns": 1250},  # a foreign "forward" range: other
        # pid 2 at 750: the backward span is pid 1's, so no phase for it.
        {"range_id": None, "api_start_ns": 750, "pid": 2},
    ])  # fmt: skip
    memops = gpu_ops("memops", rng, [{"range_id": 1, "api_start_ns": 60}])
    k, m = assign_layers(kernels, memops, rng)
    none = (None, None, None)
    assert labels(k) == [
        (*none, "data"),
        ("conv1", "Conv2d", "forward", "forward"),
        ("model", "Net", "forward", "forward"),
        ("fc", "Linear", "forward", "forward"),
        ("fc", "Linear", "backward", "backward"),
        ("conv1", "Conv2d", "backward", "backward"),
        (*none, "backward"), (*none, "optimizer"), (*none, "backward"),
        (*none, "other"), (*none, "other"), (*none, "other"),
    ]  # fmt: skip
    assert labels(m) == [(None, None, None, "data")]
    for col in ("layer", "layer_type", "direction", "phase"):
        assert isinstance(k[col].dtype, pd.CategoricalDtype)
    assert k["phase"].cat.categories.tolist() == [
        "data", "forward", "backward", "optimizer", "compile", "other",
    ]  # fmt: skip
    assert k["direction"].cat.categories.tolist() == ["forward", "backward", "recompute"]
    assert "layer" not in kernels.columns  # inputs untouched


def test_parse_module_range() -> None:
    conv = ModuleRange("forward", "layer1.0.conv1", "Conv2d")
    assert parse_module_range("fwd:layer1.0.conv1:Conv2d") == conv
    assert tuple(parse_module_range("bwd:model:ResNet")) == ("backward", "model", "ResNet")
    assert parse_module_range("forward") is None
    recompute = ("recompute", "student.fc", "Linear")
    assert tuple(parse_module_range("rec:student.fc:Linear")) == recompute
    assert parse_module_range("fwd:a:b:c") is None


def checkpointed() -> pd.DataFrame:
    """Activation checkpointing of ``block``: its forward runs again inside the backward on
    autograd's thread (tid 2), as ``rec:`` (new annotation) and as ``fwd:`` inside a ``bwd:``
    range (profiles made before ``rec:`` existed); two roots, ``student`` and ``teacher``."""
    auto = {**OURS, "tid": 2}
    return ranges(
        [
            ("forward", 0, 500, -1, OURS),  # 0
            ("fwd:student:Net", 10, 400, 0, OURS),  # 1
            ("fwd:student.block:Block", 20, 300, 1, OURS),  # 2
            ("fwd:student.block.fc:Linear", 30, 200, 2, OURS),  # 3
            ("fwd:teacher.block.fc:Linear", 410, 490, 0, OURS),  # 4
            ("backward", 500, 1500, -1, OURS),  # 5
            ("bwd:student.block:Block", 700, 1400, -1, auto),  # 6
            ("rec:student.block.fc:Linear", 710, 900, 6, auto),  # 7
            ("bwd:student.block.fc:Linear", 900, 1000, 6, auto),  # 8
            ("fwd:student.block.fc:Linear", 1010, 1200, 6, auto),  # 9: old-style recompute
            ("fwd:student.block.act:ReLU", 1050, 1100, 9, auto),  # 10: nested, too
        ]
    )


def test_recompute_ranges_are_neither_forward_nor_another_layers_backward() -> None:
    rng = checkpointed()
    kernels = gpu_ops("kernels", rng, [
        {"range_id": 3, "api_start_ns": 50},  # the real forward
        {"range_id": 4, "api_start_ns": 450},  # the teacher's forward: its own root
        {"range_id": 7, "api_start_ns": 750, "tid": 2},  # rec: range
        {"range_id": 8, "api_start_ns": 950, "tid": 2},  # fc's own backward
        {"range_id": 9, "api_start_ns": 1020, "tid": 2},  # fwd: inside bwd: a recompute
        {"range_id": 10, "api_start_ns": 1060, "tid": 2},  # nested two deep: a recompute
        {"range_id": 6, "api_start_ns": 1300, "tid": 2},  # block's backward
    ])  # fmt: skip
    k, _ = assign_layers(kernels, no_ops(rng), rng)
    assert labels(k) == [
        ("student.block.fc", "Linear", "forward", "forward"),
        ("teacher.block.fc", "Linear", "forward", "forward"),
        ("student.block.fc", "Linear", "recompute", "backward"),
        ("student.block.fc", "Linear", "backward", "backward"),
        ("student.block.fc", "Linear", "recompute", "backward"),
        ("student.block.act", "ReLU", "recompute", "backward"),
        ("student.block", "Block", "backward", "backward"),
    ]
    codes = label_ranges(rng).module_direction
    assert [DIRECTIONS[c] if c >= 0 else None for c in codes] == [
        None, "forward", "forward", "forward", "forward", None,
        "backward", "recompute", "backward", "recompute", "recompute",
    ]  # fmt: skip


# --- (b) torch.autograd.profiler.emit_nvtx -------------------------------------------------


def emit_nvtx() -> pd.DataFrame:
    auto = {"tid": 2}
    return ranges(
        [
            ("aten::conv2d, seq = 17, op_id = 5, sizes = [[8, 3, 32, 32], [16, 3, 3, 3]]",
             100, 200, -1),  # 0
            ("aten::convolution, seq = 17", 105, 195, 0),  # 1
            ("aten::cudnn_convolution, seq = 17", 110, 190, 1),  # 2
            ("aten::linear, seq = 18", 210, 300, -1),  # 3: creates no node itself
            ("aten::t, seq = 18", 212, 220, 3),  # 4: TBackward0 would get seq 18
            ("aten::addmm, seq = 19", 222, 290, 3),  # 5: AddmmBackward0 gets seq 19
            ("aten::bmm, seq = 19", 300, 350, -1, {"pid": 2, "tid": 5}),  # 6: another process
            ("autograd::engine::evaluate_function: AddmmBackward0", 400, 500, -1, auto),  # 7
            ("AddmmBackward0, seq = 19", 405, 495, 7, auto),  # 8
            ("aten::mm, seq = 3", 410, 450, 8, auto),  # 9: an op run by backward
            ("CudnnConvolutionBackward, stashed seq=17", 510, 600, -1, auto),  # 10: old format
            ("aten::cudnn_convolution_backward, seq=0", 515, 590, 10, auto),  # 11
            ("MulBackward0, seq = 99", 610, 650, -1, auto),  # 12: no forward op with seq 99
        ]
    )  # fmt: skip


def test_emit_nvtx_forward_ops_and_backward_matched_by_seq() -> None:
    rng = emit_nvtx()
    kernels = gpu_ops("kernels", rng, [
        # innermost aten::cudnn_convolution: the op is its outermost seq-17 range
        {"range_id": 2, "api_start_ns": 150},
        {"range_id": 5, "api_start_ns": 250},  # addmm has its own seq (19), not linear's
        {"range_id": 4, "api_start_ns": 215},  # t shares linear's seq 18 -> aten::linear
        # aten::mm inside AddmmBackward0 (seq 19): pid 1's aten::addmm (started 222),
        # not pid 2's aten::bmm with the same seq.
        {"range_id": 9, "api_start_ns": 420, "tid": 2},
        {"range_id": 11, "api_start_ns": 520, "tid": 2},  # stashed seq=17 -> aten::conv2d
        {"range_id": 12, "api_start_ns": 620, "tid": 2},  # unmatched backward node
        {"range_id": 7, "api_start_ns": 401, "tid": 2},  # engine range, outside the node
    ])  # fmt: skip
    k, _ = assign_layers(kernels, no_ops(rng), rng)
    # Forward op names outside any module say nothing about the phase (the optimizer's ops
    # look the same): "other". A backward node always means the backward phase.
    assert labels(k) == [
        ("aten::conv2d", "aten::conv2d", "forward", "other"),
        ("aten::addmm", "aten::addmm", "forward", "other"),
        ("aten::linear", "aten::linear", "forward", "other"),
        ("aten::addmm", "aten::addmm", "backward", "backward"),
        ("aten::conv2d", "aten::conv2d", "backward", "backward"),
        (None, None, "backward", "backward"),
        (None, None, None, "other"),
    ]


def test_emit_nvtx_backward_takes_the_forward_ops_module() -> None:
    rng = ranges(
        [
            ("fwd:conv1:Conv2d", 100, 200, -1, OURS),
            ("aten::conv2d, seq = 4", 110, 190, 0),
            # Backward node on autograd's thread with no bwd: range around it.
            ("ConvolutionBackward0, seq = 4", 400, 500, -1, {"tid": 2}),
            ("aten::convolution_backward, seq = 0", 410, 490, 2, {"tid": 2}),
        ]
    )
    kernels = gpu_ops(
        "kernels", rng, [{"range_id": 1, "api_start_ns": 150}, {"range_id": 3, "api_start_ns": 450}]
    )
    k, _ = assign_layers(kernels, no_ops(rng), rng)
    assert labels(k) == [
        ("conv1", "Conv2d", "forward", "forward"),
        ("conv1", "Conv2d", "backward", "backward"),
    ]


def test_backward_node_matches_the_latest_earlier_forward_op() -> None:
    # Two steps reuse nothing in real PyTorch (seq only grows), but a restarted counter must
    # still pick the forward op just before the node, not the first or a later one.
    rng = ranges(
        [
            ("aten::mm, seq = 1", 0, 10, -1),
            ("aten::bmm, seq = 1", 100, 110, -1),
            ("MmBackward0, seq = 1", 200, 210, -1, {"tid": 2}),
            ("aten::matmul, seq = 1", 300, 310, -1),
        ]
    )
    k, _ = assign_layers(gpu_ops("kernels", rng, [{"range_id": 2, "api_start_ns": 205}]),
                         no_ops(rng), rng)  # fmt: skip
    assert labels(k) == [("aten::bmm", "aten::bmm", "backward", "backward")]


@pytest.mark.parametrize(
    ("name", "kind", "seq", "op"),
    [
        ("aten::addmm, seq = 8", "op", 8, "aten::addmm"),
        ("aten::addmm, seq = 8, op_id = 12, sizes = [[120], [1, 400]]", "op", 8, "aten::addmm"),
        ("aten::add, seq=3", "op", 3, "aten::add"),  # PyTorch < 1.5 spacing
        ("AddmmBackward0, seq = 8", "backward", 8, "AddmmBackward0"),
        ("AddmmBackward, seq = 8", "backward", 8, "AddmmBackward"),
        ("AddBackward, stashed seq=3", "backward", 3, "AddBackward"),
        ("ThnnConv2DBackward, stashed seq = 4", "backward", 4, "ThnnConv2DBackward"),
        ("aten::empty", None, -1, None),
        ("autograd::engine::evaluate_function: AddmmBackward0", None, -1, None),
    ],
)
def test_emit_nvtx_name_formats(name: str, kind: str | None, seq: int, op: str | None) -> None:
    row = classify_range_names([name]).iloc[0]
    assert (row["seq_kind"], row["seq"], row["op_name"]) == (kind, seq, op)


# --- (c) PyProf / DLProf payloads ----------------------------------------------------------

STACK = "/<module>/Net::_call_impl/Net::forward/Conv2d::_call_impl(2)/Conv2d::forward/{}"


def test_pyprof_payloads_and_emit_nvtx_backward() -> None:
    stack = STACK.format("Conv2d::_conv_forward/conv2d")
    trace = "{'traceMarker': ['net.py:41'], 'funcStack': '" + stack + "'}"
    rng = ranges(
        [
            (trace, 100, 200, -1),
            ("{'mod': 'torch.nn.functional', 'op': 'conv2d', 'args': []}", 105, 195, 0),
            ("aten::conv2d, seq = 0", 110, 190, 1),
            ("ConvolutionBackward0, seq = 0", 300, 400, -1, {"tid": 2}),
            ("{'traceMarker': ['net.py:35'], 'funcStack': '/<module>/randn'}", 500, 510, -1),
        ]
    )
    kernels = gpu_ops("kernels", rng, [
        {"range_id": 2, "api_start_ns": 150},
        {"range_id": 3, "api_start_ns": 350, "tid": 2},
        {"range_id": 4, "api_start_ns": 505},  # outside any module forward
    ])  # fmt: skip
    k, _ = assign_layers(kernels, no_ops(rng), rng)
    assert labels(k) == [
        ("Net/Conv2d(2)", "Conv2d", "forward", "forward"),
        ("Net/Conv2d(2)", "Conv2d", "backward", "backward"),
        (None, None, None, "other"),
    ]


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (STACK.format("Conv2d::_conv_forward/conv2d"), ("Net/Conv2d(2)", "Conv2d")),
        ("/<module>/Net::_call_impl/Net::forward/flatten", ("Net", "Net")),
        # torch 2.x wraps _call_impl; the call-site index sits on the outer frame.
        ("/<module>/M::_wrapped_call_impl/M::_call_impl/M::forward/Seq::_wrapped_call_impl(3)"
         "/Seq::_call_impl/Seq::forward/Linear::_wrapped_call_impl/Linear::_call_impl"
         "/Linear::forward/linear", ("M/Seq(3)/Linear", "Linear")),
        ("/<module>/Net::__init__/Conv2d::__init__(2)/Conv2d::reset_parameters/uniform_", None),
        ("/<module>/randn", None),
    ],
)  # fmt: skip
def test_layer_from_funcstack(stack: str, expected: tuple[str, str] | None) -> None:
    assert layer_from_funcstack(stack) == expected


NVTX_TEXTS = (
    "SELECT start, end, coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) AS name"
    " FROM NVTX_EVENTS ORDER BY start, end DESC"
)


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("file", "layers"),
    [
        ("MohanadOdema__DLProf__nsys_profile.sqlite", {"Conv2d", "Conv2d(2)", "Linear(3)"}),
        (
            "MohanadOdema__DLProf__w_Relu_nsys_profile.sqlite",
            {"Conv2d", "Conv2d(2)", "Linear(3)", "Linear(4)", "Linear(5)"},
        ),
    ],
)
def test_dlprof_corpus_layer_names(corpus_dir: Path, file: str, layers: set[str]) -> None:
    names = query_frame(corpus_dir / file, NVTX_TEXTS)["name"].unique()
    info = classify_range_names(list(names))
    found = set(info["pyprof_layer"].dropna())
    # The root module's own ops (flatten, relu) belong to the root module.
    assert found == {"dummy_network"} | {f"dummy_network/{layer}" for layer in layers}
    conv = info.loc[[n for n in names if "_call_impl(2)/Conv2d::forward/Conv2d::_conv" in n]]
    assert conv["pyprof_type"].tolist() == ["Conv2d"]
    # Constructor and .cuda() payloads name no forward, so no layer.
    init = [n for n in names if "dummy_network::__init__" in n]
    assert init and info.loc[init, "pyprof_layer"].isna().all()
    assert set(info.loc[info["seq_kind"].notna(), "seq_kind"]) == {"op"}  # forward only


@pytest.mark.corpus
def test_dlprof_corpus_kernels_get_their_conv_layer(corpus_dir: Path) -> None:
    path = corpus_dir / "MohanadOdema__DLProf__nsys_profile.sqlite"
    events = query_frame(path, NVTX_TEXTS)
    start, end = events["start"].to_numpy(), events["end"].to_numpy()
    # One thread, properly nested: the parent is the latest earlier range that encloses one.
    parents = [
        max((j for j in range(i) if start[j] <= start[i] and end[i] <= end[j]), default=-1)
        for i in range(len(events))
    ]
    rng = ranges(list(zip(events["name"], start, end, parents, strict=True)))
    launches = query_frame(
        path,
        "SELECT r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r"
        " ON r.correlationId = k.correlationId",
    )["start"]
    # Innermost range holding each launch (the latest-starting one), as correlate does.
    rows = [
        {"range_id": int(np.flatnonzero((start <= t) & (end >= t)).max()), "api_start_ns": t}
        for t in launches
    ]
    k, _ = assign_layers(gpu_ops("kernels", rng, rows), no_ops(rng), rng)
    # 24 kernels launched in conv1's forward (cuDNN autotuning tries several algorithms),
    # 22 in conv2's; the program died in the first Linear before launching any kernel.
    assert k["layer"].value_counts().to_dict() == {
        "dummy_network/Conv2d": 24,
        "dummy_network/Conv2d(2)": 22,
    }
    assert set(k["direction"]) == {"forward"} and set(k["phase"]) == {"forward"}


# --- Tensor Core eligibility --------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "family"),
    [
        ("Conv2d", "conv"), ("ConvTranspose2d", "conv"), ("Conv1D", "conv"),
        ("aten::cudnn_convolution", "conv"), ("aten::conv2d", "conv"),
        ("Linear", "linear"), ("NonDynamicallyQuantizableLinear", "linear"),
        ("RowParallelLinear", "linear"), ("aten::linear", "linear"),
        ("aten::addmm", "matmul"), ("aten::bmm", "matmul"), ("aten::mm", "matmul"),
        ("aten::baddbmm", "matmul"), ("aten::matmul", "matmul"), ("aten::einsum", "matmul"),
        ("MultiheadAttention", "attention"), ("LlamaAttention", "attention"),
        ("aten::_scaled_dot_product_flash_attention", "attention"), ("CausalSelfAttn", "attention"),
        ("LSTM", "rnn"), ("GRUCell", "rnn"), ("RNN", "rnn"), ("aten::_cudnn_rnn", "rnn"),
        *((name, None) for name in (
            "ReLU", "BatchNorm2d", "LayerNorm", "GroupNorm", "Dropout", "MaxPool2d", "Embedding",
            "Flatten", "Sequential", "UpsamplingBilinear2d", "aten::upsample_linear1d",
            "aten::add_", "aten::comm", "aten::_convert_indices_from_coo_to_csr", "dummy_network",
        )),
    ],
)  # fmt: skip
def test_tc_eligible_types(type_name: str, family: str | None) -> None:
    assert tc_eligible_family(type_name) == family
    assert is_tc_eligible(type_name) is (family is not None)


def _random_forest(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Parents precede their children (start order); depth follows the parent chain."""
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        if rng.random() < 0.8:
            parent[i] = rng.integers(max(0, i - 20), i)
            depth[i] = depth[parent[i]] + 1
    return parent, depth


@pytest.mark.parametrize("seed", range(5))
def test_level_walk_equals_pointer_jumping(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parent, depth = _random_forest(rng, 3000)
    owns = [rng.random(parent.size) < p for p in (0.01, 0.2, 0.7)]
    levels = _levels(parent, depth)
    assert levels is not None and sum(len(r) for r in levels) == (parent >= 0).sum()
    for own, near in zip(owns, _nearest_many(owns, parent, levels)):
        assert near.tolist() == _nearest(own, parent).tolist()


def test_level_walk_declines_inconsistent_depths() -> None:
    rng = np.random.default_rng(7)
    parent, depth = _random_forest(rng, 500)
    child = int(np.flatnonzero(parent >= 0)[-1])
    depth[child] = depth[parent[child]]  # a child no deeper than its parent
    assert _levels(parent, depth) is None
    own = rng.random(parent.size) < 0.3
    assert _nearest_many([own], parent, None)[0].tolist() == _nearest(own, parent).tolist()


def test_used_categorical_equals_removing_unused_categories() -> None:
    rng = np.random.default_rng(3)
    categories = pd.Index([f"c{i}" for i in range(50)])
    codes = np.where(rng.random(10_000) < 0.1, -1, rng.integers(10, 30, 10_000))
    ours = used_categorical(codes, categories)
    theirs = pd.Categorical.from_codes(codes, categories=categories).remove_unused_categories()
    assert list(ours.categories) == list(theirs.categories) == [f"c{i}" for i in range(10, 30)]
    assert ours.codes.tolist() == theirs.codes.tolist()
    assert len(used_categorical(np.full(3, -1), categories).categories) == 0
