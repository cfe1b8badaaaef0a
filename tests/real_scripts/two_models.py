"""Distillation: a frozen teacher, a student of the same class, and an EMA copy of the student.

python two_models.py --steps 4
"""

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn
from truth import Truth


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, width)
        self.fc2 = nn.Linear(width, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    teacher = Net(256).eval()
    student = Net(64)
    ema_model = copy.deepcopy(student)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    truth = Truth()
    for _ in range(args.steps):
        x = torch.randn(64, 32)
        with torch.no_grad():
            target = teacher(x).softmax(-1)
        loss = F.kl_div(student(x).log_softmax(-1), target, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), student.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)
            ema_model(x)
        truth.end_step()
    truth.extra["roots"] = ["teacher", "student", "ema_model"]
    truth.write(args.truth)


if __name__ == "__main__":
    main()
