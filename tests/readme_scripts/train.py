"""The ``train.py`` of the README's command lines: a small, ordinary training script.

tests/test_readme.py copies it into an empty folder as ``train.py`` and runs the README's
lines there as written (``dlprof-lite train.py --epochs 1`` ...). A multilayer perceptron on
random data (a fixed seed) through a DataLoader: 8 optimizer steps per epoch, on the CPU.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(inputs), targets)
            loss.backward()
            optimizer.step()
    print(f"train: {args.epochs} epoch(s), loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
