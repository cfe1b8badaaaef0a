"""A GAN: per batch one discriminator step and one generator step, two Adam optimizers.

python gan.py --steps 6
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from truth import Truth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 784), nn.Tanh())
    discriminator = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1))
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4)
    d_opt = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
    data = TensorDataset(torch.rand(args.steps * 128, 784) * 2 - 1)
    truth = Truth()
    for (real,) in DataLoader(data, batch_size=128, shuffle=True):
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        fake = generator(torch.randn(len(real), 64))
        d_loss = F.binary_cross_entropy_with_logits(discriminator(real), ones)
        d_loss = d_loss + F.binary_cross_entropy_with_logits(discriminator(fake.detach()), zeros)
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), ones)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        truth.end_step()
    print(f"d {d_loss.item():.3f} g {g_loss.item():.3f}")
    truth.write(args.truth)


if __name__ == "__main__":
    main()
