"""LeNet as in Neural Network Console's sample project, trained on synthetic MNIST-shaped data.

The layers follow the NNC sample: Convolution (16 maps, 5x5) → ReLU → MaxPooling (2x2) →
Convolution (30 maps, 3x3) → MaxPooling (2x2) → Tanh → Affine (150) → ReLU → Affine (10) →
Softmax, trained with categorical cross-entropy. Every layer, parameter-free ones included,
is an ``nn.Module``, so each gets its own forward and backward range in a profile.

    python examples/lenet.py --steps 20                  # CPU
    python examples/lenet.py --device cuda --amp         # GPU, mixed precision
    dlprof-lite examples/lenet.py --steps 20             # profiled, no code change
    python examples/lenet.py --slow-layer conv2 --slow-ms 5   # conv2's forward 5 ms slower

The data is random (a fixed seed), ``steps * batch_size`` samples through a ``DataLoader``,
so one epoch is exactly ``--steps`` optimizer steps.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LeNet(nn.Module):
    """NNC's LeNet: the layer names here are the ones a profile reports."""

    def __init__(self, classes: int = 10, conv2_channels: int = 30) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=5)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(16, conv2_channels, kernel_size=3)
        self.pool2 = nn.MaxPool2d(2)
        self.tanh = nn.Tanh()
        self.flatten = nn.Flatten()
        self.affine1 = nn.Linear(conv2_channels * 5 * 5, 150)
        self.relu2 = nn.ReLU()
        self.affine2 = nn.Linear(150, classes)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.tanh(self.pool2(self.conv2(x)))
        x = self.relu2(self.affine1(self.flatten(x)))
        return self.softmax(self.affine2(x))


class CategoricalCrossEntropy(nn.Module):
    """NNC's CategoricalCrossEntropy: the mean of -log p[target] of softmax outputs."""

    def __init__(self, eps: float = 1e-7) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        picked = probs.float().gather(1, target.unsqueeze(1)).squeeze(1)
        return -(picked + self.eps).log().mean()


def synthetic_mnist(samples: int, classes: int = 10, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(samples, 1, 28, 28, generator=generator)
    labels = torch.randint(0, classes, (samples,), generator=generator)
    return TensorDataset(images, labels)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (default cpu)")
    parser.add_argument("--amp", action="store_true", help="mixed precision (autocast)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    parser.add_argument("--batch-size", type=int, default=64, help="default 64")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--slow-layer", metavar="NAME",
                        help="a layer whose forward spends --slow-ms more, busy (a regression)")
    parser.add_argument("--slow-ms", type=float, default=5.0, help="default 5")
    parser.add_argument("--conv2-channels", type=int, default=30,
                        help="conv2's output channels: a wider layer (default 30)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.conv2_channels < 1:
        parser.error("--steps, --batch-size and --conv2-channels must be at least 1")
    if args.slow_layer is not None and args.slow_layer not in dict(LeNet().named_children()):
        parser.error(f"--slow-layer: no layer {args.slow_layer!r} in LeNet")
    return args


def slow_down(layer: nn.Module, ms: float) -> None:
    """Make ``layer``'s forward ``ms`` milliseconds slower, inside the layer's own call (an
    instance attribute ``forward`` runs between the module's hooks, as the class's would)."""
    forward = layer.forward

    def slower(*args: object, **kwargs: object) -> object:
        until = time.perf_counter() + ms / 1e3
        while time.perf_counter() < until:  # busy, as slower code is (a sleep frees the CPU)
            pass
        return forward(*args, **kwargs)

    layer.forward = slower  # type: ignore[method-assign]


def train(args: argparse.Namespace) -> float:
    """Train for ``args.steps`` steps; returns the mean time of steps 2..N in seconds."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = LeNet(conv2_channels=args.conv2_channels).to(device)
    if args.slow_layer is not None:
        slow_down(getattr(model, args.slow_layer), args.slow_ms)
    criterion = CategoricalCrossEntropy()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(synthetic_mnist(args.steps * args.batch_size), batch_size=args.batch_size)
    use_amp = args.amp
    # bf16 needs no loss scaling; fp16 on CUDA does (a skipped step merges two iterations).
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp and amp_dtype == torch.float16)
    model.train()
    start = time.perf_counter()
    for step, (images, labels) in enumerate(loader):
        if step == 1:  # time steps 2..N: the first one warms up allocators and caches
            start = time.perf_counter()
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp):
            loss = criterion(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    timed = max(args.steps - 1, 1)
    print(f"lenet: {args.steps} steps, loss {loss.item():.4f}, {1e3 * elapsed / timed:.2f} ms/step")
    return elapsed / timed


if __name__ == "__main__":
    train(parse_args())
