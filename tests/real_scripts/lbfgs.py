"""A closure-driven optimizer step (LBFGS, as Lightning does for every optimizer).

python lbfgs.py --steps 5
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(),
                          nn.Linear(1024, 1))  # fmt: skip
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    x, y = torch.randn(512, 512), torch.randn(512, 1)
    truth = Truth()

    def closure():
        opt.zero_grad()
        with truth.phase("forward"):
            loss = F.mse_loss(model(x), y)
        with truth.phase("backward"):
            loss.backward()
        return loss

    for _ in range(args.steps):
        with truth.phase("step"):
            opt.step(closure)
        truth.end_step()
    truth.write(args.truth)


if __name__ == "__main__":
    main()
