"""An MLP classifier trained with the loss made in one of the ways users make it.

    python mlp_losses.py --loss functional --steps 8

--loss: module (nn.CrossEntropyLoss), functional (F.cross_entropy), helper (a loss function
with an L2 term over the parameters), autograd (torch.autograd.backward), scaler
(torch.amp.GradScaler, bf16 autocast), dict (the model returns a dict, two losses summed).
--clip: unscale the gradients and clip their norm (clip_grad_norm_) before the step, timed
as the optimizer's (the order the AMP docs give: unscale_, clip, step, update).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from truth import Truth


class MLP(nn.Module):
    def __init__(self, as_dict: bool = False) -> None:
        super().__init__()
        self.as_dict = as_dict
        self.body = nn.Sequential(
            nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
            nn.Linear(2048, 1024), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Linear(1024, 100)
        self.aux = nn.Linear(1024, 1)

    def forward(self, x):
        h = self.body(x)
        logits = self.head(h)
        if self.as_dict:
            return {"logits": logits, "score": self.aux(h).squeeze(1)}
        return logits


def l2_loss(model, x, y):
    logits = model(x)
    penalty = sum(p.pow(2).sum() for p in model.parameters())
    return F.cross_entropy(logits, y) + 1e-6 * penalty


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss", default="functional")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--truth")
    parser.add_argument("--clip", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = MLP(as_dict=args.loss == "dict")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cpu", enabled=args.loss == "scaler")
    x = torch.randn(args.steps, args.batch, 1024)
    y = torch.randint(0, 100, (args.steps, args.batch))
    truth = Truth()
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        xb, yb = x[step], y[step]
        with truth.phase("forward"):
            if args.loss == "module":
                loss = criterion(model(xb), yb)
            elif args.loss == "helper":
                loss = l2_loss(model, xb, yb)
            elif args.loss == "dict":
                out = model(xb)
                loss = F.cross_entropy(out["logits"], yb) + out["score"].pow(2).mean()
            elif args.loss == "scaler":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(xb), yb)
            else:
                loss = F.cross_entropy(model(xb), yb)
        with truth.phase("backward"):
            if args.loss == "autograd":
                torch.autograd.backward([loss])
            else:
                scaler.scale(loss).backward()
        with truth.phase("optimizer"):
            if args.clip:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        truth.end_step()
    print(f"loss {loss.item():.4f}")
    truth.write(args.truth)


if __name__ == "__main__":
    main()
