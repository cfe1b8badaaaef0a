"""Module hooks on real training-script shapes: backward start, recomputation, names, cost.

In-process with the recording backend of ``test_annotate``: small real models trained on
synthetic data with SGD. The oracle for "when does the backward start" is a probe in the
loss itself: an autograd Function whose backward writes a ``probe`` range, so it is the
first autograd work of the pass; it must fall inside the ``backward`` phase however the
loss is made.
"""

from __future__ import annotations

import copy
import gc
import threading
import weakref
from collections import Counter
from typing import Any, ClassVar

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from dlprof_lite.annotate import backend as backend_module  # noqa: E402
from test_annotate import Range, Recorder, inside, parents  # noqa: E402


class Probe(torch.autograd.Function):
    """Identity whose backward writes a ``probe`` range: where autograd's work starts."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        backend = backend_module.get_backend()
        backend.push("probe")
        backend.pop()
        return grad


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).flatten(1))


class DictNet(ConvNet):
    def forward(self, x: torch.Tensor) -> dict[str, Any]:  # type: ignore[override]
        out = super().forward(x)
        return {"logits": out, "aux": (out * 2, x)}


def helper_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(Probe.apply(out), y)


def run_steps(shape: str, steps: int = 3) -> None:
    torch.manual_seed(0)
    model = DictNet() if shape == "dict" else ConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(steps):
        x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 5, (4,))
        out = model(x)
        if shape == "dict":
            loss = F.cross_entropy(Probe.apply(out["logits"]), y) + out["aux"][0].mean()
        elif shape == "helper":
            loss = helper_loss(out, y)
        elif shape == "two":
            loss = F.cross_entropy(out, y) + Probe.apply(out).pow(2).mean()
        else:
            loss = F.cross_entropy(Probe.apply(out), y)
        if shape == "autograd":
            torch.autograd.backward(loss)
        elif shape == "scaler":
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if shape == "scaler":
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("shape", ["functional", "helper", "autograd", "scaler", "two", "dict"])
def test_all_autograd_work_is_backward(recorder: Recorder, shape: str) -> None:
    from dlprof_lite.annotate import install

    annotation = install("modules-all")
    run_steps(shape)
    annotation.remove()
    ranges = recorder.ranges
    backward = [r for r in ranges if r.name == "backward"]
    forward = [r for r in ranges if r.name == "forward"]
    probes = [r for r in ranges if r.name == "probe"]
    assert len(probes) == 3 and len(backward) == 3
    for probe in probes:
        assert any(inside(probe, b) for b in backward), "loss backward booked outside backward"
    for item in ranges:
        if item.name.startswith("bwd:"):
            assert any(inside(item, b) for b in backward), item.name
        if item.name.startswith("fwd:"):
            assert any(inside(item, f) for f in forward), item.name
    counts = Counter(r.name for r in ranges)
    for layer in ("conv:Conv2d", "relu:ReLU", "fc:Linear"):
        assert counts[f"fwd:{layer}"] == counts[f"bwd:{layer}"] == 3, layer
    assert counts["bwd:model:" + ("DictNet" if shape == "dict" else "ConvNet")] == 3
    parents(ranges)


@pytest.mark.parametrize("kind", ["non-reentrant", "reentrant", "sequential"])
def test_recomputation_is_rec_inside_its_backward(recorder: Recorder, kind: str) -> None:
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    from dlprof_lite.annotate import install

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(6, 6)
            self.block = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6), nn.Tanh())
            self.head = nn.Linear(6, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.stem(x)
            if kind == "sequential":
                h = checkpoint_sequential(self.block, 2, h, use_reentrant=False)
            else:
                h = checkpoint(self.block, h, use_reentrant=kind == "reentrant")
            return self.head(h)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(2):
        F.mse_loss(model(torch.randn(3, 6)), torch.zeros(3, 2)).backward()
        opt.step()
        opt.zero_grad()
    annotation.remove()
    ranges = recorder.ranges
    parent = parents(ranges)
    backward = [r for r in ranges if r.name == "backward"]
    forward = [r for r in ranges if r.name == "forward"]
    recs = [r for r in ranges if r.name.startswith("rec:")]
    # checkpoint_sequential runs its last segment without checkpointing
    expected = {"rec:block.0:Linear", "rec:block.1:GELU"}
    if kind != "sequential":
        expected |= {"rec:block:Sequential", "rec:block.2:Linear", "rec:block.3:Tanh"}
    assert {r.name for r in recs} == expected
    assert all(any(inside(r, b) for b in backward) for r in recs)
    fwd_in_backward = [r for r in ranges if r.name.startswith("fwd:")
                       and any(inside(r, b) for b in backward)]  # fmt: skip
    assert not fwd_in_backward, [r.name for r in fwd_in_backward]
    assert Counter(r.name for r in ranges)["fwd:block.0:Linear"] == 2  # the real forwards
    assert len(forward) == 2  # recomputation started no forward phase
    if kind != "reentrant":  # non-reentrant: recomputed while the block's backward runs
        for item in recs:
            chain = [parent[id(item)]]
            while chain[-1] is not None:
                chain.append(parent[id(chain[-1])])
            names = [r.name for r in chain[:-1]]
            assert any(name.startswith("bwd:") for name in names), (item.name, names)


class Student(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Trainer:
    def __init__(self) -> None:
        self.teacher = Student()
        self.student = Student()
        self.ema_model = copy.deepcopy(self.student)
        self.models = {"gen": Student(), "disc": Student()}

    def step(self) -> None:
        x = torch.randn(2, 4)
        with torch.no_grad():
            target = self.teacher(x)
            self.ema_model(x)
        loss = F.mse_loss(self.student(x), target)
        loss = loss + self.models["gen"](x).sum() + self.models["disc"](x).sum()
        loss.backward()


def roots(ranges: list[Range]) -> Counter[str]:
    parent = parents(ranges)
    return Counter(r.name for r in ranges if r.name.startswith("fwd:") and parent[id(r)] is None)


def test_two_roots_get_distinct_binding_names(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    annotation = install("modules")
    trainer = Trainer()
    for _ in range(2):
        trainer.step()
    anon = [Student(), Student()]
    for model in anon:  # one local name for two models: the second gets a number
        model(torch.randn(2, 4))
    annotation.remove()
    found = roots(recorder.ranges)
    assert found == {"fwd:teacher:Student": 2, "fwd:ema_model:Student": 2,
                     "fwd:student:Student": 2, "fwd:gen:Student": 2, "fwd:disc:Student": 2,
                     "fwd:model:Student": 1, "fwd:model#2:Student": 1}  # fmt: skip
    children = Counter(r.name for r in recorder.ranges if r.name.endswith("fc:Linear"))
    # only the root named "model" keeps its children's short names; the others are prefixed
    assert children == {"fwd:teacher.fc:Linear": 2, "fwd:ema_model.fc:Linear": 2,
                        "fwd:student.fc:Linear": 2,
                        "bwd:student.fc:Linear": 2, "fwd:gen.fc:Linear": 2,
                        "bwd:gen.fc:Linear": 2, "fwd:disc.fc:Linear": 2, "bwd:disc.fc:Linear": 2,
                        "fwd:fc:Linear": 1, "fwd:model#2.fc:Linear": 1}  # fmt: skip


def test_names_are_the_same_on_every_run(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    seen = []
    for _ in range(2):
        recorder.ranges.clear()
        annotation = install("modules")
        Trainer().step()
        annotation.remove()
        seen.append(sorted(roots(recorder.ranges)))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("level", ["modules", "modules-all"])
def test_no_reference_cycles_per_step(recorder: Recorder, level: str) -> None:
    """Hundreds of annotated steps leave nothing for the cycle collector (no gc stalls),
    folded modules (``modules``, after the first step) or not (``modules-all``)."""
    from dlprof_lite.annotate import install

    model = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(6)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 8)

    def steps(count: int) -> None:
        for _ in range(count):
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    annotation = install(level)
    steps(5)  # names learnt, caches warm
    found: list[int] = []

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            found.append(info["collected"])

    gc.collect()
    gc.callbacks.append(collected)
    try:
        steps(300)
        garbage = gc.collect()
    finally:
        gc.callbacks.remove(collected)
        annotation.remove()
    assert garbage == 0
    assert sum(found) == 0, found


def test_annotation_fact_counts_calls_and_measures_cost(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install
    from dlprof_lite.rules.facts import parse_fact

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(5):
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
    annotation.remove()
    found = [parse_fact(text) for _, text in recorder.marks]
    annotation_facts = [value for key, value in filter(None, found) if key == "annotation"]
    assert len(annotation_facts) == 1
    fact = annotation_facts[0]
    assert fact["module_calls"] == 5 * 4 and fact["steps"] == 5
    # a measurement, not a constant: positive and below a millisecond per call
    assert 0 < fact["ns_per_call"] < 1_000_000


FUNCTIONAL_LOSS = """
import json, sys, time
import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32000))  # an LM-sized head
opt = torch.optim.SGD(model.parameters(), lr=0.01)
forward = backward = 0
for step in range(6):
    x, y = torch.randn(64, 64), torch.randint(0, 32000, (64,))
    t0 = time.perf_counter_ns()
    loss = F.cross_entropy(model(x), y)
    t1 = time.perf_counter_ns()
    loss.backward()
    t2 = time.perf_counter_ns()
    opt.step()
    opt.zero_grad()
    if step:
        forward += t1 - t0
        backward += t2 - t1
json.dump({"forward": forward, "backward": backward}, open(sys.argv[1], "w"))
"""


@pytest.mark.nsys
def test_functional_loss_phases_match_the_scripts_timing(nsys: str, tmp_path: Any) -> None:
    """Under the real nsys: forward and backward phases of steps 2..6 match the script's own
    perf_counter around ``model(x)`` + loss and around ``loss.backward()`` (the softmax
    backward of a 32000-way loss used to be booked as forward: ~20% of it)."""
    import json

    from test_annotate import nsys_profile

    script = tmp_path / "functional.py"
    script.write_text(FUNCTIONAL_LOSS)
    truth = tmp_path / "truth.json"
    ranges = nsys_profile(nsys, tmp_path, [str(script), str(truth)])
    true = json.loads(truth.read_text())
    for phase in ("forward", "backward"):
        spans = [r.end - r.start for r in ranges if r.name == phase][1:]
        assert len(spans) == 5
        assert abs(sum(spans) - true[phase]) <= 0.08 * true[phase], (phase, sum(spans), true)


class Tag(torch.autograd.Function):
    """Identity whose backward records the backward ranges open on its thread (its layer)."""

    seen: ClassVar[list[tuple[str, list[str]]]] = []

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tag: str) -> torch.Tensor:
        ctx.tag = tag
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        backend = backend_module.get_backend()
        stack = backend.stacks.get(threading.get_ident(), [])  # type: ignore[attr-defined]
        Tag.seen.append((ctx.tag, [r.name for r in stack if r.name.startswith("bwd:")]))
        return grad, None


class Branch(nn.Module):
    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Tag.apply(self.lin(x), self.tag)


class Twin(nn.Module):
    """Two branches and work of its own before, between and after them."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Branch("a"), Branch("b")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = Tag.apply(x * 2, "twin before")
        both = Tag.apply(self.a(h) * self.b(h), "twin between")
        return Tag.apply(both + 1, "twin after")


def test_each_autograd_node_runs_inside_its_own_layers(recorder: Recorder) -> None:
    """Every piece of backward work is inside exactly the ranges of the calls that made it:
    a branch's inside its branch, the parent's own work inside the parent and no child."""
    from dlprof_lite.annotate import install

    model = nn.Sequential(nn.Linear(4, 4), Twin(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    annotation = install("modules-all")
    Tag.seen.clear()
    for _ in range(2):
        F.mse_loss(Tag.apply(model(torch.randn(3, 4)), "outside"), torch.zeros(3, 2)).backward()
        opt.step()
        opt.zero_grad()
    seen = list(Tag.seen)  # the FLOP count at exit runs the Function again, on fake tensors
    annotation.remove()
    root, twin = "bwd:model:Sequential", "bwd:1:Twin"
    expected = {
        "outside": [],
        "twin after": [root, twin],
        "twin between": [root, twin],
        "a": [root, twin, "bwd:1.a:Branch"],
        "b": [root, twin, "bwd:1.b:Branch"],
        "twin before": [root, twin],
    }
    assert sorted(seen) == sorted(list(expected.items()) * 2)
    parents(recorder.ranges)  # properly nested on every thread


def test_graphs_never_used_for_backward_are_not_kept(recorder: Recorder) -> None:
    """Evaluation with grad on (no backward): each forward's graph is freed as the user
    drops it, not held by the annotation until a backward pass that never comes."""
    from dlprof_lite.annotate import install

    class Marker:
        pass

    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, marker: Marker) -> torch.Tensor:
            ctx.marker = marker  # lives as long as the graph
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
            return grad, None

    lin = nn.Linear(4, 4)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, x: torch.Tensor, marker: Marker) -> torch.Tensor:
            return Keep.apply(self.lin(x), marker)

    model = Net().eval()
    annotation = install("modules")
    alive = []

    def evaluate() -> None:  # the frame naming the model dies with each call (its locals too)
        marker = Marker()
        alive.append(weakref.ref(marker))
        model(torch.randn(2, 4), marker).sum().item()

    for _ in range(10):
        evaluate()
    gc.collect()
    kept = sum(ref() is not None for ref in alive)
    annotation.remove()
    assert kept <= 1  # the last graph, until the next model forward or the end


def test_module_fact_once_per_module_with_shapes_and_dtypes(recorder: Recorder) -> None:
    """Each module's first call writes one ``module`` fact: input shapes, dtypes, autocast."""
    from dlprof_lite.annotate import install
    from dlprof_lite.rules.facts import parse_fact

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    annotation = install("modules")
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(torch.randn(2, 3, 8, 8))
        F.cross_entropy(out.float(), torch.tensor([0, 1])).backward()
        opt.step()
        opt.zero_grad()
    annotation.remove()
    found = [parse_fact(text) for _, text in recorder.marks]
    modules = {value["layer"]: value for key, value in filter(None, found) if key == "module"}
    assert len([f for f in found if f and f[0] == "module"]) == len(modules) == 5
    conv, relu, linear = modules["0"], modules["1"], modules["3"]
    assert (conv["type"], conv["in_shape"], conv["dtype"]) == ("Conv2d", "2x3x8x8", "float32")
    assert conv["param_dtype"] == "float32" and conv["autocast"] == "bfloat16"
    assert conv["tf32"] is bool(torch.backends.cuda.matmul.allow_tf32)
    assert conv["tf32_conv"] is bool(torch.backends.cudnn.allow_tf32)
    assert relu["param_dtype"] is None and relu["in_shape"] == "2x4x6x6"
    assert relu["dtype"] == "bfloat16"  # the conv's output under autocast
    assert linear["in_shape"] == "2x144" and linear["device"] == "cpu"
    assert modules["model"]["type"] == "Sequential"
