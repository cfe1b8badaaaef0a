"""A tiny DistributedDataParallel training script, as ``torchrun`` runs it, on CPU (gloo).

    torchrun --standalone --nproc_per_node=2 ddp_train.py --steps 6 [--fail-rank R --code C]
        [--slow-rank R --slow-ms MS]

Each rank trains a small MLP on its shard of random data through a DataLoader with a
DistributedSampler, so each rank takes exactly ``--steps`` optimizer steps. With
``--fail-rank`` that rank exits with ``--code`` after training, as a failing worker would;
with ``--slow-rank`` that rank's data loading sleeps ``--slow-ms`` per batch (a straggler).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, default_collate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--code", type=int, default=3)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=20.0)
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.local_rank is not None:  # torch.distributed.launch passes it as an argument
        assert args.local_rank == int(os.environ["LOCAL_RANK"]), args.local_rank
    torch.manual_seed(0)
    samples = args.steps * args.batch_size * world
    data = TensorDataset(torch.randn(samples, 32), torch.randint(0, 4, (samples,)))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    slow = args.slow_ms / 1000 if rank == args.slow_rank else 0.0
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                        collate_fn=lambda batch: _collate(batch, slow))  # fmt: skip
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss_fn(model(inputs), targets).backward()
        optimizer.step()
        steps += 1
    print(f"rank {rank}/{world}: {steps} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return args.code if rank == args.fail_rank else 0


def _collate(batch: list[tuple[torch.Tensor, ...]], sleep_s: float) -> list[torch.Tensor]:
    """The default collation, after ``sleep_s`` of slow data loading on the slow rank."""
    if sleep_s:
        time.sleep(sleep_s)
    return default_collate(batch)


if __name__ == "__main__":
    sys.exit(main())
