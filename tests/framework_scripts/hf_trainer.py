"""transformers' ``Trainer`` on a tiny GPT-2 built from its config, on random tokens.

    python hf_trainer.py --max-steps 16 --eval-steps 5 --truth truth.json
    python hf_trainer.py --epochs 2 --accum 2 --samples 46 --truth truth.json

Nothing is downloaded: the model comes from a ``GPT2Config``, the data from ``torch.randint``.
The oracle (``oracle.py``) is recorded by a ``TrainerCallback``: ``on_optimizer_step`` fires
right after ``optimizer.step()`` returns, ``on_epoch_end`` after each epoch, and the
``evaluate`` of a ``Trainer`` subclass times every evaluation run.
"""

import argparse
import tempfile

import torch
from oracle import Oracle
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

VOCAB = 512


class RandomTokens(Dataset):
    """Language-model samples: random token ids, labels equal to the inputs."""

    def __init__(self, samples: int, seq: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (samples, seq), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class OracleCallback(TrainerCallback):
    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.oracle.step_end()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.oracle.epoch_begin()

    def on_epoch_end(self, args, state, control, **kwargs):
        self.oracle.epoch_end()


class TimedTrainer(Trainer):
    """A Trainer whose every evaluation run is timed (the training loop calls ``evaluate``)."""

    oracle: Oracle

    def evaluate(self, *args, **kwargs):
        with self.oracle.evaluation():
            return super().evaluate(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--eval-steps", type=int, default=0, help="0: no evaluation")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=args.seq,
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    oracle = Oracle()
    oracle.count_training_forwards(model)
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            max_steps=args.max_steps,
            num_train_epochs=args.epochs,
            gradient_accumulation_steps=args.accum,
            per_device_train_batch_size=args.batch,
            per_device_eval_batch_size=args.batch,
            eval_strategy="steps" if args.eval_steps else "no",
            eval_steps=args.eval_steps or None,
            learning_rate=1e-3,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        )
        held_out = RandomTokens(2 * args.batch, args.seq, seed=2)
        trainer = TimedTrainer(
            model=model,
            args=training_args,
            train_dataset=RandomTokens(args.samples, args.seq, seed=1),
            eval_dataset=held_out if args.eval_steps else None,
            callbacks=[OracleCallback(oracle)],
        )
        trainer.oracle = oracle
        trainer.train()
    oracle.write(args.truth, model, forwards_per_step=args.accum)
    print(f"hf_trainer: {len(oracle.step_ends_ns)} optimizer steps, "
          f"{len(oracle.evaluations_ns)} evaluations")  # fmt: skip


if __name__ == "__main__":
    main()
