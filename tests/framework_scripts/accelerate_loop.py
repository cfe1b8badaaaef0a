"""A training loop prepared by accelerate: model, optimizer and DataLoader, two epochs.

    python accelerate_loop.py --epochs 2 --samples 1200 --truth truth.json

``Accelerator.prepare`` returns a ``DataLoaderShard`` that fetches one batch ahead (it must
know which batch is the last), so each ``next()`` returns a batch loaded during the previous
one. The oracle (``oracle.py``) marks the end of each update right after ``optimizer.step()``.
"""

import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from oracle import Oracle
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=1200)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(
        nn.Linear(args.features, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, 10),
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(args.samples, args.features),
                         torch.randint(0, 10, (args.samples,)))  # fmt: skip
    loader = DataLoader(data, batch_size=args.batch, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    oracle = Oracle()
    for _ in range(args.epochs):
        model.train()
        oracle.epoch_begin()
        batches = iter(loader)
        while True:
            oracle.step_start()  # the wait in the prepared loader's next() starts the step
            try:
                x, y = next(batches)
            except StopIteration:
                break
            oracle.training_forward()
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            oracle.step_end()
            optimizer.zero_grad()
        oracle.epoch_end()
    oracle.write(args.truth, accelerator.unwrap_model(model), forwards_per_step=1)
    print(f"accelerate_loop: {len(oracle.step_ends_ns)} optimizer steps")


if __name__ == "__main__":
    main()
