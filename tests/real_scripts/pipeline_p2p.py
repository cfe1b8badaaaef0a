"""Pipeline stages that pass activations by send and receive, one stage late: p2p ground truth.

    torchrun --standalone --nproc_per_node=3 pipeline_p2p.py [--steps 6] [--micro-batches 2]
        [--slow-stage S] [--sleep-ms D]

Each rank is one stage of a model cut in three (a Linear each). Per step and micro-batch,
stage s receives its input from stage s-1 (``recv``, the first stage makes its own), runs its
layer, and sends the output to stage s+1 (``send``; the last stage keeps it); stage
``--slow-stage`` sleeps ``--sleep-ms`` before each send, so its receiver waits that long in
the receive. Every step ends with an all-reduce over all ranks, whose sequence numbers must
not depend on how many tensors each stage sent.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn


class Stage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--micro-batches", type=int, default=2)
    parser.add_argument("--slow-stage", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=100.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    stage = Stage()
    optimizer = torch.optim.SGD(stage.parameters(), lr=0.01)
    for _ in range(args.steps):
        for _ in range(args.micro_batches):
            x = torch.randn(16, 64)
            if rank > 0:
                dist.recv(x, src=rank - 1)
            with torch.no_grad():
                y = stage(x)
            if rank < world - 1:
                if rank == args.slow_stage:
                    time.sleep(args.sleep_ms / 1000)
                dist.send(y.contiguous(), dst=rank + 1)
        loss = stage(torch.randn(16, 64)).square().mean()
        loss.backward()
        for p in stage.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
