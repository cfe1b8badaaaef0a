"""A small transformer LM in the Hugging Face shape: the loss is computed inside the model's
forward and returned in a dict-like output, bf16 autocast, a OneCycle schedule, and an
evaluation call of the model under ``no_grad`` every few steps.

    python lm_inner_loss.py --steps 8
"""

import argparse
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from truth import Truth


class ModelOutput(OrderedDict):
    """Like transformers' ModelOutput: a dict whose items are also read by key."""


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(x)


class LM(nn.Module):
    def __init__(self, vocab: int = 2000, d: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, input_ids, labels=None):
        x = self.emb(input_ids)
        for block in self.blocks:
            x = block(x)
        out = ModelOutput(logits=self.head(x))
        if labels is not None:
            logits = out["logits"]
            out["loss"] = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=args.steps)
    truth = Truth()
    evaluations = 0
    for step in range(args.steps):
        ids = torch.randint(0, 2000, (8, 64))
        model.train()
        with truth.phase("forward"), torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(ids, labels=ids)["loss"]
        with truth.phase("backward"):
            loss.backward()
        with truth.phase("optimizer"):
            opt.step()
        sched.step()
        opt.zero_grad()
        truth.end_step()
        if step % 3 == 2:
            model.eval()
            with torch.no_grad():
                model(torch.randint(0, 2000, (8, 64)))
            evaluations += 1
    truth.extra["evaluations"] = evaluations
    truth.write(args.truth)


if __name__ == "__main__":
    main()
