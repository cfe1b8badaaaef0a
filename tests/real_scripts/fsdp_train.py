"""A model sharded by FSDP, trained on the CPU (gloo): the per-unit ground truth.

    torchrun --standalone --nproc_per_node=N fsdp_train.py --truth T.json [--fsdp 1|2]
        [--steps 6]

Three blocks of odd widths (their first dimensions are not multiples of the rank count, so
FSDP pads every shard) and a head. ``--fsdp 2`` (default) applies ``fully_shard`` to each block
and to the model; ``--fsdp 1`` wraps each block and the model in ``FullyShardedDataParallel``.
Rank 0 writes what FSDP itself holds per unit (its layer name, as dlprof-lite names it): the
bytes one all-gather moves (the padded whole, by nccl-tests' convention) and the same size
unpadded, so that a test tells padded from unpadded sizes.
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.distributed as dist
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(33, h) for h in (46, 60, 74))
        self.head = nn.Linear(33, 5, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def fsdp2_truth(units: dict[str, nn.Module], world: int) -> dict[str, dict[str, int]]:
    out = {}
    for name, unit in units.items():
        group = unit._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]
        if group is None:
            continue
        padded = unpadded = 0
        for p in group.fsdp_params:
            size = 4  # float32
            padded += p.padded_sharded_param_size.numel() * world * size
            unpadded += p._orig_size.numel() * size
            # the same padding, from the shape alone: dim 0 up to a multiple of the ranks
            rows = math.ceil(p._orig_size[0] / world) * world
            assert p.padded_sharded_param_size.numel() * world == rows * math.prod(
                p._orig_size[1:]), name
        out[name] = {"all_gather_bytes": padded, "reduce_scatter_bytes": padded,
                     "unpadded_bytes": unpadded}
    return out


def fsdp1_truth(units: dict[str, nn.Module]) -> dict[str, dict[str, int]]:
    out = {}
    for name, unit in units.items():
        handle = unit._handle  # type: ignore[union-attr]
        if handle is None:
            continue
        flat = handle.flat_param
        padded = flat._padded_unsharded_size.numel() * flat.element_size()
        unpadded = sum(math.prod(s) for s in flat._shapes) * flat.element_size()
        out[name] = {"all_gather_bytes": padded, "reduce_scatter_bytes": padded,
                     "unpadded_bytes": unpadded}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--fsdp", type=int, choices=(1, 2), default=2)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Net()
    if args.fsdp == 2:
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        units = {f"blocks.{i}": b for i, b in enumerate(model.blocks)} | {"model": model}
        trained: nn.Module = model
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        trained = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                                           device_id=torch.device("cpu"))
        wrapped = [m for m in trained.modules() if isinstance(m, FullyShardedDataParallel)]
        units = {f"blocks.{i}": m for i, m in enumerate(wrapped[1:])} | {"model": wrapped[0]}
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.01)
    data = torch.randn(8, 33, generator=torch.Generator().manual_seed(rank))
    for _ in range(args.steps):
        loss = trained(data).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    # after training: FSDP1 sizes its padded buffer at the first all-gather
    truth = fsdp2_truth(units, world) if args.fsdp == 2 else fsdp1_truth(units)
    if rank == 0:
        with open(args.truth, "w", encoding="utf-8") as handle:
            json.dump({"world": world, "units": truth}, handle, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
