"""A CPU training loop with three planted delays, each timed by the script itself.

python idle_causes.py --steps 16 --data-sleep 0.03 --gc --layer-sleep 0.02 --truth truth.json

- ``--data-sleep S``: ``Dataset.__getitem__`` sleeps S seconds for the first sample of each
  batch (the DataLoader's work, num_workers=0: in the training process);
- ``--gc``: each step calls ``gc.collect()`` (a full collection: every object of the
  process, torch's included, is traversed) between the backward pass and the optimizer step;
- ``--layer-sleep S``: the module ``slow`` sleeps S seconds in its forward;
- ``--side-sleep S``: the module ``side`` sleeps S seconds in its forward, run on a thread of
  its own while ``slow`` runs (work beside the critical path while S is below slow's sleep).

``--truth`` receives per step the seconds each delay took (``data_sleep``, ``gc``,
``layer_sleep``) and the step's wall time (``step``: from asking the loader for the batch
to the end of the optimizer step).
"""

import argparse
import gc
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from truth import Truth

truth = Truth()


class Samples(Dataset):
    def __init__(self, count: int, features: int, batch: int, sleep: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(count, features, generator=generator)
        self.y = (self.x[:, 0] > 0).long()
        self.batch, self.sleep = batch, sleep

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep and i % self.batch == 0:  # the first sample of each batch
            with truth.phase("data_sleep"):
                time.sleep(self.sleep)
        return self.x[i], self.y[i]


class Slow(nn.Module):
    def __init__(self, width: int, sleep: float, key: str = "layer_sleep") -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.sleep, self.key = sleep, key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sleep:
            with truth.phase(self.key):
                time.sleep(self.sleep)
        return torch.relu(self.linear(x))


class Net(nn.Module):
    def __init__(self, features: int, width: int, sleep: float, side: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, width)
        self.slow = Slow(width, sleep)
        self.side = Slow(width, side, "side_sleep") if side else None
        self.pool = ThreadPoolExecutor(1) if side else None
        self.head = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        beside = self.pool.submit(self._beside, h.detach()) if self.pool else None
        out = self.slow(h)
        if beside is not None:
            out = out + beside.result().sum() * 0
        return self.head(out)

    def _beside(self, h: torch.Tensor) -> torch.Tensor:
        assert self.side is not None
        with torch.no_grad():  # no backward: all its work is on its own thread
            return self.side(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--data-sleep", type=float, default=0.0)
    parser.add_argument("--gc", action="store_true")
    parser.add_argument("--layer-sleep", type=float, default=0.0)
    parser.add_argument("--side-sleep", type=float, default=0.0)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = Samples(args.steps * args.batch, args.features, args.batch, args.data_sleep)
    loader = DataLoader(data, batch_size=args.batch)
    model = Net(args.features, args.width, args.layer_sleep, args.side_sleep)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    batches = iter(loader)
    for _ in range(args.steps):
        with truth.phase("step"):
            x, y = next(batches)
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            if args.gc:
                with truth.phase("gc"):
                    gc.collect()
            opt.step()
        truth.end_step()
    truth.write(args.truth)


if __name__ == "__main__":
    main()
