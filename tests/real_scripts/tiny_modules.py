"""A model of many tiny modules (deep400 of docs/performance.md, smaller) behind one large layer.

    python tiny_modules.py --steps 6

``big`` (Linear 512x512 at batch 256, milliseconds a call on a CPU) is worth timing; the 40
blocks of Linear 16x16, ReLU, LayerNorm and Dropout after it are a few µs a call each, about
what annotating a call costs. The script times its own phases and lists its modules.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from truth import Truth


def block() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.LayerNorm(16), nn.Dropout(0.0))


class Deep(nn.Module):
    def __init__(self, blocks: int) -> None:
        super().__init__()
        self.big = nn.Linear(512, 512)
        self.proj = nn.Linear(512, 16)
        self.blocks = nn.Sequential(*(block() for _ in range(blocks)))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.proj(torch.relu(self.big(x)))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Deep(args.blocks)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(args.steps, 256, 512), torch.randint(0, 10, (args.steps, 256))
    truth = Truth()
    for step in range(args.steps):
        with truth.phase("forward"):
            loss = F.cross_entropy(model(x[step]), y[step])
        with truth.phase("backward"):
            loss.backward()
        with truth.phase("optimizer"):
            opt.step()
            opt.zero_grad()
        truth.end_step()
    truth.extra["modules"] = [name for name, _ in model.named_modules() if name]
    truth.write(args.truth)


if __name__ == "__main__":
    main()
