"""Activation checkpointing: the middle blocks recompute their forward in backward.

python checkpointed.py --steps 4 --reentrant 0
"""

import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from truth import Truth


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.GELU()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.stem = nn.Linear(64, 256)
        self.blocks = nn.ModuleList(Block(256) for _ in range(4))
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        x = self.stem(x)
        for i, block in enumerate(self.blocks):
            checkpointed = i in (1, 2)
            x = checkpoint(block, x, use_reentrant=self.reentrant) if checkpointed else block(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--reentrant", type=int, default=0)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Net(bool(args.reentrant))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    truth = Truth()
    for _ in range(args.steps):
        x = torch.randn(128, 64, requires_grad=bool(args.reentrant))
        loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (128,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        truth.end_step()
    truth.extra["checkpointed"] = ["blocks.1", "blocks.2"]
    truth.write(args.truth)


if __name__ == "__main__":
    main()
