"""A small ResNet (CIFAR-style ResNet-8 by default), trained on synthetic 32x32 images.

The blocks follow torchvision's BasicBlock: conv-BN-ReLU(inplace)-conv-BN, ``out += identity``
and a 1x1 strided downsample where the shape changes, so the profile shows what in-place
ops and residual adds look like to the annotation layer.

    python examples/resnet.py --steps 10                 # CPU
    python examples/resnet.py --device cuda --amp        # GPU, mixed precision
    dlprof-lite examples/resnet.py --steps 10            # profiled, no code change
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class BasicBlock(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """Stem, three stages of ``blocks`` BasicBlocks (widths w, 2w, 4w), pooling, classifier."""

    def __init__(self, blocks: int = 1, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        stages = []
        inplanes = width
        for index, planes in enumerate((width, 2 * width, 4 * width)):
            stride = 1 if index == 0 else 2
            layers = [BasicBlock(inplanes, planes, stride)]
            layers += [BasicBlock(planes, planes) for _ in range(blocks - 1)]
            stages.append(nn.Sequential(*layers))
            inplanes = planes
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.flatten(self.avgpool(x)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (default cpu)")
    parser.add_argument("--amp", action="store_true", help="mixed precision (autocast)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps (default 10)")
    parser.add_argument("--batch-size", type=int, default=32, help="default 32")
    parser.add_argument("--blocks", type=int, default=1, help="blocks per stage (default 1)")
    parser.add_argument("--width", type=int, default=16, help="first stage's channels")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.blocks < 1:
        parser.error("--steps, --batch-size and --blocks must be at least 1")
    return args


def train(args: argparse.Namespace) -> float:
    """Train for ``args.steps`` steps; returns the mean time of steps 2..N in seconds."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = ResNet(args.blocks, args.width).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    samples = args.steps * args.batch_size
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(samples, 3, 32, 32, generator=generator),
        torch.randint(0, 10, (samples,), generator=generator),
    )
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, generator=generator)
    amp_dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=args.amp and amp_dtype == torch.float16)
    model.train()
    start = time.perf_counter()
    for step, (images, labels) in enumerate(loader):
        if step == 1:  # time steps 2..N: the first one warms up allocators and caches
            start = time.perf_counter()
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=args.amp):
            loss = criterion(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    timed = max(args.steps - 1, 1)
    print(
        f"resnet: {args.steps} steps, loss {loss.item():.4f}, {1e3 * elapsed / timed:.2f} ms/step"
    )
    return elapsed / timed


if __name__ == "__main__":
    train(parse_args())
