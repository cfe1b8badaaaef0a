"""Gradient accumulation over micro-batches, a cosine LR schedule, a DataLoader.

python accumulate.py --steps 4 --accum 3
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accum", type=int, default=3)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 10))
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    n = args.steps * args.accum * 32
    loader = DataLoader(TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,))), 32)
    truth = Truth()
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / args.accum
        loss.backward()
        if (i + 1) % args.accum == 0:
            opt.step()
            sched.step()
            opt.zero_grad()
            truth.end_step()
    truth.write(args.truth)


if __name__ == "__main__":
    main()
