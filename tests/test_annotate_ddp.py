"""DDP gradient buckets: the annotation tags each bucket's all-reduce and says whose gradients
it carries, without changing what DDP computes.

In-process, on a real one-process gloo group, with the recording backend of
``test_annotate``. The oracle for a bucket's composition is DDP itself: a comm hook of the
test's own on an identical, unannotated model records the parameters DDP hands it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = torch.distributed
nn = torch.nn

from dlprof_lite.rules.names import (  # noqa: E402
    DDP_BUCKET,
    DDP_BUCKET_RE,
    FACT_PREFIX,
)
from test_annotate import Recorder, inside  # noqa: E402

STEPS = 3
WIDTH = 256  # each Linear(256, 256) holds 257 KiB of gradients: several buckets at 0.3 MB


def make_model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 4))


def train(model: nn.Module, steps: int = STEPS) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, WIDTH, generator=gen), torch.randint(0, 4, (8,), generator=gen)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def ddp(module: nn.Module) -> Any:
    return nn.parallel.DistributedDataParallel(module, bucket_cap_mb=0.3)


def ddp_truth() -> tuple[list[dict[int, dict[str, int]]], dict[str, torch.Tensor]]:
    """Per step, DDP's buckets as a comm hook sees them (index -> layer -> gradient bytes),
    and the trained weights, from an unannotated run."""
    model = ddp(make_model())
    # Layer names leave DDP out (no ``module.``): the wrapped model's own parameter names.
    owner = {id(p): name.rsplit(".", 1)[0] for name, p in model.module.named_parameters()}
    steps: list[dict[int, dict[str, int]]] = []

    def hook(state: Any, bucket: Any) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        if bucket.index() == 0:
            steps.append({})
        layers = steps[-1].setdefault(bucket.index(), {})
        for p in bucket.parameters():
            layers[owner[id(p)]] = layers.get(owner[id(p)], 0) + p.numel() * p.element_size()
        return allreduce_hook(state, bucket)

    hook.__annotations__ = {}  # DDP checks them; they are strings under __future__
    model.register_comm_hook(None, hook)
    train(model)
    return steps, {k: v.detach().clone() for k, v in model.state_dict().items()}


def bucket_facts(rec: Recorder) -> dict[int, dict[str, Any]]:
    facts = {}
    for _, text in rec.marks:
        if text.startswith(FACT_PREFIX):
            data = json.loads(text[len(FACT_PREFIX) :])
            if DDP_BUCKET in data:
                facts[data[DDP_BUCKET]["id"]] = data[DDP_BUCKET]
    return facts


def test_buckets_are_tagged_with_their_layers(recorder: Recorder, group: Any) -> None:
    truth, weights = ddp_truth()
    assert len(truth[-1]) >= 3, "the model should fill several buckets"
    from dlprof_lite.annotate import install

    annotation = install("modules")
    model = ddp(make_model())
    train(model)
    annotation.close()

    facts = bucket_facts(recorder)
    ranges = [r for r in recorder.ranges if DDP_BUCKET_RE.match(r.name)]
    backward = [r for r in recorder.ranges if r.name == "backward"]
    assert len(backward) == STEPS
    per_step = [[r for r in ranges if inside(r, b)] for b in backward]
    assert sum(map(len, per_step)) == len(ranges), "every bucket range is inside a backward"
    for step, (seen, expected) in enumerate(zip(per_step, truth, strict=True)):
        assert len(seen) == len(expected), f"step {step}: one range per bucket"
        for item in seen:
            fact = facts[int(DDP_BUCKET_RE.match(item.name)["id"])]  # type: ignore[index]
            assert fact["layers"] == expected[fact["index"]], (step, fact)
            assert fact["bytes"] == sum(expected[fact["index"]].values())
            assert fact["model"] == "model"
    # What DDP computed is unchanged: the same weights after the same steps.
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_a_scripts_own_comm_hook_is_kept(recorder: Recorder, group: Any) -> None:
    from dlprof_lite.annotate import install

    annotation = install("modules")
    model = ddp(make_model())
    with torch.no_grad():  # an evaluation pass before the hook is registered
        model(torch.randn(2, WIDTH))
    calls = []

    def mine(state: Any, bucket: Any) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    mine.__annotations__ = {}
    model.register_comm_hook(None, mine)
    train(model)
    annotation.close()
    assert calls, "the script's hook runs"
    assert not bucket_facts(recorder)
    assert not [r for r in recorder.ranges if DDP_BUCKET_RE.match(r.name)]


def test_a_ddp_model_is_counted_through_its_wrapper(recorder: Recorder, group: Any) -> None:
    """The FLOP count runs DDP's module, never DDP's own forward (which would start its
    reducer's work): the model's layer gets the wrapped model's FLOPs, as FlopCounterMode
    counts them on the plain model, and training is as without the count."""
    from torch.utils.flop_counter import FlopCounterMode

    from dlprof_lite.annotate import install
    from dlprof_lite.rules.facts import parse_fact

    _, weights = ddp_truth()
    annotation = install("modules")
    model = ddp(make_model())
    train(model)
    annotation.close()
    found = [parse_fact(text) for _, text in recorder.marks]
    flops = {v["layer"]: v for k, v in filter(None, found) if k == "flops"}
    x = torch.randn(8, WIDTH)
    with FlopCounterMode(display=False) as forward:
        out = make_model()(x)
    with FlopCounterMode(display=False) as backward:
        out.sum().backward()
    root = flops["model"]
    assert root["unknown"] is None
    assert (root["fwd"], root["bwd"]) == (forward.get_total_flops(), backward.get_total_flops())
    assert flops["0"]["fwd"] == 2 * 8 * WIDTH * WIDTH
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key]), key
