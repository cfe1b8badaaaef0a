"""Inference only: a model evaluated on batches, no optimizer anywhere.

python inference.py --steps 10 --mode no_grad|inference_mode|grad
"""

import argparse
import contextlib

import torch
from torch import nn
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--mode", default="no_grad")
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(256, 10)).eval()  # fmt: skip
    context = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(
        args.mode, contextlib.nullcontext
    )
    truth = Truth()
    with context():
        for _ in range(args.steps):
            batch = torch.randn(32, 3, 64, 64)
            with truth.phase("forward"):
                logits = model(batch)
            predictions = logits.argmax(1)
            truth.end_step()
    print(predictions[:4].tolist())
    truth.write(args.truth)


if __name__ == "__main__":
    main()
