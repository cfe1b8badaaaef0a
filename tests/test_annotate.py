"""The annotation layer: range names, nesting and phases, in-process and under the real nsys.

Two layers of tests. The first runs the hooks in this process against a recording backend
(every push/pop/start/end in order, with its thread) and checks the ranges they make. The
second (marked ``nsys``) profiles small scripts with the real ``nsys profile --trace=nvtx``
through the bootstrap and reads the exported SQLite with ``sqlite3``: that is what the
analysis will read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

import builders

torch = pytest.importorskip("torch")
nn = torch.nn

from dlprof_lite.annotate.bootstrap import parse_args  # noqa: E402
from dlprof_lite.rules.names import DOMAIN, MODULE_RANGE_RE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "examples" / "lenet.py"
RESNET = ROOT / "examples" / "resnet.py"
LENET_LAYERS = ["conv1", "relu1", "pool1", "conv2", "pool2", "tanh", "flatten", "affine1",
                "relu2", "affine2", "softmax"]  # fmt: skip
PHASE_ORDER = ["data", "forward", "backward", "optimizer"]


# --- ranges, from a recording backend or from an nsys export ---------------------------


@dataclass
class Range:
    name: str
    start: int
    end: int
    tid: int | None  # None for start/end ranges (process-wide)


class Recorder:
    """A backend that records ranges instead of calling NVTX; time counts calls (ticks)."""

    nvtx_version = "test"

    def __init__(self) -> None:
        self.clock = 0
        self.ranges: list[Range] = []
        self.marks: list[tuple[int, str]] = []
        self.stacks: dict[int, list[Range]] = {}
        self.lock = threading.Lock()

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def prepare(self, *names: str) -> None:
        """Backend.prepare: nothing to make ahead here."""

    def push(self, name: str) -> None:
        with self.lock:
            tid = threading.get_ident()
            item = Range(name, self._tick(), -1, tid)
            self.ranges.append(item)
            self.stacks.setdefault(tid, []).append(item)

    def pop(self) -> None:
        with self.lock:
            stack = self.stacks.get(threading.get_ident())
            assert stack, "pop without a push on this thread"
            stack.pop().end = self._tick()

    def start(self, name: str, payload: int | None = None) -> Range:
        with self.lock:
            item = Range(name, self._tick(), -1, None)
            self.ranges.append(item)
            return item

    def end(self, item: Range) -> None:
        with self.lock:
            item.end = self._tick()

    def mark(self, message: str) -> None:
        with self.lock:
            self.marks.append((self._tick(), message))


def load_export(path: Path) -> list[Range]:
    """Push/pop and start/end ranges of our domain and of the default one, from an export."""
    sql = """
        SELECT e.start, e.end, e.eventType, coalesce(e.text, s.value), e.globalTid,
               coalesce(d.text, '')
        FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
        LEFT JOIN (SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75) d
               ON d.domainId = e.domainId
        WHERE e.eventType IN (59, 60) ORDER BY e.start, e.end DESC"""
    rows = builders.query(path, sql)
    return [Range(name if dom in (DOMAIN, "") else f"{dom}/{name}", start, end,
                  tid if kind == 59 else None)
            for start, end, kind, name, tid, dom in rows]  # fmt: skip


def parents(ranges: list[Range]) -> dict[int, Range | None]:
    """The enclosing push/pop range of each push/pop range; fails on improper nesting."""
    result: dict[int, Range | None] = {}
    stacks: dict[int, list[Range]] = {}
    for item in sorted(ranges, key=lambda r: (r.start, -r.end)):
        if item.tid is None:
            continue
        assert item.end >= item.start, f"{item.name} never closed"
        stack = stacks.setdefault(item.tid, [])
        while stack and stack[-1].end <= item.start:
            stack.pop()
        if stack:
            assert item.end <= stack[-1].end, f"{item.name} overlaps {stack[-1].name}"
        result[id(item)] = stack[-1] if stack else None
        stack.append(item)
    return result


def named(ranges: list[Range], prefix: str) -> list[Range]:
    return [r for r in ranges if r.name.startswith(prefix)]


def inside(inner: Range, outer: Range) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end


def check_iterations(
    ranges: list[Range], count: int, data: bool = True, ticks: bool = True, cover: float = 0.95
) -> list[Range]:
    """``count`` iterations, each tiled by its phases in training order.

    ``data``: a DataLoader feeds the loop, so every iteration but the first starts with one.
    ``ticks``: times count backend calls (a recorder), so tiling means each phase ends on the
    call just before the next one starts; else (nsys times) the phases cover ``cover`` of all
    iterations' time (a preempted thread may take a while between two calls).
    """
    iterations = [r for r in ranges if r.name == "iteration"]
    assert len(iterations) == count
    phase_ranges = [r for r in ranges if r.name in PHASE_ORDER]
    covered = 0
    for number, it in enumerate(iterations):
        mine = sorted((p for p in phase_ranges if inside(p, it)), key=lambda p: p.start)
        order = [p.name for p in mine]
        assert order == PHASE_ORDER[0 if data and number else 1 :], order
        times = [it.start, *(t for p in mine for t in (p.start, p.end)), it.end]
        assert times == sorted(times), order
        if ticks:
            gaps = [b - a for a, b in pairwise(times)][0::2]  # iteration→phase, phase→phase
            assert gaps == [1] * len(gaps), gaps
        covered += sum(p.end - p.start for p in mine)
    if not ticks:
        total = sum(it.end - it.start for it in iterations)
        assert covered >= cover * total, (covered, total)
    outside = [p for p in phase_ranges if not any(inside(p, it) for it in iterations)]
    assert not outside, [p.name for p in outside]
    return iterations


# --- in-process tests ------------------------------------------------------------------


def lenet_module():
    sys.path.insert(0, str(LENET.parent))
    try:
        import lenet
    finally:
        sys.path.pop(0)
    return lenet


def test_lenet_in_process(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    lenet = lenet_module()
    annotation = install("modules-all")
    lenet.train(lenet.parse_args(["--steps", "3", "--batch-size", "8"]))
    annotation.remove()
    ranges = recorder.ranges
    parent = parents(ranges)
    counts = Counter(r.name for r in ranges)
    for layer in LENET_LAYERS:
        fwd = [r for r in ranges if MODULE_RANGE_RE.match(r.name) and r.name.split(":")[1] == layer]
        assert Counter(r.name.split(":")[0] for r in fwd) == {"fwd": 3, "bwd": 3}, layer
        for item in fwd:
            assert parent[id(item)].name.endswith(":model:LeNet")
    assert counts["fwd:model:LeNet"] == counts["bwd:model:LeNet"] == 3
    assert counts["bwd:CategoricalCrossEntropy:CategoricalCrossEntropy"] == 3
    iterations = check_iterations(ranges, 3)
    forward = [r for r in ranges if r.name == "forward"]
    backward = [r for r in ranges if r.name == "backward"]
    for item in named(ranges, "fwd:"):
        assert any(inside(item, p) for p in forward), item.name
    for item in named(ranges, "bwd:"):
        assert any(inside(item, p) for p in backward), item.name
    assert all(it.end > 0 for it in iterations)


def test_parameter_free_first_layer_backward_covers_its_work(recorder: Recorder) -> None:
    """bwd of a module whose input needs no grad ends after its children, not at once."""
    from dlprof_lite.annotate import annotate_model

    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))
    handle = annotate_model(model)
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    handle.remove()
    ranges = recorder.ranges
    parent = parents(ranges)
    root = next(r for r in ranges if r.name == "bwd:model:Sequential")
    conv = next(r for r in ranges if r.name == "bwd:0:Conv2d")
    assert parent[id(conv)] is root
    assert [r.name for r in named(ranges, "bwd:") if parent[id(r)] is root] == [
        "bwd:3:Linear", "bwd:2:Flatten", "bwd:1:ReLU", "bwd:0:Conv2d"]  # fmt: skip


def test_inplace_ops_and_residuals_work(recorder: Recorder) -> None:
    """ReLU(inplace=True) after BatchNorm and ``out += identity`` (full backward hooks fail)."""
    from dlprof_lite.annotate import install

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # as torchvision's BasicBlock
            out = self.bn2(self.conv2(self.relu(self.bn(self.conv(x)))))
            out += x
            return self.relu(out)

    model = nn.Sequential(nn.Conv2d(1, 4, 1), Block())
    annotation = install("modules")
    model(torch.randn(2, 1, 5, 5)).sum().backward()
    annotation.remove()
    counts = Counter(r.name for r in recorder.ranges)
    assert counts["fwd:1.relu:ReLU"] == 2
    assert counts["bwd:1.relu:ReLU"] == 2
    assert counts["bwd:1.bn:BatchNorm2d"] == counts["bwd:1:Block"] == 1
    parents(recorder.ranges)


def test_module_called_twice_and_forward_that_raises(recorder: Recorder) -> None:
    from dlprof_lite.annotate import annotate_model

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = nn.Linear(4, 4)
            self.fail = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.block(self.block(x))
            if self.fail:
                raise RuntimeError("boom")
            return x

    model = Twice()
    handle = annotate_model(model)
    model(torch.randn(2, 4)).sum().backward()
    model.fail = True
    with pytest.raises(RuntimeError):
        model(torch.randn(2, 4))
    model.fail = False
    model(torch.randn(2, 4))
    handle.remove()
    counts = Counter(r.name for r in recorder.ranges)
    assert counts["fwd:block:Linear"] == 6
    assert counts["bwd:block:Linear"] == 2
    assert counts["fwd:model:Twice"] == 3
    parent = parents(recorder.ranges)  # every range closed, properly nested
    assert all(parent[id(r)] is None for r in recorder.ranges if r.name == "fwd:model:Twice")


def test_no_grad_evaluation_opens_no_backward_or_iteration(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = nn.Linear(3, 2)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), 2)
    evaluation = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(6, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules")
    for (x,) in data:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        for (x,) in evaluation:
            model(x)
    annotation.remove()
    counts = Counter(r.name for r in recorder.ranges)
    assert counts["fwd:model:Linear"] == 4 + 6
    assert counts["bwd:model:Linear"] == 4
    check_iterations(recorder.ranges, 4)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_keeps_nesting(recorder: Recorder, reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    from dlprof_lite.annotate import install

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(4, 4)
            self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.block, self.stem(x), use_reentrant=reentrant)

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    annotation = install("modules-all")
    for _ in range(2):
        model(torch.randn(2, 4, requires_grad=reentrant)).sum().backward()
        opt.step()
    annotation.remove()
    ranges = recorder.ranges
    parent = parents(ranges)
    check_iterations(ranges, 2, data=False)
    block_bwd = [r for r in ranges if r.name == "bwd:block:Sequential"]
    assert len(block_bwd) == 2
    backward = [r for r in ranges if r.name == "backward"]
    recomputed = [r for r in ranges if r.name == "rec:block.0:Linear"
                  and any(inside(r, b) for b in backward)]  # fmt: skip
    assert len(recomputed) == 2
    for item in recomputed:
        chain = [parent[id(item)]]
        while chain[-1] is not None:
            chain.append(parent[id(chain[-1])])
        if reentrant:  # recomputed first, then backward through the new graph
            assert any(b.start > item.end for b in block_bwd)
        else:  # recomputed inside the block's backward, when a node needs a saved tensor
            assert "bwd:block:Sequential" in [r.name for r in chain[:-1]]
    assert Counter(r.name for r in ranges)["bwd:block.0:Linear"] == 2


def test_depth_limit_and_phases_level(recorder: Recorder) -> None:
    from dlprof_lite.annotate import install

    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        model(torch.randn(3, 2)).sum().backward()
        opt.step()

    annotation = install("modules", depth=1)
    step()
    names = {r.name for r in recorder.ranges}
    assert {"fwd:model:Sequential", "fwd:0:Sequential", "bwd:1:Linear"} <= names
    assert not any(name.startswith(("fwd:0.", "bwd:0.")) for name in names)
    annotation = install("phases")  # replaces the first
    recorder.ranges.clear()
    step()
    annotation.remove()
    assert sorted(r.name for r in recorder.ranges) == ["backward", "forward", "iteration",
                                                       "optimizer"]  # fmt: skip


def test_manual_ranges(recorder: Recorder) -> None:
    from dlprof_lite import annotate

    @annotate.range("helper")
    def helper() -> int:
        return 1

    with annotate.iteration(7):
        with annotate.phase("data"):
            helper()
        with annotate.phase("forward"), annotate.range("mine"):
            pass
    ranges = recorder.ranges
    assert [r.name for r in ranges] == ["iteration", "data", "helper", "forward", "mine"]
    assert all(r.end > r.start for r in ranges)
    with pytest.raises(ValueError):
        annotate.phase("loading")


def test_off_without_a_profiler_registers_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVTX_", "DLPROF_LITE"))}
    code = textwrap.dedent("""
        import sys
        from dlprof_lite import annotate
        assert not annotate.enabled()
        with annotate.range("x"), annotate.phase("forward"), annotate.iteration():
            pass
        assert "nvtx" not in sys.modules, "nvtx imported without a profiler"
        import torch
        from torch.nn.modules import module
        handle = annotate.install("modules")
        model_handle = annotate.annotate_model(torch.nn.Linear(2, 2))
        assert not handle.active and not model_handle.active
        assert not module._global_forward_pre_hooks and not module._global_forward_hooks
        assert "pandas" not in sys.modules
    """)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_bootstrap_imports_no_pandas_even_when_on(tmp_path: Path) -> None:
    script = tmp_path / "uses_torch.py"
    script.write_text("import sys, torch\nassert 'pandas' not in sys.modules\n"
                      "torch.nn.Linear(2, 2)(torch.ones(1, 2))\n")  # fmt: skip
    env = {**os.environ, "DLPROF_LITE_NVTX": "on"}
    status = tmp_path / "status.json"
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite.annotate.bootstrap", "--status-file", str(status),
         str(script)], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(status.read_text())["installed"] is True


# --- the bootstrap as a runner ---------------------------------------------------------

SHOW = "import json, sys; print(json.dumps([__name__, sys.argv, sys.path[0]])); sys.exit({code})"


def run_bootstrap(args: list[str], cwd: Path, status: Path) -> tuple[int, list]:
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite.annotate.bootstrap", "--annotate", "none",
         "--status-file", str(status), *args],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def test_bootstrap_runs_script_module_and_code_like_python(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    sub = tmp_path / "scripts"
    sub.mkdir()
    (sub / "prog.py").write_text(SHOW.format(code=3))
    code, (name, argv, path0) = run_bootstrap([str(sub / "prog.py"), "-x", "--y"], tmp_path, status)
    assert (code, name, argv, path0) == (3, "__main__", [str(sub / "prog.py"), "-x", "--y"],
                                         str(sub))  # fmt: skip
    assert json.loads(status.read_text())["exit_code"] == 3
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SHOW.format(code=0))
    code, (name, argv, path0) = run_bootstrap(["-m", "pkg.train", "a"], tmp_path, status)
    assert (code, name, argv[1:], path0) == (0, "__main__", ["a"], str(tmp_path))
    assert argv[0] == str(pkg / "train.py")
    code, (name, argv, _) = run_bootstrap(["-c", SHOW.format(code="'bad'"), "z"], tmp_path, status)
    assert (code, name, argv) == (1, "__main__", ["-c", "z"])
    assert json.loads(status.read_text())["exit_code"] == 1


def test_bootstrap_reports_a_crash(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text("raise ValueError('broken script')\n")
    status = tmp_path / "status.json"
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite.annotate.bootstrap", "--status-file", str(status),
         str(script)], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "ValueError: broken script" in done.stderr
    assert json.loads(status.read_text())["exit_code"] == 1


def test_bootstrap_options() -> None:
    opts = parse_args(["--annotate", "phases", "--depth", "2", "-m", "pkg", "--annotate", "x"])
    assert (opts.annotate, opts.depth, opts.kind, opts.target, opts.args) == (
        "phases", 2, "module", "pkg", ["--annotate", "x"])  # fmt: skip
    for bad in (["--annotate", "all", "x.py"], ["--depth", "-1", "x.py"], [], ["--what"]):
        with pytest.raises(ValueError):
            parse_args(bad)


# --- under the real nsys ---------------------------------------------------------------


def nsys_profile(nsys: str, tmp_path: Path, program: list[str], *boot: str) -> list[Range]:
    """Profile ``program`` (NVTX only) through the bootstrap; its ranges from the export."""
    out = tmp_path / "p"
    args = [nsys, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none",
            f"--output={out}", "--force-overwrite=true", "--export=sqlite",
            sys.executable, "-m", "dlprof_lite.annotate.bootstrap", *boot, *program]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return load_export(out.with_suffix(".sqlite"))


@pytest.mark.nsys
def test_lenet_under_nsys(nsys: str, tmp_path: Path) -> None:
    ranges = nsys_profile(nsys, tmp_path, [str(LENET), "--steps", "4", "--batch-size", "16"],
                          "--annotate", "modules-all")  # every layer, every step
    parent = parents(ranges)
    for layer in LENET_LAYERS:
        mine = [r for r in ranges if r.name.startswith(("fwd:", "bwd:"))
                and r.name.split(":")[1] == layer]  # fmt: skip
        assert Counter(r.name[:3] for r in mine) == {"fwd": 4, "bwd": 4}, layer
        assert all(r.end > r.start for r in mine)
        assert all(parent[id(r)].name.endswith(":model:LeNet") for r in mine)
    check_iterations(ranges, 4, ticks=False)


@pytest.mark.nsys
def test_own_ranges_are_kept_and_annotate_none_writes_none(nsys: str, tmp_path: Path) -> None:
    script = tmp_path / "own.py"
    script.write_text(
        textwrap.dedent("""
        import nvtx, torch
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            with nvtx.annotate("my_step"):
                model(torch.ones(2, 3)).sum().backward()
                opt.step()
    """)
    )
    ranges = nsys_profile(nsys, tmp_path, [str(script)])
    parent = parents(ranges)
    steps = [r for r in ranges if r.name == "my_step"]
    assert len(steps) == 2
    assert all(parent[id(r)] in steps for r in ranges if r.name == "fwd:model:Linear")
    check_iterations(ranges, 2, data=False, ticks=False, cover=0.5)  # sub-ms steps
    ranges = nsys_profile(nsys, tmp_path, [str(script)], "--annotate", "none")
    assert [r.name for r in ranges] == ["my_step", "my_step"]
