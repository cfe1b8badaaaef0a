"""An LSTM language model trained without any ``torch.optim`` optimizer, the way PyTorch's
official word_language_model example does: ``model.zero_grad()``, forward over a BPTT chunk,
backward, ``clip_grad_norm_``, then ``p.data.add_(p.grad, alpha=-lr)`` for every parameter.

    python manual_update.py --steps 20 --truth truth.json

The tokens are random (no corpus is downloaded). With no optimizer to hook, a step is one
training forward plus its backward, ending where the next forward starts, the last at its
backward's end (docs/annotation.md, "Steps"): the oracle (``oracle.py``) marks those times.
"""

import argparse
import time

import torch
from oracle import Oracle
from torch import nn


class RNNModel(nn.Module):
    """Encoder, LSTM, decoder: the example's model, smaller."""

    def __init__(self, tokens: int, emsize: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        self.encoder = nn.Embedding(tokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, nlayers)
        self.decoder = nn.Linear(nhid, tokens)

    def forward(self, data: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        output, hidden = self.rnn(self.encoder(data), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        weight = next(self.parameters())
        shape = (self.rnn.num_layers, batch, self.rnn.hidden_size)
        return weight.new_zeros(shape), weight.new_zeros(shape)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--truth")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    corpus = torch.randint(0, args.tokens, (args.steps * args.bptt + 1, args.batch))
    model = RNNModel(args.tokens, emsize=128, nhid=128, nlayers=2)
    criterion = nn.CrossEntropyLoss()
    oracle = Oracle()
    calls = [0]

    def forward_starts(module: nn.Module, args: object) -> None:
        # The previous step ends where this forward starts: the model's own pre-hook runs
        # as its forward begins (after any global hook a profiler installed).
        if calls[0]:
            oracle.step_end()
        calls[0] += 1

    model.register_forward_pre_hook(forward_starts)
    model.train()
    hidden = model.init_hidden(args.batch)
    for i in range(0, args.steps * args.bptt, args.bptt):
        data, targets = corpus[i : i + args.bptt], corpus[i + 1 : i + 1 + args.bptt]
        hidden = tuple(h.detach() for h in hidden)  # the example's repackage_hidden
        model.zero_grad()
        oracle.training_forward()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, args.tokens), targets.reshape(-1))
        loss.backward()
        backward_end = time.perf_counter_ns()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
    oracle.step_end(backward_end)  # the last step ends at its backward's end
    oracle.epoch_end()
    oracle.write(args.truth, model, forwards_per_step=1, optimizer=False)
    print(f"manual_update: {len(oracle.step_ends_ns)} steps, loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
