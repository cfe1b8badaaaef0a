"""The two models the GPU check trains: a ResNet-18-sized CNN and a small GPT, from code.

Nothing is downloaded: the CNN is torchvision's ResNet-18 layout (7x7 stem, max-pool, four
stages of two of examples/resnet.py's BasicBlocks, widths 64-512, average pool, classifier);
the GPT is Hugging Face's ``GPT2LMHeadModel`` built from a ``GPT2Config``. ``tiny=True``
shrinks both for the CPU dry run (tests/test_gpu_check.py); the real check's shapes are in
:data:`FULL`.

``BACKWARD_ORACLE`` names, per model, the modules whose backward the CUDA-event oracle can time
from tensor hooks: a module whose input is used by nothing outside it (a ResNet stage, a GPT
block), so the input's gradient is complete exactly when the module's backward ends.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from resnet import BasicBlock


@dataclass(frozen=True)
class Shape:
    batch: int
    image: int = 224  # CNN
    width: int = 64  # CNN first stage
    classes: int = 1000
    seq: int = 512  # GPT
    layers: int = 6
    embd: int = 768
    heads: int = 12
    vocab: int = 50257


FULL = {"cnn": Shape(batch=64), "gpt": Shape(batch=8)}
TINY = {
    "cnn": Shape(batch=2, image=32, width=8, classes=10),
    "gpt": Shape(batch=2, seq=16, layers=2, embd=32, heads=2, vocab=128),
}
BACKWARD_ORACLE = {
    "cnn": ("layer1", "layer2", "layer3", "layer4"),
    "gpt": tuple(f"transformer.h.{i}" for i in range(FULL["gpt"].layers)),
}


class ResNet18(nn.Module):
    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = []
        inplanes = width
        for index in range(4):
            planes = width * 2**index
            stride = 1 if index == 0 else 2
            stages.append(nn.Sequential(BasicBlock(inplanes, planes, stride),
                                        BasicBlock(planes, planes)))  # fmt: skip
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(model: str, tiny: bool) -> tuple[nn.Module, Shape]:
    """The model (in FP32, on the CPU) and its input shape."""
    shape = (TINY if tiny else FULL)[model]
    if model == "cnn":
        return ResNet18(shape.width, shape.classes), shape
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=shape.vocab, n_positions=shape.seq, n_embd=shape.embd,
                        n_layer=shape.layers, n_head=shape.heads,
                        bos_token_id=shape.vocab - 1, eos_token_id=shape.vocab - 1)  # fmt: skip
    return GPT2LMHeadModel(config), shape


def batch(model: str, shape: Shape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One fixed synthetic batch (inputs, targets), already on ``device``."""
    generator = torch.Generator().manual_seed(0)
    if model == "cnn":
        images = torch.randn(shape.batch, 3, shape.image, shape.image, generator=generator)
        labels = torch.randint(0, shape.classes, (shape.batch,), generator=generator)
        return images.to(device), labels.to(device)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq), generator=generator)
    return tokens.to(device), tokens.to(device)


def loss_of(model_name: str, model: nn.Module, inputs: torch.Tensor,
            targets: torch.Tensor) -> torch.Tensor:  # fmt: skip
    if model_name == "cnn":
        return nn.functional.cross_entropy(model(inputs), targets)
    return model(input_ids=inputs, labels=targets).loss  # type: ignore[no-any-return]
