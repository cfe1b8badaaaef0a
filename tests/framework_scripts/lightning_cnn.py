"""Lightning's ``Trainer`` on a small CNN, on random images.

    python lightning_cnn.py --max-steps 16 --val-check-interval 5 --truth truth.json
    python lightning_cnn.py --max-epochs 2 --samples 300 --truth truth.json

The oracle (``oracle.py``) is recorded by the LightningModule's own hooks: its
``optimizer_step`` override marks the end of each update (automatic optimization runs the
training step and backward inside ``optimizer.step(closure)``, so this is the step's last
work), ``on_train_epoch_end`` each epoch, and ``on_validation_model_eval`` /
``on_validation_model_train`` (the first and last hooks of a validation run) time validation.
"""

import argparse

import lightning as L
import torch
import torch.nn.functional as F
from oracle import Oracle
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitCNN(L.LightningModule):
    def __init__(self, oracle: Oracle) -> None:
        super().__init__()
        self.oracle = oracle
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )  # fmt: skip
        self.classifier = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            self.oracle.training_forward()
        return self.classifier(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    def optimizer_step(self, *args, **kwargs):
        super().optimizer_step(*args, **kwargs)
        self.oracle.step_end()

    def on_train_epoch_start(self) -> None:
        self.oracle.epoch_begin()

    def on_train_epoch_end(self) -> None:
        self.oracle.epoch_end()

    def on_validation_model_eval(self) -> None:
        self.oracle.evaluation_start()
        super().on_validation_model_eval()

    def on_validation_model_train(self) -> None:
        super().on_validation_model_train()
        self.oracle.evaluation_end()


def images(samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 3, 32, 32, generator=generator)
    return TensorDataset(x, torch.randint(0, 10, (samples,), generator=generator))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--max-epochs", type=int, default=1)
    parser.add_argument("--val-check-interval", type=int, default=0, help="0: no validation")
    parser.add_argument("--samples", type=int, default=1280)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    oracle = Oracle()
    model = LitCNN(oracle)
    validate = args.val_check_interval > 0
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.max_steps,
        max_epochs=args.max_epochs,
        val_check_interval=args.val_check_interval if validate else None,
        limit_val_batches=2 if validate else 0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    train = DataLoader(images(args.samples, seed=1), batch_size=args.batch, shuffle=True)
    held_out = DataLoader(images(2 * args.batch, seed=2), batch_size=args.batch)
    trainer.fit(model, train, held_out if validate else None)
    oracle.write(args.truth, model, forwards_per_step=1)
    print(f"lightning_cnn: {len(oracle.step_ends_ns)} optimizer steps, "
          f"{len(oracle.evaluations_ns)} validations")  # fmt: skip


if __name__ == "__main__":
    main()
