"""Full epochs as users write them: build a dataset, train over its DataLoader, evaluate.

python epoch.py --samples 1536 --batch 32 --epochs 1 --truth truth.json

The run the script times with ``perf_counter`` starts after its imports and holds parts
that are no training step: building (and normalising) the dataset, creating the model and
the DataLoaders, and an evaluation loop after each epoch's training loop. ``--truth``
receives the run's wall time (``epoch_s``), its steps, the set-up time and the time spent
after training loops (``eval_s``, summed over epochs).
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from truth import Truth


def make_dataset(samples: int, features: int) -> TensorDataset:
    """A synthetic classification set, standardised feature by feature (a visible cost)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    for _ in range(40):  # a preprocessing pass users recognise: repeated normalisation
        x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    y = (x[:, :10].sum(1) > 0).long() + (x[:, 10:20].sum(1) > 0).long()
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1536)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--eval-rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--truth")
    args = parser.parse_args()
    truth = Truth()
    start = time.perf_counter()
    torch.manual_seed(0)
    train = make_dataset(args.samples, args.features)
    held_out = make_dataset(args.samples // 2, args.features)
    model = nn.Sequential(
        nn.Linear(args.features, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, 3),
    )  # fmt: skip
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(train, batch_size=args.batch, shuffle=True)
    eval_loader = DataLoader(held_out, batch_size=args.batch)
    setup = time.perf_counter() - start
    evaluation = 0.0
    for _ in range(args.epochs):
        model.train()
        for x, y in loader:
            with truth.phase("step"):
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
            truth.end_step()
        train_end = time.perf_counter()
        model.eval()
        correct = 0
        with torch.no_grad():
            for _ in range(args.eval_rounds):  # e.g. several metrics over the held-out set
                for x, y in eval_loader:
                    correct += int((model(x).argmax(1) == y).sum())
        evaluation += time.perf_counter() - train_end
    run = time.perf_counter() - start
    truth.extra.update(
        epoch_s=run, setup_s=setup, eval_s=evaluation, loader_length=len(loader),
        accuracy=correct / (args.eval_rounds * len(held_out)),
    )  # fmt: skip
    truth.write(args.truth)
    print(f"{args.epochs} epoch(s): {run:.3f} s ({len(loader)} steps each)")


if __name__ == "__main__":
    main()
