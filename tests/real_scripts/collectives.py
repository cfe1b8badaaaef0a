"""Ranks that all-reduce every step, one of them late: the collectives' ground truth.

    torchrun --standalone --nproc_per_node=N collectives.py [--steps 8] [--slow-rank R]
        [--sleep-ms D] [--numel K] [--async]

Each step every rank runs a small forward and backward, then all-reduces a float32 tensor of
``--numel`` elements (``4 x K`` bytes) on gloo and takes an optimizer step. Rank ``--slow-rank``
sleeps ``--sleep-ms`` just before each all-reduce, so every other rank waits about that long
inside it. ``--async`` issues the all-reduce with ``async_op=True`` and waits on its work.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--sleep-ms", type=float, default=30.0)
    parser.add_argument("--numel", type=int, default=4096)
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        optimizer.zero_grad()
        model(torch.randn(8, 32)).pow(2).mean().backward()
        if rank == args.slow_rank:
            time.sleep(args.sleep_ms / 1000)
        buffer = torch.full((args.numel,), float(rank))
        if args.asynchronous:
            dist.all_reduce(buffer, async_op=True).wait()
        else:
            dist.all_reduce(buffer)
        optimizer.step()
    print(f"rank {rank}: {args.steps} steps, sum {buffer[0].item():.0f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
