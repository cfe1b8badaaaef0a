"""examples/lenet.py's training loop, timing each layer's forward with its own hooks.

    python lenet_layers.py --steps 8 --truth truth.json

The model, loss and data are the example's own (imported from ``examples/lenet.py``); the
loop is the example's. Each layer's ``forward`` is timed with ``perf_counter`` by this script
(no dlprof-lite import); per step, the truth file
holds each layer's forward seconds, named as ``model.<attribute>``, and the order in which
the layers first ran.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader
from truth import Truth

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from lenet import CategoricalCrossEntropy, LeNet, synthetic_mnist


def time_layers(model: nn.Module, truth: Truth, order: list[str]) -> None:
    """Time every layer's forward body, summed over its calls in a step.

    The layer's own ``forward`` is wrapped on the instance (the module's call machinery,
    hooks included, stays PyTorch's): a profiler's hooks around the call are outside this
    clock, so it times the layer's work, which is what its range should show.
    """
    for name, module in model.named_children():
        layer = f"model.{name}"
        inner = module.forward

        def timed(*args: object, layer: str = layer, inner=inner, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                truth.current[layer] = truth.current.get(layer, 0.0) + spent
                if layer not in order:
                    order.append(layer)

        module.forward = timed  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--truth")
    args = parser.parse_args()
    # One intra-op thread: a layer's time then does not swing with the machine's other load.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LeNet()
    criterion = CategoricalCrossEntropy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(synthetic_mnist(args.steps * args.batch_size), batch_size=args.batch_size)
    truth, order = Truth(), []
    time_layers(model, truth, order)
    model.train()
    for images, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        truth.end_step()
    truth.extra["order"] = order
    truth.write(args.truth)
    print(f"lenet_layers: {args.steps} steps, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
