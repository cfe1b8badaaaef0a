"""One training run of the GPU check, with its own CUDA-event clock as the oracle.

    python workload.py --model cnn|gpt --precision fp32|tf32|bf16|fp16 [--compile]
        [--steps 30] [--tiny] [--device cuda] --oracle OUT.json

It is an ordinary training script: dlprof-lite's bootstrap runs it under ``nsys profile``
(scripts/gpu_check/device.py), as it would a user's. Beside the training it times, on the
GPU's own clock (``torch.cuda.Event``, ``perf_counter_ns`` on the CPU for the dry run):

* each step (zero_grad to optimizer step), its forward (to the loss), backward and optimizer;
* each module's forward calls, from a forward pre-hook to a forward hook, summed per step:
  the time from the work queued before the module to the end of its last kernel, which is
  the module's projected GPU span when the GPU is the bottleneck. So that it is, each step
  starts with a GPU sleep (``torch.cuda._sleep``) longer than the host takes to queue the
  step's forward and backward (:class:`Hold`): the host runs ahead, the GPU then runs the
  step back to back, and a module's events bracket its kernels only. Without the hold, a
  step the host cannot feed leaves the GPU idle between the events and the kernels, and the
  events measure host time (seen on the H200: ResNet-18 in BF16, 100-µs convolutions timed
  30-50 % long). ``--no-hold`` turns it off. What the two events add to the span on a busy
  GPU (``event_edge_ms``, ~6 µs on the H200) is measured once and kept with the calls per
  step, so that the comparison can take it off each call;
* the backward of the modules in ``models.BACKWARD_ORACLE``, from the hook on the gradient of
  its output (its backward can start) to the hook on the gradient of its input (done).

A compiled model (``--compile``) is timed by step only: hooks inside a compiled region would
break its graph. The figures are written as JSON to ``--oracle`` at the end.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import statistics
import time
from collections import defaultdict
from typing import Any

import models
import torch
from torch import nn

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Clock:
    """Marks on the GPU stream (CUDA events) or on the CPU clock; intervals kept to the end."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.intervals: list[tuple[str, str, int, Any, Any]] = []
        self.step = -1

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter_ns()

    def keep(self, kind: str, name: str, start: Any, end: Any) -> None:
        self.intervals.append((kind, name, self.step, start, end))

    def ms(self, start: Any, end: Any) -> float:
        if self.cuda:
            return float(start.elapsed_time(end))
        return (end - start) / 1e6


class Hold:
    """A GPU sleep at the start of each step, longer than the host needs to queue the step.

    Its length is 1.5 times the median host time of the steps so far (step start to the
    backward's return: the optimizer step may wait for the GPU), at least 20 ms and at most
    250 ms, so that a step that waits for the GPU early cannot grow it without bound. The
    sleep's cycles per millisecond are measured once on the GPU's own clock.
    """

    FLOOR_MS, CEILING_MS, FIRST_MS, MARGIN = 20.0, 250.0, 120.0, 1.5

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.on = enabled and device.type == "cuda"
        self.host_ms: list[float] = []
        self.slept_ms: list[float] = []
        self.cycles_per_ms = 0.0
        if self.on:
            cycles = 20_000_000
            torch.cuda._sleep(cycles // 10)  # the first call loads the kernel
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self.cycles_per_ms = cycles / start.elapsed_time(end)
        self.edge_ms = self.event_edge_ms() if self.on else 0.0

    def event_edge_ms(self) -> float:
        """What a pair of events adds to the span of the work between them, on a busy GPU.

        A module's events are queued right before its first kernel and right after its last:
        the span holds the step from each event to the kernel beside it too. Measured as
        ``2 * span(sleep n) - span(sleep 2n)`` (the sleep's own time cancels), each pair
        queued behind a 2-ms sleep as the step's modules are; the median of 21.
        """
        n = int(0.05 * self.cycles_per_ms)
        pairs = []
        for _ in range(21):
            torch.cuda._sleep(int(2 * self.cycles_per_ms))
            events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            events[0].record()
            torch.cuda._sleep(n)
            events[1].record()
            events[2].record()
            torch.cuda._sleep(2 * n)
            events[3].record()
            pairs.append(events)
        torch.cuda.synchronize()
        return statistics.median(2 * a.elapsed_time(b) - c.elapsed_time(d) for a, b, c, d in pairs)

    def hold(self) -> None:
        if not self.on:
            return
        wanted = self.MARGIN * statistics.median(self.host_ms) if self.host_ms else self.FIRST_MS
        ms = min(max(wanted, self.FLOOR_MS), self.CEILING_MS)
        torch.cuda._sleep(int(ms * self.cycles_per_ms))
        self.slept_ms.append(ms)

    def queued(self, host_ns: int) -> None:
        self.host_ms.append(host_ns / 1e6)


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        return first_tensor(list(value.values()))
    return None


def time_modules(model: nn.Module, clock: Clock, backward: tuple[str, ...]) -> None:
    """Forward hooks on every module; tensor hooks for the backward of ``backward``."""
    for name, module in model.named_modules():
        label = name or "<root>"
        open_calls: list[Any] = []

        def pre(_m: nn.Module, args: Any, kwargs: Any, label: str = label,
                open_calls: list[Any] = open_calls) -> None:  # fmt: skip
            open_calls.append(clock.mark())
            if label in backward:
                given = first_tensor(args) if args else first_tensor(kwargs)
                if given is not None and given.requires_grad:
                    given.register_hook(lambda _g, label=label: _backward_end(clock, label))

        def post(_m: nn.Module, _args: Any, _kwargs: Any, output: Any, label: str = label,
                 open_calls: list[Any] = open_calls) -> None:  # fmt: skip
            clock.keep("layer_forward", label, open_calls.pop(), clock.mark())
            if label in backward:
                out = first_tensor(output)
                if out is not None and out.requires_grad:
                    out.register_hook(lambda _g, label=label: _backward_start(clock, label))

        module.register_forward_pre_hook(pre, with_kwargs=True)
        module.register_forward_hook(post, with_kwargs=True)


_BACKWARD_OPEN: dict[str, Any] = {}


def _backward_start(clock: Clock, label: str) -> None:
    _BACKWARD_OPEN[label] = clock.mark()


def _backward_end(clock: Clock, label: str) -> None:
    start = _BACKWARD_OPEN.pop(label, None)
    if start is not None:
        clock.keep("layer_backward", label, start, clock.mark())


def configure(precision: str) -> None:
    """TF32 on only for ``tf32``; the FP32 run is strict FP32 (convolutions too)."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def train(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    torch.manual_seed(0)
    configure(args.precision)
    model, shape = models.build(args.model, args.tiny)
    model.to(device).train()
    clock = Clock(device)
    names = {name for name, _ in model.named_modules()}
    backward = tuple(n for n in models.BACKWARD_ORACLE[args.model] if n in names)
    if not args.compile:
        time_modules(model, clock, backward)
    runnable: Any = torch.compile(model) if args.compile else model
    if args.model == "cnn":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=0.01, momentum=0.9)  # fmt: skip
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = models.batch(args.model, shape, device)
    dtype = AUTOCAST.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    autocast: Any = (torch.autocast(device.type, dtype=dtype) if dtype is not None
                     else contextlib.nullcontext())  # fmt: skip
    hold = Hold(device, args.hold)
    for step in range(args.steps):
        clock.step = step
        if step == args.capture_from:
            torch.cuda.synchronize(device)
            torch.cuda.cudart().cudaProfilerStart()
        hold.hold()
        host_start = time.perf_counter_ns()
        start = clock.mark()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = models.loss_of(args.model, runnable, inputs, targets)
        forward_end = clock.mark()
        scaler.scale(loss).backward()
        backward_end = clock.mark()
        hold.queued(time.perf_counter_ns() - host_start)
        scaler.step(optimizer)
        scaler.update()
        end = clock.mark()
        clock.keep("step", "step", start, end)
        clock.keep("forward", "step", start, forward_end)
        clock.keep("backward", "step", forward_end, backward_end)
        clock.keep("optimizer", "step", backward_end, end)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    per_step: dict[str, dict[str, list[float]]] = defaultdict(dict)
    calls: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for kind, name, step, a, b in clock.intervals:
        row = per_step[kind].setdefault(name, [0.0] * args.steps)
        row[step] += clock.ms(a, b)
        calls[kind].setdefault(name, [0] * args.steps)[step] += 1
    return {
        "model": args.model,
        "precision": args.precision,
        "compiled": args.compile,
        "steps": args.steps,
        "captured_from": args.capture_from,
        "clock": "cuda_event" if clock.cuda else "perf_counter",
        "device_name": torch.cuda.get_device_name(device) if clock.cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "shape": vars(args) | {"batch": shape.batch},
        "parameters": sum(p.numel() for p in model.parameters()),
        "loss": float(loss.detach().float().item()),
        "backward_layers": list(backward),
        "hold": {"on": hold.on, "slept_ms": hold.slept_ms, "host_queue_ms": hold.host_ms},
        "event_edge_ms": hold.edge_ms,
        "calls": {kind: dict(rows) for kind, rows in calls.items()},
        "ms": {kind: dict(rows) for kind, rows in per_step.items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("cnn", "gpt"), required=True)
    parser.add_argument("--precision", choices=PRECISIONS, required=True)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tiny", action="store_true", help="CPU dry-run sizes")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--capture-from", type=int, metavar="STEP",
                        help="start nsys's capture at this step, stop it at exit "
                             "(cudaProfilerApi)")
    parser.add_argument("--no-hold", dest="hold", action="store_false",
                        help="no GPU sleep at the start of each step (the Hold class)")
    parser.add_argument("--oracle", required=True, help="where the CUDA-event figures go")
    return parser.parse_args(argv)


def stop_capture_at_exit() -> None:
    """nsys ``--capture-range=cudaProfilerApi``: the capture ends at the interpreter's exit.

    Nsight Systems 2022.4's importer stops at the first CUDA driver call it has no name for,
    and CUDA 13's runtime makes such calls once (``cuGetProcAddress_v2``, ``cuKernelGetName``
    in the first steps; ``cuLibraryUnload`` at exit). So the capture starts with step
    ``--capture-from`` (``cudaProfilerStart``) and stops here, after dlprof-lite's bootstrap
    has written its last facts and before the runtime unloads.
    """

    def stop() -> None:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()

    atexit.register(stop)


if __name__ == "__main__":
    options = parse_args()
    if options.capture_from is not None:
        stop_capture_at_exit()
    result = train(options)
    with open(options.oracle, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)
    print(f"{options.model} {options.precision}: {options.steps} steps, loss {result['loss']:.4f}")
