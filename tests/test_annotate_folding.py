"""Adaptive depth (issue 25): after the warm-up step, modules too short to time are folded.

The rule on hand-made numbers (:func:`choose_folds`), then in-process with the recording
backend of ``test_annotate`` on models whose modules take known times: ``Wait`` works 3 ms
(far above the threshold of 20x the measured hook cost, ~200 µs here), ``Tag`` is a few µs and
writes a ``tag`` range in its forward and its backward, the oracle for "its time is in the
parent's": after warm-up the innermost module range around each ``tag`` is its parent's.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from dlprof_lite.annotate import backend as backend_module  # noqa: E402
from dlprof_lite.annotate.folding import Fold, Timed, choose_folds, fold_facts  # noqa: E402
from dlprof_lite.rules.facts import parse_fact  # noqa: E402
from dlprof_lite.rules.folding import DOMINANT_SHARE, FOLD_FACTOR, FOLDED_PER_FACT  # noqa: E402
from test_annotate import Range, Recorder, parents  # noqa: E402

# --- the rule ------------------------------------------------------------------------------


def test_fold_rule_on_round_numbers() -> None:
    """Threshold 200 µs (20 x 10 µs), warm-up forward 10 ms: dominant = 5 % = 500 µs."""
    assert FOLD_FACTOR == 20 and DOMINANT_SHARE == 0.05
    timed = [
        Timed("relu", 2_000, 2_000),  # short: folded
        Timed("conv", 300_000, 300_000),  # long: kept
        Timed("edge", 200_000, 200_000),  # at the threshold: kept (strictly below folds)
        Timed("act", 199_999, 199_999),  # just below: folded
        Timed("shared", 3_000, 600_000),  # short calls adding up to 6 % of it: kept
        Timed("model", 1_000, 1_000, kept=True),  # a root (or GPU matmul): kept
    ]
    folds = choose_folds(timed, threshold_ns=20 * 10_000, forward_ns=10_000_000)
    assert [t.layer for t in folds] == ["relu", "act"]


def test_fold_facts_are_small_marks() -> None:
    folds = [Fold(f"m{i}", i, "model", None) for i in range(FOLDED_PER_FACT + 1)]
    values = fold_facts(folds, hook_ns=9_000, threshold_ns=180_000)
    assert [len(v["modules"]) for v in values] == [FOLDED_PER_FACT, 1]
    assert values[0]["modules"][0] == ["m0", 0, "model", None]
    assert all(v["factor"] == FOLD_FACTOR and v["threshold_ns"] == 180_000 for v in values)


# --- in-process ----------------------------------------------------------------------------


class TagFn(torch.autograd.Function):
    """Identity writing a ``tag:fwd`` range in its forward and ``tag:bwd`` in its backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        backend = backend_module.get_backend()
        backend.push("tag:fwd")
        backend.pop()
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        backend = backend_module.get_backend()
        backend.push("tag:bwd")
        backend.pop()
        return grad


class Tag(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TagFn.apply(x)


def busy(ns: int) -> None:
    """Work for ``ns`` (the warm-up times the thread's CPU time: a sleep would be no work)."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class Wait(nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.ns = int(seconds * 1e9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        busy(self.ns)
        return x * 1.0


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wait = Wait(0.003)
        self.tag = Tag()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.wait(x)
        for _ in range(3):  # three calls a step: a median of three in warm-up
            x = self.tag(x)
        return x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.fc(x)
        return self.block(x)


def train(model: nn.Module, steps: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        F.mse_loss(model(torch.randn(4, 8)), torch.zeros(4, 8)).backward()
        opt.step()
        opt.zero_grad()


def fresh(model: nn.Module) -> nn.Module:
    """``model`` after one unannotated step: first-call costs (lazy init) are behind it."""
    train(model, 1)
    return model


def iterations(ranges: list[Range]) -> list[Range]:
    return [r for r in ranges if r.name == "iteration"]


def in_step(item: Range, step: Range) -> bool:
    return step.start <= item.start and item.end <= step.end


def folded_facts(rec: Recorder) -> list[dict[str, Any]]:
    found = [parse_fact(text) for _, text in rec.marks]
    return [value for key, value in filter(None, found) if key == "folded"]


def module_ranges(ranges: list[Range], step: Range) -> Counter[str]:
    return Counter(r.name for r in ranges if r.name[:4] in ("fwd:", "bwd:") and in_step(r, step))


def innermost_module(item: Range, parent: dict[int, Range | None]) -> str | None:
    up = parent[id(item)]
    while up is not None and up.name[:4] not in ("fwd:", "bwd:"):
        up = parent[id(up)]
    return up.name if up is not None else None


def test_short_modules_stop_after_warm_up_and_their_time_is_the_parents(
    recorder: Recorder,
) -> None:
    from dlprof_lite.annotate import install

    model = fresh(Net())
    annotation = install("modules")
    train(model, 4)
    annotation.remove()
    ranges = recorder.ranges
    parent = parents(ranges)
    steps = iterations(ranges)
    assert len(steps) == 4
    everything = {"fwd:model:Net", "fwd:fc:Linear", "fwd:block:Block", "fwd:block.wait:Wait",
                  "fwd:block.tag:Tag", "bwd:model:Net", "bwd:fc:Linear", "bwd:block:Block",
                  "bwd:block.wait:Wait", "bwd:block.tag:Tag"}  # fmt: skip
    assert set(module_ranges(ranges, steps[0])) == everything  # warm-up: every module
    kept = {"fwd:model:Net", "fwd:block:Block", "fwd:block.wait:Wait", "bwd:model:Net",
            "bwd:block:Block", "bwd:block.wait:Wait"}  # fmt: skip
    for step in steps[1:]:
        assert set(module_ranges(ranges, step)) == kept
        tags = [r for r in ranges if r.name.startswith("tag:") and in_step(r, step)]
        assert len(tags) == 6
        for tag in tags:  # the folded module's work runs inside its parent's range
            direction = "fwd" if tag.name == "tag:fwd" else "bwd"
            assert innermost_module(tag, parent) == f"{direction}:block:Block", tag

    (fact,) = folded_facts(recorder)
    assert fact["factor"] == FOLD_FACTOR
    assert fact["threshold_ns"] == FOLD_FACTOR * fact["hook_ns"] > 0
    modules = {layer: (median, into, after) for layer, median, into, after in fact["modules"]}
    assert set(modules) == {"fc", "block.tag"}
    assert modules["fc"][1:] == ("model", "model")  # first called right after the root
    assert modules["block.tag"][1:] == ("block", "block.wait")
    assert all(0 < median < fact["threshold_ns"] for median, _, _ in modules.values())


def test_the_exit_fact_counts_annotated_calls_only(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = fresh(Net())
    annotation = install("modules")
    train(model, 3)
    annotation.close()
    annotation.remove()
    found = [parse_fact(text) for _, text in recorder.marks]
    (fact,) = [value for key, value in filter(None, found) if key == "annotation"]
    # warm-up: model, fc x3, block, wait, tag x3 = 9; then model, block, wait = 3 a step
    assert fact["module_calls"] == 9 + 2 * 3
    assert (fact["warmup_calls"], fact["warmup_steps"], fact["steps"]) == (9, 1, 3)
    assert fact["ns_per_call"] > 0 and folded_facts(recorder)[0]["hook_ns"] > 0


class Busy(nn.Module):
    """About 20 µs of work a call: short, but called 300 times a step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        busy(20_000)
        return x * 1.0


class Many(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.busy = Busy()
        self.tag = Tag()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(300):
            x = self.busy(x)
        for _ in range(3):
            x = self.tag(x)
        return x


def test_a_short_module_that_dominates_the_step_is_kept(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = Many()
    x = torch.ones(2, requires_grad=True)
    model(x).sum().backward()  # first calls, unannotated
    annotation = install("modules")
    opt = torch.optim.SGD([x], lr=0.1)
    for _ in range(3):
        model(x).sum().backward()
        opt.step()
    annotation.remove()
    (fact,) = folded_facts(recorder)
    assert [m[0] for m in fact["modules"]] == ["tag"]  # busy: 300 x 20 µs, most of the step
    last = iterations(recorder.ranges)[-1]
    assert module_ranges(recorder.ranges, last)["fwd:busy:Busy"] == 300


def test_modules_all_and_depth_fold_nothing(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    for level, depth in (("modules-all", None), ("modules", 5)):
        model = fresh(Net())
        annotation = install(level, depth)
        train(model, 3)
        annotation.remove()
        assert not folded_facts(recorder)
        last = iterations(recorder.ranges)[-1]
        assert module_ranges(recorder.ranges, last)["fwd:block.tag:Tag"] == 3
        recorder.ranges.clear()


def test_inference_folds_after_the_first_call(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = fresh(Net()).eval()
    annotation = install("modules")
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 8))
    annotation.remove()
    calls = Counter(r.name for r in recorder.ranges if r.name.startswith("fwd:"))
    assert calls["fwd:model:Net"] == 3
    assert calls["fwd:block.tag:Tag"] == 3 and calls["fwd:fc:Linear"] == 3  # first call only
    assert {m[0] for m in folded_facts(recorder)[0]["modules"]} == {"fc", "block.tag"}


def test_accumulation_without_a_step_folds_at_the_second_forward(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = fresh(Net())
    annotation = install("modules")
    for _ in range(3):  # a hand-written update: no optimizer step
        F.mse_loss(model(torch.randn(4, 8)), torch.zeros(4, 8)).backward()
    annotation.remove()
    calls = Counter(r.name for r in recorder.ranges if r.name.startswith("fwd:"))
    assert calls["fwd:model:Net"] == 3 and calls["fwd:fc:Linear"] == 3  # the first forward's


class FakeNode:
    def __init__(self) -> None:
        self.hooks: list[Any] = []

    def register_prehook(self, hook: Any) -> None:
        self.hooks.append(hook)


def test_backward_hooks_only_where_the_owner_changes() -> None:
    """Autograd runs a graph's nodes in descending sequence number on a thread: a node needs
    the owner's pre-hook only where the owner differs from the node run before it, or where
    that node (reached from a side output only) may not run."""
    from dlprof_lite.annotate.backward import Call, _hook_owners

    root = Call("bwd:model:Net", None, 0)
    child = Call("bwd:fc:Linear", root, 3)
    # sequence numbers 0..7: root owns 0-2 and 5-7, the child 3-4; 6 only from a side output
    owner = [root, root, root, child, child, root, root, root]
    nodes = [FakeNode() for _ in owner]
    main = bytearray(seq != 6 for seq in range(len(nodes)))
    _hook_owners(None, nodes, main, owner, {})  # type: ignore[arg-type]
    hooked = [seq for seq, node in enumerate(nodes) if node.hooks]
    # 7 first; 6 side-only, 5 after it; 4 the child's first; 2 back to the root
    assert hooked == [2, 4, 5, 6, 7]
    assert [nodes[s].hooks[0].owner for s in hooked] == [root, child, root, root, root]
    # A graph on several devices runs on several engine threads: every node is hooked.
    nodes = [FakeNode() for _ in owner]
    _hook_owners(None, nodes, main, owner, {}, every=True)  # type: ignore[arg-type]
    assert all(node.hooks for node in nodes)


# --- the shortcut: a folded call skips torch's hook dispatch, and nothing else -------------


def test_folded_calls_skip_hook_dispatch_but_keep_torch_semantics(
    recorder: Recorder, tmp_path: Path
) -> None:
    from dlprof_lite.annotate import install

    model = fresh(Net())
    annotation = install("modules")
    train(model, 2)
    fc = model.fc
    assert type(fc.__dict__.get("_compiled_call_impl")).__name__ == "_Folded"
    assert "_compiled_call_impl" not in model.block.__dict__  # kept modules: the hooks
    x = torch.randn(4, 8)
    assert torch.equal(fc(x), F.linear(x, fc.weight, fc.bias))
    seen: list[str] = []
    handle = fc.register_forward_hook(lambda m, a, out: seen.append("hook"))
    fc(x)  # a hook of its own: through _call_impl, as torch would
    handle.remove()
    assert seen == ["hook"]
    # A copy or a saved model carries no fold (Module.__getstate__ drops the attribute).
    assert "_compiled_call_impl" not in copy.deepcopy(model).fc.__dict__
    torch.save(model, tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    assert "_compiled_call_impl" not in loaded.fc.__dict__
    annotation.remove()
    assert "_compiled_call_impl" not in fc.__dict__  # removal takes it off


def test_a_module_with_hooks_of_its_own_is_folded_by_its_flag(recorder: Recorder) -> None:
    """Its hooks must run: no shortcut, the range hooks return at once for it."""
    from dlprof_lite.annotate import install

    model = fresh(Net())
    seen: list[int] = []
    handle = model.fc.register_forward_hook(lambda m, a, out: seen.append(1))
    annotation = install("modules")
    train(model, 3)
    annotation.remove()
    handle.remove()
    assert "_compiled_call_impl" not in model.fc.__dict__
    assert len(seen) == 3 * 3  # three calls a step, every step
    last = iterations(recorder.ranges)[-1]
    assert "fwd:fc:Linear" not in module_ranges(recorder.ranges, last)
    assert {m[0] for m in folded_facts(recorder)[0]["modules"]} == {"fc", "block.tag"}


# --- under the real nsys -------------------------------------------------------------------


@pytest.mark.nsys
@pytest.mark.slow
def test_tiny_modules_are_folded_in_the_report_under_nsys(nsys: str, tmp_path: Path) -> None:
    """``real_scripts/tiny_modules.py`` by the real command (``dlprof-lite script.py``, the
    default ``--annotate``): its 40 blocks of tiny modules are folded after the warm-up step,
    ``big`` keeps its ranges; the report lists the folds in network order and says how to
    keep them; the annotation's cost is below the warning's 3 %."""
    import dlprof_lite
    from test_real_scripts import profile

    run = profile(nsys, tmp_path, "tiny_modules.py", "--steps", "6")  # --all-iterations
    rows = {r["layer"]: r for r in run.layers}
    folded = {name for name, row in rows.items() if row["folded_call_ns"]}
    leaves = [f"blocks.{i}.{j}" for i in range(40) for j in range(4)]
    assert sum(leaf in folded for leaf in leaves) >= 0.9 * len(leaves), sorted(folded)
    assert "big" not in folded and rows["big"]["calls"] == "6"
    assert all(rows[name]["calls"] == "1" for name in folded)  # the warm-up step's call

    report = dlprof_lite.analyze(run.out / "profile.sqlite")  # the window: warm-up left out
    table = report.layers
    assert [x for x in table["layer"] if x != "model"] == run.truth["modules"]  # network order
    window = table[table["folded_call_ns"].notna()].set_index("layer")
    assert set(window.index) == folded and window["calls"].isna().all()
    for name, parent in window["parent"].items():  # the annotated layer holding its time
        assert parent == "model" or name.startswith(f"{parent}."), (name, parent)
        assert parent not in folded
    (advice,) = [a for a in report.summary.advice if a.metric == "folded_call_ns"]
    assert "--annotate modules-all" in advice.recommendation
    assert report.summary["annotation_cost_pct"] < 3
