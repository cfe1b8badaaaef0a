"""The second oracle: the same training steps under ``torch.profiler`` (Kineto), no nsys.

    python kineto.py --out DIR --deadline UNIX_SECONDS [--tiny --device cpu] CONFIG...

CONFIG is ``model:precision[:compile]`` (``gpt:bf16:compile``). One process runs them all, in
the order given, until the deadline: for each, the steps before ``--first`` run unprofiled
(warm-up, as in the nsys run), then steps ``--first`` to ``--steps`` run under the profiler
(CUDA activities only: CUPTI serves one client, so this is never inside nsys). Written per
config: ``kineto_<config>.tsv`` (kernel name, executions, total ns, from the trace's ``kernel``
events) and ``flops_<config>.json`` (FLOPs of one training step, counted on real tensors
with ``torch.utils.flop_counter.FlopCounterMode``: forward and backward, no optimizer).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import models
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode
from workload import AUTOCAST, configure


def run(config: str, args: argparse.Namespace) -> None:
    model_name, precision, *rest = config.split(":")
    compiled = rest == ["compile"]
    device = torch.device(args.device)
    torch.manual_seed(0)
    configure(precision)
    model, shape = models.build(model_name, args.tiny)
    model.to(device).train()
    runnable: Any = torch.compile(model) if compiled else model
    optimizer: torch.optim.Optimizer
    if model_name == "cnn":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = models.batch(model_name, shape, device)
    dtype = AUTOCAST.get(precision)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def step(module: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        context: Any = (torch.autocast(device.type, dtype=dtype) if dtype is not None
                        else contextlib.nullcontext())  # fmt: skip
        with context:
            loss = models.loss_of(model_name, module, inputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(args.first):
        step(runnable)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    trace = args.out / f"kineto_{config.replace(':', '_')}.json"
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(args.first, args.steps):
            step(runnable)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(trace))
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    wanted = "kernel" if device.type == "cuda" else "cpu_op"
    for event in json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]:
        if event.get("cat") == wanted and event.get("ph") == "X":
            row = kernels[event["name"]]
            row[0] += 1
            row[1] += float(event["dur"]) * 1000.0  # the trace's microseconds, in ns
    trace.unlink()
    name = config.replace(":", "_")
    with open(args.out / f"kineto_{name}.tsv", "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["kernel", "count", "total_ns"])
        for kernel, (count, total) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
            writer.writerow([kernel, int(count), round(total)])
    counter = FlopCounterMode(display=False)
    context: Any = (torch.autocast(device.type, dtype=dtype) if dtype is not None
                    else contextlib.nullcontext())  # fmt: skip
    with counter:
        with context:
            loss = models.loss_of(model_name, model, inputs, targets)
        loss.backward()
    optimizer.zero_grad(set_to_none=True)
    flops = {"config": config, "flops_per_step": int(counter.get_total_flops()),
             "profiled_steps": [args.first, args.steps]}  # fmt: skip
    (args.out / f"flops_{name}.json").write_text(json.dumps(flops), encoding="utf-8")
    print(f"kineto {config}: {len(kernels)} kernel names, {flops['flops_per_step']:.3e} FLOPs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline", type=float, required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--first", type=int, default=10)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    for config in args.configs:
        if time.time() > args.deadline:
            print(f"kineto {config}: skipped, past the deadline")
            continue
        try:
            run(config, args)
        except Exception as error:  # one config's failure must not lose the others'
            print(f"kineto {config}: failed: {type(error).__name__}: {error}")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
