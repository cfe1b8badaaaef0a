"""A loop that marks its own steps with numbered NVTX ranges, logging included.

python numbered_steps.py --steps 6 --style "step {}"
"""

import argparse
import time

import nvtx
import torch
from torch import nn
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--style", default="step {}")
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = Truth()
    for step in range(args.steps):
        with truth.phase("step"), nvtx.annotate(args.style.format(step)):
            loss = nn.functional.cross_entropy(model(torch.randn(64, 128)),
                                               torch.randint(0, 10, (64,)))  # fmt: skip
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)  # logging, checkpoint writing: part of the step the user means
        truth.end_step()
    truth.write(args.truth)


if __name__ == "__main__":
    main()
