"""FLOPs per module call, as the annotation counts them (annotate/flops.py, flop_count.py).

A zoo of models is trained for two steps under ``install("modules-all")`` (the recorder
backend: the ``flops`` facts are read back from its marks). The oracle for every layer is
torch's own ``FlopCounterMode`` run by the test on that module's first real call (its
real inputs, their ``requires_grad`` as they were), forward and backward apart; where
FlopCounterMode counts nothing on the CPU (``scaled_dot_product_attention``, ``nn.LSTM``)
the test adds the cited formulas, written here from their definitions:

- attention, forward: QKᵀ and AV, 2·B·H·S_q·S_k·D each (4·B·H·S²·D); backward: the scores
  recomputed, dV, dP, dQ and dK, five matmuls of 2·B·H·S_q·S_k·D;
- LSTM, per layer and direction: the gate matmuls W_ih·x and W_hh·h, 2·T·B·4H·(I + H)
  forward; backward the same matmuls for the input and the weight gradients (twice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlprof_lite.rules.facts import parse_fact  # noqa: E402

aten = torch.ops.aten


# --- the oracle's formulas (independent of the product's) ---------------------------------


def _attention_forward(q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None,
                       **kwargs: Any) -> int:  # fmt: skip
    b, h, sq, d = q
    sk, dv = k[2], v[3]
    return 2 * b * h * sq * sk * d + 2 * b * h * sq * sk * dv


def _attention_backward(grad: Any, q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None,
                        **kwargs: Any) -> int:  # fmt: skip
    b, h, sq, d = q
    sk, dv = k[2], v[3]
    return 2 * b * h * sq * sk * (d + dv + dv + d + d)  # scores, dV, dP, dQ, dK


def _lstm_layer(x: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None,
                **kwargs: Any) -> int:  # fmt: skip
    gates_hidden, inputs = w_ih
    hidden = w_hh[1]
    steps_batch = math.prod(x[:-1])
    return 2 * steps_batch * gates_hidden * (inputs + hidden)


def _lstm_layer_backward(x: Any, w_ih: Any, w_hh: Any, *args: Any, out_shape: Any = None,
                         **kwargs: Any) -> int:  # fmt: skip
    return 2 * _lstm_layer(x, w_ih, w_hh)


ORACLE_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _attention_forward,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward,
    aten.mkldnn_rnn_layer: _lstm_layer,
    aten.mkldnn_rnn_layer_backward: _lstm_layer_backward,
}


def oracle(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """FlopCounterMode (with the formulas above) on one real call: (forward, backward)."""
    with FlopCounterMode(display=False, custom_mapping=ORACLE_FORMULAS) as forward:
        out = module(*args, **kwargs)
    leaves = [t for t in torch.utils._pytree.tree_leaves(out)
              if isinstance(t, torch.Tensor) and t.requires_grad]  # fmt: skip
    with FlopCounterMode(display=False, custom_mapping=ORACLE_FORMULAS) as backward:
        if leaves:
            torch.autograd.backward(leaves, [torch.ones_like(t) for t in leaves])
    return forward.get_total_flops(), backward.get_total_flops()


# --- the zoo ------------------------------------------------------------------------------


class Block(nn.Module):
    """A pre-norm transformer block on scaled_dot_product_attention."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class Tied(nn.Module):
    """An embedding whose weight the output head shares."""

    def __init__(self, vocab: int = 50, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(tokens))))


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(40, 12)
        self.lstm = nn.LSTM(12, 24, num_layers=2, batch_first=True)
        self.out = nn.Linear(24, 40)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.out(hidden)


class Scale(torch.autograd.Function):
    """x @ w with a hand-written backward (two matmuls)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return grad @ w.t(), x.t() @ grad


class Custom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 16)
        self.weight = nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Scale.apply(self.pre(x), self.weight)


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),  # depthwise
        nn.ConvTranspose2d(8, 4, 2, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5),
    )  # fmt: skip


Zoo = tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]
ZOO: dict[str, Zoo] = {
    "mlp": (lambda: nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)),
            lambda: torch.randn(8, 16)),
    "cnn": (_cnn, lambda: torch.randn(2, 3, 8, 8)),
    "sdpa_block": (lambda: nn.Sequential(Block(), Block()), lambda: torch.randn(2, 10, 32)),
    "multihead": (lambda: nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                  lambda: torch.randn(2, 10, 32)),
    "lstm": (Recurrent, lambda: torch.randint(0, 40, (3, 7))),
    "tied": (Tied, lambda: torch.randint(0, 50, (4, 6))),
    "custom_function": (Custom, lambda: torch.randn(5, 8)),
}  # fmt: skip


def flops_facts(marks: list[tuple[int, str]]) -> dict[str, dict[str, Any]]:
    """The ``flops`` facts of shape 0, by layer."""
    found = [parse_fact(text) for _, text in marks]
    return {v["layer"]: v for k, v in filter(None, found) if k == "flops" and v["shape"] == 0}


def first_calls(model: nn.Module) -> tuple[dict[str, tuple[Any, Any]], Callable[[], None]]:
    """Each module's first real call (inputs detached, requires_grad kept), by qualified name."""
    calls: dict[str, tuple[Any, Any]] = {}
    handles = []

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            if name not in calls:
                calls[name] = torch.utils._pytree.tree_map(_copy, (args, kwargs))

        return hook

    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(keep(name), with_kwargs=True))
    return calls, lambda: [h.remove() for h in handles]  # type: ignore[func-returns-value]


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    return value


def train(model: nn.Module, make_input: Callable[[], torch.Tensor], steps: int = 2) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        out = model(make_input())
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("kind", sorted(ZOO))
def test_every_layer_equals_flopcountermode_on_its_own_call(recorder: Any, kind: str) -> None:
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    make_model, make_input = ZOO[kind]
    model = make_model()
    calls, unhook = first_calls(model)
    annotation = install("modules-all")
    train(model, make_input)
    annotation.remove()
    unhook()
    facts = flops_facts(recorder.marks)
    assert facts, "no flops facts"
    by_name = dict(model.named_modules())
    for layer, fact in facts.items():
        qual = "" if layer == "model" else layer
        assert fact["unknown"] is None, (layer, fact["unknown"])
        args, kwargs = calls[qual]
        want = oracle(by_name[qual], args, kwargs)
        assert (fact["fwd"], fact["bwd"]) == want, layer
        assert fact["calls"] == 1
    # Layers sum to the model: the self FLOPs of every layer make the root's inclusive.
    root = facts["model"]
    assert sum(f["self_fwd"] for f in facts.values()) == root["fwd"] > 0
    assert sum(f["self_bwd"] for f in facts.values()) == root["bwd"] > 0
    assert sum(root["by_dtype"].values()) == root["fwd"] + root["bwd"]


def test_an_in_place_layer_is_counted(recorder: Any) -> None:
    """``ReLU(inplace=True)`` (torchvision's ResNets) writes into its input, the output of the
    layer before it: replayed alone, that input must not be a leaf that requires grad."""
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                          nn.Flatten(), nn.Linear(8 * 6 * 6, 5))  # fmt: skip
    annotation = install("modules-all")
    train(model, lambda: torch.randn(2, 3, 8, 8))
    annotation.remove()
    facts = flops_facts(recorder.marks)
    assert facts["2"]["unknown"] is None and facts["2"]["fwd"] == facts["2"]["bwd"] == 0
    assert facts["model"]["unknown"] is None
    assert (facts["model"]["fwd"], facts["model"]["bwd"]) == oracle(
        model, (torch.randn(2, 3, 8, 8),), {})


def test_the_cited_formulas_give_the_recurrent_and_attention_figures(recorder: Any) -> None:
    """The LSTM's and the attention's FLOPs by hand: FlopCounterMode alone counts 0 there."""
    from dlprof_lite.annotate import install

    model = Recurrent()
    annotation = install("modules-all")
    train(model, lambda: torch.randint(0, 40, (3, 7)))
    annotation.remove()
    lstm = flops_facts(recorder.marks)["lstm"]
    steps_batch = 3 * 7
    first, second = 2 * steps_batch * 4 * 24 * (12 + 24), 2 * steps_batch * 4 * 24 * (24 + 24)
    assert lstm["fwd"] == first + second and lstm["bwd"] == 2 * (first + second)
    with FlopCounterMode(display=False) as plain:
        model.lstm(torch.randn(3, 7, 12))
    assert plain.get_total_flops() == 0  # why the formula is needed


def test_an_op_without_a_formula_makes_the_layer_unknown_never_zero(recorder: Any) -> None:
    from dlprof_lite.annotate import install

    class Spectral(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.rfft(x).abs()

    model = nn.Sequential(nn.Linear(8, 8), Spectral())
    annotation = install("modules-all")
    train(model, lambda: torch.randn(4, 8))
    annotation.remove()
    facts = flops_facts(recorder.marks)
    assert facts["0"]["unknown"] is None and facts["0"]["fwd"] > 0
    for layer in ("1", "model"):  # the op, and the model that holds it
        assert facts[layer]["fwd"] is None and "fft" in facts[layer]["unknown"]


def test_the_count_leaves_statistics_rng_and_gradients_as_they_were(recorder: Any) -> None:
    """Fake tensors: BatchNorm's running statistics, the RNG and the real gradients are the
    same with the count as without it."""
    from dlprof_lite.annotate import install

    def run(annotated: bool) -> tuple[Any, ...]:
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6), nn.Dropout(0.3))
        annotation = install("modules-all") if annotated else None
        x = torch.randn(5, 6)
        model(x).sum().backward()  # no optimizer: the count runs at exit (remove)
        if annotation is not None:
            annotation.remove()
        return (model[1].running_mean.clone(), model[1].num_batches_tracked.clone(),
                model[0].weight.grad.clone(), torch.randn(3))  # fmt: skip

    plain, counted = run(False), run(True)
    assert flops_facts(recorder.marks)["0"]["fwd"] == 2 * 5 * 6 * 6
    for a, b in zip(plain, counted, strict=True):
        assert torch.equal(a, b)


def test_a_program_hook_never_sees_the_count(recorder: Any) -> None:
    """Module hooks are set aside while counting: a hook that stores outputs keeps the real
    ones only."""
    from dlprof_lite.annotate import install

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    seen: list[Any] = []
    model[0].register_forward_hook(lambda m, a, out: seen.append(type(out).__name__))
    annotation = install("modules-all")
    train(model, lambda: torch.randn(2, 4), steps=3)
    annotation.remove()
    assert seen == ["Tensor"] * 3
    assert flops_facts(recorder.marks)["0"]["fwd"] == 2 * 2 * 4 * 4


def test_each_new_input_shape_is_counted_once_and_marked(recorder: Any) -> None:
    """Dynamic padding through keyword arguments only (as the Hugging Face Trainer calls a
    model): each new sequence length is a new signature, counted once; each root call whose
    signature changed is marked; past MAX_SHAPES a call is marked -1, not counted."""
    from dlprof_lite.annotate import install
    from dlprof_lite.annotate.flops import MAX_SHAPES

    class Lm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(30, 8)
            self.head = nn.Linear(8, 30)

        def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
            return self.head(self.embed(input_ids))

    model = Lm()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lengths = [5, 5, 7, 5, *range(10, 10 + MAX_SHAPES)]
    annotation = install("modules-all")
    for n in lengths:
        tokens = torch.randint(0, 30, (2, n))
        model(input_ids=tokens, attention_mask=torch.ones_like(tokens)).sum().backward()
        opt.step()
        opt.zero_grad()
    annotation.remove()
    found = [f for f in map(parse_fact, (t for _, t in recorder.marks)) if f]
    marks = [v["shape"] for k, v in found if k == "flops_shape"]
    assert marks == [0, 1, 0, *range(2, MAX_SHAPES), -1]  # a repeated -1 is no change
    heads = {v["shape"]: v for k, v in found if k == "flops" and v["layer"] == "head"}
    assert sorted(heads) == list(range(MAX_SHAPES))
    assert heads[0]["fwd"] == 2 * (2 * 5) * 8 * 30 and heads[1]["fwd"] == 2 * (2 * 7) * 8 * 30


def test_counted_after_the_run_never_inside_a_step(recorder: Any) -> None:
    """While the program trains, no count runs: every ``flops`` fact comes after the last
    range of the run (the count at exit), so no step, as the report or the program's own
    clock sees it, holds it."""
    from dlprof_lite.annotate import install

    model = nn.Sequential(nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    annotation.remove()
    first_fact = min(t for t, text in recorder.marks if text.startswith('fact:{"flops":'))
    assert max(r.end for r in recorder.ranges) < first_fact


def test_a_model_the_program_lets_go_is_counted_and_freed(recorder: Any) -> None:
    """A sweep: each trial builds, trains and drops its model. The count of a dropped trial
    runs at the next model's first call and lets go of it: no trial's model is held to the
    end of the run (its memory freed), and every trial has its facts."""
    import gc
    import weakref

    from dlprof_lite.annotate import install

    annotation = install("modules-all")
    gone = []
    for width in (4, 8, 16):
        trial = nn.Sequential(nn.Linear(width, width))
        opt = torch.optim.SGD(trial.parameters(), lr=0.1)
        trial(torch.randn(2, width)).sum().backward()
        opt.step()
        gone.append(weakref.ref(trial))
        del trial, opt
    trial = nn.Sequential(nn.Linear(2, 2))  # the next model's first call counts the last
    trial(torch.randn(1, 2))
    gc.collect()
    assert [ref() is None for ref in gone] == [True, True, True]
    annotation.remove()
    found = [parse_fact(t) for _, t in recorder.marks]
    roots = sorted(v["fwd"] for k, v in filter(None, found)
                   if k == "flops" and v["layer"] == v["root"])  # fmt: skip
    assert roots == sorted([2 * 2 * 4 * 4, 2 * 2 * 8 * 8, 2 * 2 * 16 * 16, 2 * 1 * 2 * 2])


@pytest.mark.parametrize("how", ["torch.compile", "model.compile"])
def test_a_compiled_model_gets_the_eager_flops_on_the_same_shapes(recorder: Any,
                                                                  how: str) -> None:  # fmt: skip
    """Its layer is the compiled region (one range): counted as the eager module would run on
    the same shapes (``aot_eager``: no compiler needed)."""
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    annotation = install("modules-all")
    if how == "torch.compile":
        model: nn.Module = torch.compile(net, backend="aot_eager")
    else:
        net.compile(backend="aot_eager")
        model = net
    train(model, lambda: torch.randn(4, 16), steps=3)
    annotation.remove()
    torch._dynamo.reset()
    root = flops_facts(recorder.marks)["model"]
    assert root["unknown"] is None
    assert (root["fwd"], root["bwd"]) == oracle(net, (torch.randn(4, 16),), {})
    assert "_compiled_call_impl" not in net.__dict__ or net._compiled_call_impl is not None


def test_a_hugging_face_model_is_counted_layer_by_layer(recorder: Any) -> None:
    """GPT-2 (transformers) trained as the Trainer calls it (keyword arguments, labels): the
    cache its forward makes for itself is replayed as none (it holds no earlier token), so
    every block is counted; the model equals FlopCounterMode on its real call and its
    layers' self FLOPs add up to it."""
    transformers = pytest.importorskip("transformers")
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                     vocab_size=100)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ids = torch.randint(0, 100, (2, 16))
    annotation = install("modules-all")
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    annotation.remove()
    facts = flops_facts(recorder.marks)
    assert [layer for layer, f in facts.items() if f["unknown"]] == []
    with FlopCounterMode(display=False, custom_mapping=ORACLE_FORMULAS) as forward:
        loss = model(input_ids=ids, labels=ids).loss
    with FlopCounterMode(display=False, custom_mapping=ORACLE_FORMULAS) as backward:
        loss.backward()
    root = facts["model"]
    assert (root["fwd"], root["bwd"]) == (forward.get_total_flops(), backward.get_total_flops())
    assert sum(f["self_fwd"] + f["self_bwd"] for f in facts.values()) == root["fwd"] + root["bwd"]
    blocks = [facts[f"transformer.h.{i}"] for i in range(2)]
    assert blocks[0]["fwd"] == blocks[1]["fwd"] > 0


def test_a_torch_without_the_flop_counter_gives_unknown_not_zero(
    recorder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``torch.utils.flop_counter`` is missing (an old torch) the annotation still
    runs, and every count is unknown with the reason."""
    from dlprof_lite.annotate import flop_count, install

    monkeypatch.setattr(flop_count, "formulas", lambda: {})
    model = nn.Sequential(nn.Linear(4, 4))
    annotation = install("modules-all")
    model(torch.randn(2, 4)).sum().backward()
    annotation.remove()
    fact = flops_facts(recorder.marks)["0"]
    assert fact["fwd"] is None and "no FLOP formulas" in fact["unknown"]
