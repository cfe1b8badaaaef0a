"""Annotation overhead: step time of the examples with annotation off and on, bare and under nsys.

    .venv/bin/python scripts/bench_annotation.py [--repeats 3] [--device cpu] [--no-nsys]
    .venv/bin/python scripts/bench_annotation.py --hooks-only   # in-process hook cost only
    .venv/bin/python scripts/bench_annotation.py --micro-only   # the NVTX and gc figures only

In-process (``--hooks-only`` runs only this): deep400, mlp400, a small transformers GPT-2 and
the examples, each with annotation off, ``phases``, ``modules`` (the default: modules too
short to time folded after the warm-up step) and ``modules-all`` (no folding), alternated:
step time and its ratio to the plain step, µs per module call (forward, backward) and the
garbage collector's full collections and longest pause, median of ``--repeats`` (at least 5).

Each configuration runs the example in a fresh process (``examples/lenet.py``,
``examples/resnet.py``) and reads the ``ms/step`` it prints (steps 2..N); configurations
are interleaved and repeated (one intra-op thread unless ``--threads``), and the median is
reported with its ratio to the plain run:

- ``plain``: ``python example.py`` — no dlprof-lite at all;
- ``bootstrap``: through the bootstrap with ``--annotate modules`` but no profiler attached,
  so annotation stays off (what "costs nothing without a profiler" means);
- ``forced phases`` / ``forced modules``: ``DLPROF_LITE_NVTX=on`` installs every hook with no
  tool attached (the NVTX calls are the library's no-ops): the cost of the hooks themselves;
- ``nsys none`` / ``nsys phases`` / ``nsys modules``: under ``nsys profile`` with the
  launcher's defaults, by ``--annotate`` level: what annotation adds to a profiled run.

It also times one NVTX push/pop pair (no tool, and under nsys), one disabled
``annotate.range`` block, and the ``gc:<generation>`` range (``annotate.gc_ranges``): its
callback's start and stop, and a young collection (``gc.collect(0)``, automatic collections
off) with no callback, an empty one (what CPython's callback call costs) and the gc range,
best of 7 alternated rounds. Figures vary with the machine's load:
compare ratios, not times.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {"lenet": ["--steps", "30"], "resnet": ["--steps", "10"]}
BOOT = [sys.executable, "-m", "dlprof_lite.annotate.bootstrap"]
# One intra-op thread: with OpenMP's spinning threads on a loaded 2-core machine step times
# varied 15x between runs; with one they vary by a few %. Set by --threads.
THREADS = {"OMP_NUM_THREADS": "1"}
_MS = re.compile(r"([\d.]+) ms/step")
_MICRO = re.compile(r"MICRO (\w+) ([\d.]+)")
MICRO = """
import nvtx, timeit
from nvtx import _lib
d = nvtx.get_domain("bench"); a = d.get_event_attributes("r", "blue"); h = d.handle
n = 200000
t = timeit.timeit(lambda: (_lib.push_range(a, h), _lib.pop_range(h)), number=n)
print("MICRO pushpop_ns", 1e9 * t / n)
import gc
from dlprof_lite.annotate.backend import Backend
from dlprof_lite.annotate.gc_ranges import GcRanges
entry, info = GcRanges(Backend()), {"generation": 0, "collected": 0, "uncollectable": 0}
t = timeit.timeit('entry("start", info); entry("stop", info)', globals=globals(), number=n)
print("MICRO gc_callback_ns", 1e9 * t / n)
gc.disable()
def noop(phase, info):
    pass
m, times = 20000, {"": [], "_noop": [], "_ranged": []}  # suffix -> seconds per round
for _ in range(7):
    for suffix, callback in (("", None), ("_noop", noop), ("_ranged", entry)):
        if callback is not None:
            gc.callbacks.append(callback)
        times[suffix].append(timeit.timeit("gc.collect(0)", globals=globals(), number=m))
        if callback is not None:
            gc.callbacks.remove(callback)
for suffix, rounds in times.items():
    print(f"MICRO gc_collect0{suffix}_ns", 1e9 * min(rounds) / m)
"""
MICRO_LABELS = {
    "pushpop_ns": "NVTX push+pop",
    "gc_callback_ns": "gc range, callback start+stop",
    "gc_collect0_ns": "gc.collect(0), no callback",
    "gc_collect0_noop_ns": "gc.collect(0), an empty callback",
    "gc_collect0_ranged_ns": "gc.collect(0) with the gc range",
}


def configurations(nsys: str | None) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (command prefix before the script, extra environment)."""
    off = {"DLPROF_LITE_NVTX": "auto"}
    on = {"DLPROF_LITE_NVTX": "on"}
    configs = {
        "plain": ([sys.executable], off),
        "bootstrap": ([*BOOT, "--annotate", "modules"], off),
        "forced phases": ([*BOOT, "--annotate", "phases"], on),
        "forced modules": ([*BOOT, "--annotate", "modules"], on),
    }
    if nsys:
        from dlprof_lite.launch.nsys import PROFILE_DEFAULTS

        out = Path(tempfile.mkdtemp(prefix="bench-nsys-")) / "run"
        prefix = [nsys, "profile", *PROFILE_DEFAULTS, f"--output={out}",
                  "--force-overwrite=true"]  # fmt: skip
        for level in ("none", "phases", "modules"):
            configs[f"nsys {level}"] = ([*prefix, *BOOT, "--annotate", level], off)
    return configs


def run_once(prefix: list[str], env: dict[str, str], program: list[str]) -> float:
    done = subprocess.run([*prefix, *program], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **env, **THREADS})  # fmt: skip
    found = _MS.findall(done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"failed: {' '.join(prefix + program)}\n{done.stderr[-2000:]}")
    return float(found[-1])


def bench_examples(args: argparse.Namespace, nsys: str | None) -> None:
    configs = configurations(nsys)
    for example, example_args in EXAMPLES.items():
        program = [str(ROOT / "examples" / f"{example}.py"), *example_args,
                   "--device", args.device]  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.repeats):
            for name, (prefix, env) in configs.items():
                times[name].append(run_once(prefix, env, program))
        base = statistics.median(times["plain"])
        print(f"\n{example} ({' '.join(example_args)}, {args.device}), "
              f"median of {args.repeats} runs, ms/step of steps 2..N")  # fmt: skip
        print(f"  {'configuration':<16} {'ms/step':>9} {'ratio':>7}   runs")
        for name, values in times.items():
            median = statistics.median(values)
            runs = " ".join(f"{v:.1f}" for v in values)
            print(f"  {name:<16} {median:9.2f} {median / base:7.3f}   {runs}")


HOOK_COST = """
import gc, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import torch, lenet, resnet
from torch import nn
from torch.nn.modules import module as nn_module
from dlprof_lite import annotate
from dlprof_lite.annotate import facts
torch.manual_seed(0)
folds = []  # modules named by the folded facts of the running configuration
record = facts.record
def recording(key, value):
    if key == "folded":
        folds.extend(value["modules"])
    record(key, value)
facts.record = recording
deep = nn.Sequential(*(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.LayerNorm(16),
                                     nn.Dropout(0.0)) for _ in range(100)), nn.Linear(16, 10))
wide = nn.Sequential(*(nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 1024), nn.GELU(),
                                     nn.Linear(1024, 256), nn.Dropout(0.0), nn.ReLU(),
                                     nn.LayerNorm(256)) for _ in range(50)), nn.Linear(256, 10))
def classify(model, loss_fn):
    return lambda x, y: loss_fn(model(x), y)
cases = {"deep400": (deep, classify(deep, nn.CrossEntropyLoss()), (16,), 8),
         "mlp400": (wide, classify(wide, nn.CrossEntropyLoss()), (256,), 64)}
try:
    from transformers import GPT2Config, GPT2LMHeadModel
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000,
                                      n_positions=64))
    cases["gpt2"] = (gpt2, lambda x, y: gpt2(input_ids=x, labels=x).loss, 32, 8)
except ImportError:
    print("SKIP gpt2: transformers is not installed")
cases["lenet"] = (m := lenet.LeNet(), classify(m, lenet.CategoricalCrossEntropy()), (1, 28, 28), 1)
cases["resnet"] = (r := resnet.ResNet(), classify(r, nn.CrossEntropyLoss()), (3, 32, 32), 1)
clock = time.thread_time  # CPU time of this thread (one intra-op thread): robust to load
wall = time.perf_counter
pauses = []  # (generation, seconds) of each collection while an epoch is timed
started = [0.0]
def collected(phase, info):
    if phase == "start":
        started[0] = wall()
    elif phase == "stop":
        pauses.append((info["generation"], wall() - started[0]))
gc.callbacks.append(collected)
LEVELS = ("off", "phases", "modules", "modules-all")
for name, (model, step_loss, shape, batch) in cases.items():
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = (torch.randint(0, 1000, (20 * batch, shape)) if isinstance(shape, int)
              else torch.rand(20 * batch, *shape))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        inputs, torch.randint(0, 10, (20 * batch,))), batch_size=batch)
    def step(x, y):
        opt.zero_grad()
        t0 = clock()
        loss = step_loss(x, y)
        t1 = clock()
        loss.backward()
        t2 = clock()
        opt.step()
        return t1 - t0, t2 - t1
    def epoch():
        # Per-step medians over an epoch (a step another process slowed does not count), its
        # full collections and its longest collection.
        batches = iter(data)
        step(*next(batches))  # the warm-up step: with --annotate modules, folds at its end
        del pauses[:]
        times = []
        for x, y in batches:
            start, start_wall = clock(), wall()
            f, b = step(x, y)
            times.append((clock() - start, f, b, wall() - start_wall))
        full = [p for g, p in pauses if g == 2]
        step_s, fwd, bwd, step_wall = (statistics.median(t[i] for t in times) for i in range(4))
        return (step_s, fwd, bwd, len(full), max((p for _, p in pauses), default=0.0),
                step_wall)
    epoch()
    calls = []
    counter = nn_module.register_module_forward_pre_hook(lambda m, a: calls.append(1))
    epoch()
    counter.remove()
    per_step = len(calls) / len(data)
    trials = {level: [] for level in LEVELS}
    folded = {}  # level -> modules folded in each trial
    for trial in range(int(sys.argv[2])):
        for level in LEVELS[trial % 4:] + LEVELS[:trial % 4]:  # rotated: no level always last
            handle = annotate.install(level) if level != "off" else None
            del folds[:]
            trials[level].append(epoch())
            folded.setdefault(level, []).append(len(folds))
            if handle is not None:
                handle.remove()
    off = [statistics.median(t[i] for t in trials["off"]) for i in range(6)]
    for level, values in trials.items():
        step_s, fwd, bwd, full, pause, step_wall = (statistics.median(t[i] for t in values)
                                                    for i in range(6))
        extra = step_s - off[0]
        print(f"HOOK {name} {per_step:.0f} {level} {statistics.median(folded[level]):.0f} "
              f"{1e6 * step_s:.0f} {step_s / off[0]:.3f} {step_wall / off[5]:.3f} "
              f"{1e6 * extra / per_step:.2f} "
              f"{1e6 * (fwd - off[1]) / per_step:.2f} {1e6 * (bwd - off[2]) / per_step:.2f} "
              f"{full:.0f} {1e3 * pause:.1f}")
"""
_HOOK = re.compile(
    r"HOOK (\w+) (\d+) ([\w-]+) (\d+) (\d+) ([\d.]+) ([\d.]+) (-?[\d.]+) (-?[\d.]+) "
    r"(-?[\d.]+) (\d+) ([\d.]+)"
)


def bench_hook_cost(trials: int) -> None:
    """Per-step cost of the hooks, in one process: annotation off, phases, modules (folding
    after the warm-up step) and modules-all (no folding), alternated in a rotating order; each
    epoch's first step is its warm-up and is not timed.

    ``deep400``: 401 modules (100 blocks of Linear 16x16, ReLU, LayerNorm, Dropout), batch
    8: every module is ~2 us of work, the worst case for hooks; ``mlp400``: 401 modules of
    a realistic width (50 blocks of LayerNorm, Linear 256->1024, GELU, Linear 1024->256,
    Dropout, ReLU, LayerNorm), batch 64; ``gpt2``: transformers' GPT2LMHeadModel from
    ``GPT2Config(n_layer=2, n_embd=64)`` (vocabulary 1000, batch 8 x 32 tokens, loss from
    its labels): a framework model of small modules; the examples at batch 1.
    Times are the main thread's CPU time (one intra-op thread: all of a step's work), which
    another process on the machine inflates less than wall time (``wall``: the wall-time
    ratio beside), each trial's the median step of its epoch.
    ``folded``: modules folded (``modules``); ``ratio``: annotated/plain time per step;
    ``us/call``: added time per module call (both passes), ``fwd us`` / ``bwd us``: added
    time per module call in the forward pass and in ``loss.backward()``; ``gc2``: full
    (generation 2) collections in a timed epoch, ``gc ms``: its longest collection (wall).
    """
    done = subprocess.run(
        [sys.executable, "-c", HOOK_COST, str(ROOT / "examples"), str(trials)],
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, **THREADS, "DLPROF_LITE_NVTX": "on"},
    )  # fmt: skip
    print(f"\nhooks in-process, no tool attached (median of {trials} alternated trials)")
    print(f"  {'model':<8} {'calls':>6} {'level':<12} {'folded':>6} {'us/step':>8} {'ratio':>6} "
          f"{'wall':>6} {'us/call':>8} {'fwd us':>7} {'bwd us':>7} {'gc2':>4} "
          f"{'gc ms':>6}")  # fmt: skip
    for row in _HOOK.findall(done.stdout):
        name, calls, level, folded, step, ratio, ratio_wall, call, fwd, bwd, full, pause = row
        print(f"  {name:<8} {calls:>6} {level:<12} {folded:>6} {step:>8} {ratio:>6} "
              f"{ratio_wall:>6} {call:>8} {fwd:>7} {bwd:>7} {full:>4} {pause:>6}")  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("SKIP"):
            print(f"  {line}")
    if done.returncode != 0:
        print(done.stderr[-2000:])


def hooks_only(trials: int) -> None:
    """Only the in-process hook cost (``--hooks-only``): the quick check of the hot path."""
    bench_hook_cost(trials)


def bench_micro(nsys: str | None) -> None:
    from dlprof_lite import annotate

    os.environ.pop("DLPROF_LITE_NVTX", None)
    n = 200_000
    blocks = timeit.timeit(lambda: annotate.range("r").__enter__().__exit__(), number=n)
    print(f"\n{'annotate.range block, annotation off:':<58} {1e9 * blocks / n:8.0f} ns")
    done = subprocess.run([sys.executable, "-c", MICRO], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    print_micro(done.stdout, "no tool attached")
    if nsys:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [nsys, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none",
                 f"--output={tmp}/m", sys.executable, "-c", MICRO],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
        print_micro(done.stdout, "under nsys --trace=nvtx")


def print_micro(stdout: str, where: str) -> None:
    for key, value in _MICRO.findall(stdout):
        print(f"{MICRO_LABELS[key] + ', ' + where + ':':<58} {float(value):8.0f} ns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--nsys", default="nsys", help="nsys to profile with")
    parser.add_argument("--no-nsys", action="store_true", help="skip the runs under nsys")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    parser.add_argument("--hooks-only", action="store_true", help="only the in-process hook cost")
    parser.add_argument("--micro-only", action="store_true", help="only the NVTX and gc figures")
    args = parser.parse_args()
    THREADS["OMP_NUM_THREADS"] = str(args.threads)
    if args.hooks_only:
        hooks_only(max(args.repeats, 5))
        return
    nsys = None
    if not args.no_nsys:
        from dlprof_lite.launch.nsys import find_nsys

        nsys = find_nsys(args.nsys).path
    bench_micro(nsys)
    if args.micro_only:
        return
    bench_hook_cost(max(args.repeats, 5))
    bench_examples(args, nsys)


if __name__ == "__main__":
    main()
