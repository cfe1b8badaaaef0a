"""Memory per layer as the annotation records it (annotate/tensor_bytes.py).

Oracles: parameter, gradient and optimizer-state bytes are summed by the test over the real
tensors (each storage once, a tied weight at its first holder); saved activations per layer
are counted independently by walking the autograd graph of the measured step's forward
(every node's ``_saved_*`` tensors, each storage once, parameters left out), each node
booked to the innermost module call whose autograd sequence-number interval holds it; their
sum is checked against the live CPU memory the forward leaves behind, measured by
``torch.profiler`` with ``profile_memory=True``, less the output's bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from dlprof_lite.rules.facts import parse_fact  # noqa: E402
from test_flops_annotate import ZOO, Tied  # noqa: E402

_seq = torch._C._autograd._get_sequence_nr


def facts(recorder: Any, key: str) -> dict[str, dict[str, Any]]:
    found = [parse_fact(text) for _, text in recorder.marks]
    return {v["layer"]: v for k, v in filter(None, found) if k == key}


def storage(t: torch.Tensor) -> tuple[str, int]:
    return str(t.device), t.untyped_storage().data_ptr()


def first_holders(model: nn.Module) -> dict[int, str]:
    """Each parameter's first holder, in module order (layer names as the ranges carry them:
    the root ``model``, its children by qualified name)."""
    owner: dict[int, str] = {}
    for name, module in model.named_modules():
        for p in module._parameters.values():
            if p is not None:
                owner.setdefault(id(p), name or "model")
    return owner


@pytest.mark.parametrize("make_optimizer", [
    lambda ps: torch.optim.Adam(ps, lr=1e-3),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
], ids=["adam", "sgd-momentum", "adamw-foreach"])  # fmt: skip
def test_parameter_gradient_and_state_bytes_are_the_real_tensors(
    recorder: Any, make_optimizer: Callable[[Any], Any]
) -> None:
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    model = Tied()  # an embedding whose weight the head shares
    opt = make_optimizer(model.parameters())
    annotation = install("modules-all")
    for _ in range(3):
        model(torch.randint(0, 50, (4, 6))).sum().backward()
        opt.step()
    annotation.remove()
    found = facts(recorder, "memory")
    owner = first_holders(model)
    want: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for p in model.parameters():  # each parameter once (named_parameters drops the tie)
        row = want.setdefault(owner[id(p)], [0, 0, 0])
        row[0] += p.untyped_storage().nbytes()
        row[1] += p.grad.untyped_storage().nbytes()
        for t in opt.state[p].values():
            if isinstance(t, torch.Tensor) and storage(t) not in seen:
                seen.add(storage(t))
                row[2] += t.untyped_storage().nbytes()
    got = {layer: [f["param_bytes"], f["grad_bytes"], f["optimizer_bytes"]]
           for layer, f in found.items() if f["tied"] is None}  # fmt: skip
    assert got == want
    assert found["head"]["tied"] == "embed" and found["head"]["param_bytes"] == 0
    assert want["embed"][0] == 50 * 16 * 4 and want["embed"][2] > 0


def oracle_saved(
    model: nn.Module, forward: Callable[[], torch.Tensor]
) -> tuple[dict[str, int], Any]:
    """Saved bytes per layer by walking the graph of one forward (see the module doc)."""
    calls: list[tuple[int, int, int, str]] = []  # (start, end, depth, layer)
    stack: list[tuple[int, str]] = []
    names = {id(m): (n or "model") for n, m in model.named_modules()}
    handles = []

    def pre(module: nn.Module, args: Any) -> None:
        stack.append((_seq(), names[id(module)]))

    def post(module: nn.Module, args: Any, out: Any) -> None:
        start, layer = stack.pop()
        calls.append((start, _seq(), len(stack), layer))

    for module in model.modules():
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    out = forward()
    for h in handles:
        h.remove()
    params = {storage(p) for p in model.parameters()}
    nodes, todo, seen_nodes = [], [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        nodes.append(node)
        todo.extend(n for n, _ in node.next_functions)
    nodes.sort(key=lambda n: n._sequence_nr())
    per_layer: dict[str, int] = {}
    counted: set[tuple[str, int]] = set(params)
    for node in nodes:
        seq = node._sequence_nr()
        inside = [c for c in calls if c[0] <= seq < c[1]]
        if not inside:
            continue
        layer = max(inside, key=lambda c: (c[2], c[0]))[3]
        # Built-in nodes show each saved value as ``_saved_<name>``; a custom
        # autograd.Function's node shows what it saved as ``saved_tensors``.
        attrs = [a for a in dir(node) if a.startswith("_saved_")]
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            attrs.append("saved_tensors")
        for attr in attrs:
            value = getattr(node, attr)
            for t in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                    key = storage(t)
                    if key not in counted:
                        counted.add(key)
                        per_layer[layer] = per_layer.get(layer, 0) + t.untyped_storage().nbytes()
    return per_layer, out


@pytest.mark.parametrize("kind", sorted(ZOO))
def test_saved_bytes_per_layer_equal_the_graphs_saved_tensors(recorder: Any, kind: str) -> None:
    """The measured step is the second iteration: its forward's saved tensors, per layer,
    equal the oracle's walk of that same forward's graph (the FLOP tests' zoo)."""
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    make_model, make_input = ZOO[kind]
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    annotation = install("modules-all")
    model(make_input()).float().sum().backward()  # the warm-up step
    opt.step()
    opt.zero_grad()
    x = make_input()
    want, out = oracle_saved(model, lambda: model(x))  # the measured step's forward
    out.float().sum().backward()
    opt.step()
    model(make_input()).float().sum().backward()  # the next step ends the measurement
    annotation.remove()
    got = {layer: f["saved_bytes"] for layer, f in facts(recorder, "saved").items()
           if f["saved_bytes"]}  # fmt: skip
    assert got == want and sum(want.values()) > 0


def test_saved_bytes_are_the_memory_the_forward_keeps(recorder: Any) -> None:
    """Their sum is within 10 % of the live CPU memory a forward leaves (torch.profiler,
    profile_memory=True), less its output's bytes. The batch is made inside the measured
    region: the first layer saves it for its weight's gradient, so the graph keeps it."""
    from torch.profiler import ProfilerActivity, profile

    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.Tanh(),
                          nn.Linear(512, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    annotation = install("modules-all")
    for _ in range(3):
        model(torch.randn(64, 256)).sum().backward()
        opt.step()
        opt.zero_grad()
    annotation.remove()
    saved = sum(f["saved_bytes"] for f in facts(recorder, "saved").values())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(torch.randn(64, 256))
    grown = sum(e.self_cpu_memory_usage for e in prof.key_averages())
    kept = grown - out.untyped_storage().nbytes()
    assert saved == pytest.approx(kept, rel=0.10), (saved, grown)


def test_the_measured_step_is_the_first_analysed_one(recorder: Any) -> None:
    """One ``saved_step`` fact, none before the second iteration; nothing measured while
    the warm-up step ran."""
    from dlprof_lite.annotate import install

    model = nn.Sequential(nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(4):
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    annotation.remove()
    found = [parse_fact(t) for _, t in recorder.marks]
    steps = [v for k, v in filter(None, found) if k == "saved_step"]
    assert steps == [{"off": None, "layers": 1}]
    iterations = sorted(r.start for r in recorder.ranges if r.name == "iteration")
    saved_at = min(t for t, text in recorder.marks if text.startswith('fact:{"saved"'))
    assert iterations[2] <= saved_at < iterations[3]


def test_a_compiled_model_records_no_saved_activations_and_says_why(recorder: Any) -> None:
    """The saved-tensor hooks would break a compiled graph: they stay off for a compiled
    model (the step's fact says so), its parameter bytes are still recorded."""
    from dlprof_lite.annotate import install

    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    annotation = install("modules-all")
    net.compile(backend="aot_eager")
    for _ in range(4):
        net(torch.randn(2, 8)).sum().backward()
        opt.step()
    annotation.remove()
    torch._dynamo.reset()
    found = [parse_fact(t) for _, t in recorder.marks]
    (step,) = [v for k, v in filter(None, found) if k == "saved_step"]
    assert "compiled model" in step["off"]
    assert sum(f["param_bytes"] for f in facts(recorder, "memory").values()) == (8 * 8 + 8) * 4


def test_folded_modules_are_no_compiled_model(recorder: Any) -> None:
    """The default level folds short modules through the same ``_compiled_call_impl``
    attribute a compiled model sets: saved activations are still recorded, a folded layer's
    in its parent's row (as its time is)."""
    from dlprof_lite.annotate import install
    from test_annotate import lenet_module

    lenet = lenet_module()
    annotation = install("modules")
    lenet.train(lenet.parse_args(["--steps", "6", "--batch-size", "8"]))
    annotation.remove()
    found = [parse_fact(t) for _, t in recorder.marks]
    (step,) = [v for k, v in filter(None, found) if k == "saved_step"]
    assert step["off"] is None
    saved = facts(recorder, "saved")
    assert saved["model"]["saved_bytes"] > 0  # the folded layers' activations
    assert saved["conv1"]["saved_bytes"] == 8 * 1 * 28 * 28 * 4  # its input batch


class _Beside(nn.Module):
    """A model that runs one of its modules on a pool thread during its forward (a root call
    there: that thread has no enclosing module)."""

    def __init__(self) -> None:
        super().__init__()
        from concurrent.futures import ThreadPoolExecutor

        self.main, self.side = nn.Linear(8, 8), nn.Linear(8, 8)
        self.pool = ThreadPoolExecutor(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        beside = self.pool.submit(self.side, x)
        return self.main(x) + beside.result()


def test_a_module_run_on_another_thread_keeps_the_step_measured(recorder: Any) -> None:
    """torch keeps saved-tensor hooks per thread: the pool thread's root call must not pop
    the main thread's (it raised an internal assert and stopped the run)."""
    from dlprof_lite.annotate import install

    torch.manual_seed(0)
    model = _Beside()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    annotation.remove()
    saved = facts(recorder, "saved")
    assert saved["main"]["saved_bytes"] > 0  # the main thread's module, measured
    model.pool.shutdown()
