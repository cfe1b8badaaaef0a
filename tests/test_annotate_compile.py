"""Compiled models under annotation: no graph break or recompile added, ranges around them.

The oracle is Dynamo's own bookkeeping (``torch._dynamo.utils.counters``: graph breaks,
unique graphs, ops captured, frames converted after the first step, i.e. recompiles) for the
same training loop run without annotation. (With ``model.compile()`` Dynamo runs
``_call_impl`` eagerly and converts each hook it calls as a frame of its own: our hooks
become two more frames that capture nothing, once; no graph, no break, no recompile.) In
process, with the recording backend and ``aot_eager`` (no C++ compiler needed, fast); under
the real nsys through the bootstrap with Inductor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from dlprof_lite.annotate import backend as backend_module  # noqa: E402
from dlprof_lite.annotate import hooks as hooks_module  # noqa: E402
from dlprof_lite.annotate import phases as phases_module  # noqa: E402
from test_annotate import Recorder, inside, nsys_profile, parents  # noqa: E402

STEPS = 4


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def train(how: str) -> dict[str, Any]:
    """A compiled training loop; Dynamo's counters for it."""
    from torch._dynamo.utils import counters

    counters.clear()
    torch.manual_seed(0)
    net = Net()
    if how == "method":
        net.compile(backend="aot_eager")
        compiled = net
    else:
        compiled = torch.compile(net, backend="aot_eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    frames = []
    for _ in range(STEPS):
        x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
        loss = nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        frames.append(counters["frames"]["total"])
    assert counters["frames"]["ok"] == counters["frames"]["total"]
    return {
        "graph_breaks": sum(counters["graph_break"].values()),
        "unique_graphs": counters["stats"]["unique_graphs"],
        "calls_captured": counters["stats"]["calls_captured"],
        "recompiles": frames[-1] - frames[0],  # frames converted after the first step
    }


@pytest.mark.parametrize("how", ["method", "wrapper"])
def test_compiled_model_same_graphs_and_its_ranges(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from dlprof_lite.annotate import install

    torch._dynamo.reset()  # (it also drops compile callbacks: never after install)
    plain = train(how)
    torch._dynamo.reset()
    rec = Recorder()
    monkeypatch.setattr(backend_module, "_backend", rec)
    monkeypatch.setattr(backend_module, "_decided", True)
    monkeypatch.setattr(phases_module, "_shared", None)
    annotation = install("modules")
    try:
        annotated = train(how)
    finally:
        annotation.remove()
        hooks_module._installed = None
    assert annotated == plain
    assert plain["graph_breaks"] == 0 and plain["unique_graphs"] >= 1
    ranges = rec.ranges
    parents(ranges)
    counts = Counter(r.name for r in ranges if r.name.startswith(("fwd:", "bwd:")))
    # model.compile(): the first call compiles before the wrapper is in place
    calls = STEPS - 1 if how == "method" else STEPS
    assert counts == {"fwd:net:Net": calls, "bwd:net:Net": calls}, counts
    forward = [r for r in ranges if r.name == "forward"]
    backward = [r for r in ranges if r.name == "backward"]
    # after the first step (whose phases the compile phase splits): inside their phases
    for item in [r for r in ranges if r.name == "fwd:net:Net"][-(STEPS - 1) :]:
        assert any(inside(item, f) for f in forward)
    for item in [r for r in ranges if r.name == "bwd:net:Net"][-(STEPS - 1) :]:
        assert any(inside(item, b) for b in backward)
    assert len([r for r in ranges if r.name == "iteration"]) == STEPS


def test_remove_restores_compiled_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlprof_lite.annotate import install
    from dlprof_lite.annotate.compiled import _RootCall

    monkeypatch.setattr(backend_module, "_backend", Recorder())
    monkeypatch.setattr(backend_module, "_decided", True)
    monkeypatch.setattr(phases_module, "_shared", None)
    annotation = install("modules")
    net = Net()
    net.compile(backend="aot_eager")
    net(torch.randn(2, 8))
    assert isinstance(net.__dict__["_compiled_call_impl"], _RootCall)
    annotation.remove()
    hooks_module._installed = None
    assert not isinstance(net.__dict__["_compiled_call_impl"], _RootCall)
    net(torch.randn(2, 8))


SCRIPT = """
import json, sys, time
import torch
from torch import nn
from torch._dynamo.utils import counters

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.body(x)

model = Net()
model.compile()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
crit = nn.CrossEntropyLoss()
for step in range(STEPS):
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = crit(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step == 0:
        first = counters["frames"]["total"]
json.dump({"graph_breaks": sum(counters["graph_break"].values()),
           "recompiles": counters["frames"]["total"] - first,
           "calls_captured": counters["stats"]["calls_captured"],
           "unique_graphs": counters["stats"]["unique_graphs"]}, open(sys.argv[1], "w"))
"""


@pytest.mark.nsys
def test_compiled_script_under_nsys(nsys: str, tmp_path: Path) -> None:
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("STEPS", str(STEPS)))
    plain = tmp_path / "plain.json"
    done = subprocess.run([sys.executable, str(script), str(plain)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    profiled = tmp_path / "profiled.json"
    status = tmp_path / "status.json"
    ranges = nsys_profile(nsys, tmp_path, [str(script), str(profiled)], "--status-file",
                          str(status))  # fmt: skip
    assert json.loads(status.read_text())["installed"] is True
    assert json.loads(profiled.read_text()) == json.loads(plain.read_text())
    counts = Counter(r.name for r in ranges if r.name.startswith(("fwd:", "bwd:")))
    assert counts["fwd:model:Net"] == counts["bwd:model:Net"] == STEPS - 1
    assert not any(".body" in name or "GraphModule" in name for name in counts)
    assert len([r for r in ranges if r.name == "iteration"]) == STEPS
    assert any(r.name == "compile" for r in ranges)
