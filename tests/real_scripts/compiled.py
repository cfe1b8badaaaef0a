"""A compiled model: ``torch.compile(model)`` (--how wrap) or ``model.compile()`` (--how method).

python compiled.py --steps 6 --how wrap
"""

import argparse

import torch
from torch import nn
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--how", default="wrap")
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    if args.how == "method":
        model.compile()
    else:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    truth = Truth()
    from torch._dynamo.utils import counters

    for step in range(args.steps):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        truth.end_step()
        if step == 0:
            converted_after_first_step = counters["frames"]["total"]
    truth.extra["graph_breaks"] = sum(counters["graph_break"].values())
    truth.extra["unique_graphs"] = counters["stats"]["unique_graphs"]
    # Frames Dynamo converts after the first step: recompilations.
    truth.extra["recompiled_frames"] = counters["frames"]["total"] - converted_after_first_step
    truth.write(args.truth)


if __name__ == "__main__":
    main()
