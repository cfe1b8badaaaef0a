"""Phases and iterations on the loop shapes people run: one iteration per training step.

In-process tests run small real loops (GAN, gradient accumulation, LR schedulers, closures,
GradScaler, no DataLoader, evaluation between epochs, inference, torch.compile) with the
recording backend of ``test_annotate`` and check each iteration against the loop's own step
count and the tiling of its phases. The ``nsys`` tests profile real scripts from
``tests/real_scripts`` through the bootstrap and compare with the step count the script wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from itertools import groupby
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from dlprof_lite.rules.facts import parse_fact  # noqa: E402
from dlprof_lite.rules.names import PHASES  # noqa: E402
from test_annotate import Range, Recorder, inside, nsys_profile  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent / "real_scripts"
DataLoader, TensorDataset = torch.utils.data.DataLoader, torch.utils.data.TensorDataset


def tiled(ranges: list[Range], count: int, ticks: bool = True) -> list[list[str]]:
    """``count`` iterations, each tiled by its phases; the phase names of each, in order.

    With a recorder (``ticks``) a phase starts on the call after the iteration's start or the
    previous phase's end, and the last one ends on the call before the iteration's end.
    """
    iterations = [r for r in ranges if r.name == "iteration"]
    assert len(iterations) == count, len(iterations)
    phases = [r for r in ranges if r.name in PHASES]
    result = []
    for it in iterations:
        mine = sorted((p for p in phases if inside(p, it)), key=lambda p: p.start)
        assert mine, "an iteration without phases"
        times = [it.start, *(t for p in mine for t in (p.start, p.end)), it.end]
        assert times == sorted(times), [p.name for p in mine]
        if ticks:
            assert mine[0].start == it.start + 1 and mine[-1].end == it.end - 1
        result.append([p.name for p in mine])
    outside = [p.name for p in phases if not any(inside(p, it) for it in iterations)]
    assert set(outside) <= {"compile"}, outside
    return result


def without_compile(names: list[str]) -> list[str]:
    """The phases around compilations, each interrupted phase once."""
    return [name for name, _ in groupby(n for n in names if n != "compile")]


def steps_of(names: list[list[str]]) -> list[int]:
    return [n.count("optimizer") for n in names]


@pytest.fixture
def annotate(recorder: Recorder):
    """``install('phases')``: phases and iterations without module ranges."""
    from dlprof_lite.annotate import hooks, install

    annotation = install("phases")
    yield annotation
    annotation.remove()
    hooks._installed = None


def gan(batches: int, loader: bool) -> None:
    """gan.py's loop: per batch a discriminator step, then a generator step."""
    generator = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
    discriminator = nn.Sequential(nn.Linear(8, 1))
    g_opt = torch.optim.Adam(generator.parameters())
    d_opt = torch.optim.Adam(discriminator.parameters())
    data = torch.randn(batches * 2, 8)
    source = DataLoader(TensorDataset(data), 2) if loader else ((b,) for b in data.split(2))
    for (real,) in source:
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        fake = generator(torch.randn(len(real), 4))
        d_loss = F.binary_cross_entropy_with_logits(discriminator(real), ones)
        d_loss = d_loss + F.binary_cross_entropy_with_logits(discriminator(fake.detach()), zeros)
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), ones)
        g_opt.zero_grad(set_to_none=True)
        g_loss.backward()
        g_opt.step()


@pytest.mark.parametrize("loader", [True, False])
def test_gan_two_optimizers_one_iteration_per_batch(annotate, recorder: Recorder, loader) -> None:
    gan(4, loader)
    annotate.close()
    names = tiled(recorder.ranges, 4)
    rounds = ["forward", "backward", "optimizer"] * 2
    assert names[0] == rounds
    assert names[1:] == [["data", *rounds] if loader else rounds] * 3


def test_accumulation_scheduler_and_set_to_none(annotate, recorder: Recorder) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    loader = DataLoader(TensorDataset(torch.randn(18, 4), torch.randint(0, 3, (18,))), 2)
    for i, (x, y) in enumerate(loader):
        (criterion(model(x), y) / 3).backward()
        if (i + 1) % 3 == 0:
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    annotate.close()
    names = tiled(recorder.ranges, 3)
    micro = ["data", "forward", "backward"]
    assert names == [[*micro[1:], *micro * 2, "optimizer"]] + [[*micro * 3, "optimizer"]] * 2


def test_closure_step_books_forward_backward_then_optimizer(annotate, recorder: Recorder) -> None:
    """LBFGS runs its closure up to max_iter+1 times inside one step."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    calls = []

    def closure() -> torch.Tensor:
        calls.append(1)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    opt.step(closure=closure)  # Lightning passes it by keyword
    annotate.close()
    names = tiled(recorder.ranges, 4)
    assert sum(n.count("forward") for n in names) == len(calls) > 4
    for n in names:
        assert n[0] == n[-1] == "optimizer"
        assert n[1:] == ["forward", "backward", "optimizer"] * n.count("forward")


def test_grad_scaler_and_a_skipped_step(annotate, recorder: Recorder) -> None:
    """GradScaler.step calls optimizer.step unless a gradient is inf: then that round of
    forward and backward belongs to the next iteration (no hook sees the skip). From the
    second step on, the end of each backward pass starts the optimizer phase (GradScaler's
    unscale and inf check are optimizer work, skipped step or not), so the skipped round
    keeps its own short optimizer phase, and the count of backward passes per step stays 1:
    the last iteration is again forward, backward, optimizer."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(8, 4)).float().pow(2).mean()
        scaler.scale(loss * (float("inf") if step == 1 else 1.0)).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    annotate.close()
    names = tiled(recorder.ranges, 3)
    one = ["forward", "backward", "optimizer"]
    assert names == [one, one + one, one]
    assert annotate.tracker.steps == 3
    assert annotate.tracker._backwards_per_step == 1


@pytest.mark.parametrize("accumulate", [1, 3])
def test_unscale_and_clipping_are_the_optimizers(annotate, recorder, accumulate: int) -> None:
    """With the end of each backward pass reported, what follows a step's last backward
    (GradScaler's unscale_, clip_grad_norm_) is optimizer time from the second step on."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    tracker, seen = annotate.tracker, []
    for _ in range(3):
        for _ in range(accumulate):
            # The end of each backward pass is reported by an autograd engine callback.
            scaler.scale(model(torch.randn(8, 4)).pow(2).mean()).backward()
        scaler.unscale_(opt)
        seen.append(tracker.phase)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    annotate.close()
    names = tiled(recorder.ranges, 3)
    rounds = ["forward", "backward"] * accumulate
    assert names == [[*rounds, "optimizer"]] * 3
    assert seen == ["backward", "optimizer", "optimizer"]  # the phase clipping ran in
    assert tracker._backwards_per_step == accumulate


def test_two_roots_in_one_backward_pass_end_it_once(annotate, recorder: Recorder) -> None:
    """A generator and a discriminator called one after the other are two root calls in one
    backward pass: the pass ends once, so a step holds one backward end, and from the
    second step on the optimizer phase starts where the backward pass ended."""
    gen, disc = nn.Linear(4, 4), nn.Linear(4, 1)
    opt = torch.optim.SGD(gen.parameters(), lr=0.1)
    tracker, seen = annotate.tracker, []
    for _ in range(3):
        disc(gen(torch.randn(8, 4))).mean().backward()
        seen.append(tracker.phase)
        opt.step()
    annotate.close()
    assert tracker._backwards_per_step == 1
    assert seen == ["backward", "optimizer", "optimizer"]
    assert tiled(recorder.ranges, 3) == [["forward", "backward", "optimizer"]] * 3


def test_two_backward_passes_through_one_graph(annotate, recorder: Recorder) -> None:
    """``backward(retain_graph=True)`` then ``backward()`` on the same loss: two passes per
    step, each reported, so the optimizer phase waits for the second one."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tracker, seen = annotate.tracker, []
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward(retain_graph=True)
        seen.append(tracker.phase)
        loss.backward()
        seen.append(tracker.phase)
        opt.step()
    annotate.close()
    assert tracker._backwards_per_step == 2
    assert seen == ["backward", "backward"] + ["backward", "optimizer"] * 2
    assert tiled(recorder.ranges, 3) == [["forward", "backward", "optimizer"]] * 3


def test_one_optimizer_twice_per_batch_is_one_step(annotate, recorder: Recorder) -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in DataLoader(TensorDataset(torch.randn(10, 4)), 2):
        for _ in range(2):
            model(x).sum().backward()
            opt.step()
    annotate.close()
    names = tiled(recorder.ranges, 5)
    assert steps_of(names) == [2] * 5


def test_nested_step_and_unused_optimizer_without_loader(annotate, recorder: Recorder) -> None:
    """A step that steps another optimizer (SAM) is one step; an optimizer that exists but
    never steps costs one misplaced boundary, not the count."""

    class Wrapper(torch.optim.Optimizer):
        def __init__(self, inner: torch.optim.Optimizer) -> None:
            super().__init__(inner.param_groups, {})
            self.inner = inner

        def step(self, closure=None):
            self.inner.step()

    def train(opt: torch.optim.Optimizer) -> None:
        for x in torch.randn(12, 4).split(2):
            model(x).sum().backward()
            opt.step()

    model = nn.Linear(4, 1)
    train(Wrapper(torch.optim.SGD(model.parameters(), lr=0.1)))  # both alive, both step
    names = tiled(recorder.ranges, 6)
    assert names == [["forward", "backward", "optimizer"]] * 6
    annotate.tracker._alive = None  # as in a fresh process
    recorder.ranges.clear()
    spare = torch.optim.Adam(nn.Linear(2, 2).parameters())  # alive, never steps
    train(torch.optim.SGD(model.parameters(), lr=0.1))
    annotate.close()
    assert spare is not None
    names = tiled(recorder.ranges, 6)
    assert steps_of(names) == [1] * 6
    assert names[2:] == [["forward", "backward", "optimizer"]] * 4


def test_a_step_that_raised_does_not_nest_the_next(annotate, recorder: Recorder) -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure(fail: bool) -> torch.Tensor:
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        if fail:
            raise FloatingPointError("nan loss")
        return loss

    for step in range(4):
        try:
            opt.step(lambda step=step: closure(step == 1))
        except FloatingPointError:
            continue
    annotate.close()
    assert annotate.tracker.steps == 3
    names = tiled(recorder.ranges, 3)  # the failed attempt belongs to the next step
    one = ["optimizer", "forward", "backward", "optimizer"]
    assert names == [one, one + one[1:], one]


def test_evaluation_between_epochs_stays_outside(annotate, recorder: Recorder) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(6, 4)), 2)
    val = DataLoader(TensorDataset(torch.randn(4, 4)), 2)
    for _ in range(2):
        model.train()
        for (x,) in train:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            for (x,) in val:
                model(x).argmax(1)
        with torch.inference_mode():
            model(torch.randn(2, 4))
    annotate.close()
    names = tiled(recorder.ranges, 6)
    assert names == [["forward", "backward", "optimizer"]] + [
        ["data", "forward", "backward", "optimizer"]] * 5  # fmt: skip


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("loader", [False, True])
def test_inference_iterations(annotate, recorder: Recorder, mode: str, loader: bool) -> None:
    """Each call of the model is one iteration: [data,] forward, ending with the call."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    criterion = nn.CrossEntropyLoss()
    data = torch.randn(10, 4)
    source = DataLoader(TensorDataset(data), 2) if loader else ((b,) for b in data.split(2))
    with getattr(torch, mode)():
        for (x,) in source:
            criterion(model(x), torch.zeros(len(x), dtype=torch.long))  # no iteration of its own
    annotate.close()
    names = tiled(recorder.ranges, 5)
    assert names == [["forward"]] + [["data", "forward"] if loader else ["forward"]] * 4
    forward_calls = [r for r in recorder.ranges if r.name == "forward"]
    iterations = [r for r in recorder.ranges if r.name == "iteration"]
    assert all(f.end + 1 == it.end for f, it in zip(forward_calls, iterations, strict=True))


def test_frozen_teacher_and_ema_forwards(annotate, recorder: Recorder) -> None:
    """two_models.py: a no-grad teacher before the student, an EMA model after the step.

    Before any step the teacher's first call looks like inference (one iteration with no
    optimizer phase, which the analysis drops once the profile has steps); after that the
    teacher is part of the step when a batch opened it, and outside iterations otherwise.
    """
    teacher, student = nn.Linear(4, 3).eval(), nn.Linear(4, 3)
    ema = nn.Linear(4, 3)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    for (x,) in DataLoader(TensorDataset(torch.randn(8, 4)), 2):
        with torch.no_grad():
            target = teacher(x).softmax(-1)
        F.kl_div(student(x).log_softmax(-1), target, reduction="batchmean").backward()
        opt.step()
        with torch.no_grad():
            ema(x)
    annotate.close()
    names = tiled(recorder.ranges, 5)
    assert names[0] == ["forward"]
    assert names[1:] == [["forward", "backward", "optimizer"]] + [
        ["data", "forward", "backward", "optimizer"]] * 3  # fmt: skip


def test_dataloader_fact_once_per_loader_that_fed_a_data_phase(annotate, recorder) -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=4, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)
    for _ in range(2):
        for (x,) in train:
            model(x).sum().backward()
            opt.step()
        with torch.no_grad():
            for (x,) in val:
                model(x)
    annotate.close()
    found = [parse_fact(text) for _, text in recorder.marks]
    found = [fact for fact in found if fact and fact[0] == "dataloader"]
    assert found == [("dataloader", {"dataset": "TensorDataset", "num_workers": 0,
                                     "batch_size": 4, "pin_memory": False,
                                     "persistent_workers": False, "length": 3})]  # fmt: skip
    tiled(recorder.ranges, 6)


def test_compile_phase_is_not_data(annotate, recorder: Recorder) -> None:
    """A compiled batch transform recompiles on a new batch shape: that time is compile,
    not data (the data phase is the wait in ``next()`` only, so nothing resumes after it),
    and so is the compiled loss's inside the forward."""

    def augment(x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean()) / (x.std() + 1)

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return out.pow(2).mean()

    augment = torch.compile(augment, backend="aot_eager", dynamic=False)
    loss_fn = torch.compile(loss_fn, backend="aot_eager", dynamic=False)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in DataLoader(TensorDataset(torch.randn(9, 4)), 4):  # batches of 4, 4, 1
        loss_fn(model(augment(x))).backward()
        opt.step()
    annotate.close()
    names = tiled(recorder.ranges, 3)
    assert names[1] == ["data", "forward", "backward", "optimizer"]
    assert names[2][:2] == ["data", "compile"], names
    assert names[2][2:4] == ["forward", "compile"], names
    assert without_compile(names[2]) == ["data", "forward", "backward", "optimizer"]


def test_compile_callbacks_are_registered_lazily_and_removed(tmp_path: Path) -> None:
    """No Dynamo import for a script that never compiles; registered once it compiles."""
    code = textwrap.dedent("""
        import sys, torch
        from dlprof_lite.annotate import install
        annotation = install("phases")

        class Names:  # the tracker's start/end ranges, by name
            names = []
            def start(self, name, payload=None):
                self.names.append(name)
            def end(self, range_id):
                pass
            def mark(self, message):
                pass

        annotation.tracker.backend = names = Names()
        model = torch.nn.Linear(2, 1)
        model(torch.ones(1, 2))
        assert "torch._dynamo" not in sys.modules, "Dynamo imported by the annotation"
        opt = torch.optim.SGD(model.parameters(), lr=0.1)  # torch imports Dynamo here
        model(torch.ones(1, 2)).sum().backward(); opt.step()
        double = torch.compile(lambda x: x * 2, backend="eager")
        from torch._dynamo.callback import callback_handler as handler
        def ours():
            return [c for c in handler.start_callbacks + handler.end_callbacks
                    if "_watch_compilation" in c.__qualname__]
        assert len(ours()) == 2, "not registered right after Dynamo's import"
        model(double(torch.ones(1, 2))).sum().backward(); opt.step()
        assert annotation.tracker.compile_probe is None
        assert "compile" in names.names, names.names
        annotation.remove()
        assert not ours()
    """)
    env = {**os.environ, "DLPROF_LITE_NVTX": "on"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_compiled_model_books_compile_inside_the_iteration(annotate, recorder) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in DataLoader(TensorDataset(torch.randn(9, 4)), 4):
        compiled(x).sum().backward()
        opt.step()
    annotate.close()
    names = tiled(recorder.ranges, 3)
    assert "compile" in names[0] and "compile" in names[2], names
    assert without_compile(names[0]) == ["forward", "backward", "optimizer"]
    assert [without_compile(n) for n in names[1:]] == [list(PHASES[:4])] * 2


def test_exit_closes_a_step_waiting_for_another_optimizer(annotate, recorder) -> None:
    model, other = nn.Linear(2, 1), nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.SGD(other.parameters(), lr=0.1).step()  # both alive at the first step
    model(torch.randn(1, 2)).sum().backward()
    opt.step()
    annotate.close()
    assert all(r.end > r.start for r in recorder.ranges)


# --- under the real nsys ---------------------------------------------------------------


def profile_script(nsys: str, tmp_path: Path, script: str, *args: str):
    truth = tmp_path / "truth.json"
    ranges = nsys_profile(nsys, tmp_path, [str(SCRIPTS / script), *args, "--truth", str(truth)])
    return ranges, json.loads(truth.read_text())


@pytest.mark.nsys
def test_gan_under_nsys(nsys: str, tmp_path: Path) -> None:
    ranges, truth = profile_script(nsys, tmp_path, "gan.py", "--steps", "5")
    names = tiled(ranges, len(truth["steps"]), ticks=False)
    assert steps_of(names) == [2] * 5
    assert all(n[-1] == "optimizer" for n in names)


@pytest.mark.nsys
def test_lbfgs_and_accumulation_under_nsys(nsys: str, tmp_path: Path) -> None:
    ranges, truth = profile_script(nsys, tmp_path, "lbfgs.py", "--steps", "3")
    names = tiled(ranges, len(truth["steps"]), ticks=False)
    assert all(n[0] == n[-1] == "optimizer" and "backward" in n for n in names)
    ranges, truth = profile_script(nsys, tmp_path, "accumulate.py", "--steps", "3", "--accum", "2")
    names = tiled(ranges, len(truth["steps"]), ticks=False)
    assert [n.count("backward") for n in names] == [2] * 3
    assert steps_of(names) == [1] * 3


@pytest.mark.nsys
@pytest.mark.skipif(sys.platform != "linux", reason="nsys on linux")
def test_inference_under_nsys(nsys: str, tmp_path: Path) -> None:
    for mode in ("no_grad", "inference_mode"):
        ranges, truth = profile_script(nsys, tmp_path, "inference.py", "--steps", "4",
                                       "--mode", mode)  # fmt: skip
        assert tiled(ranges, len(truth["steps"]), ticks=False) == [["forward"]] * 4
