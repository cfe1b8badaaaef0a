"""What a framework's own callbacks saw of a training run, as JSON for ``test_frameworks.py``.

Each script in this folder trains with a real framework (transformers, Lightning,
accelerate) or a hand-written update, with no dlprof-lite import; the framework's callbacks
call :class:`Oracle` right after every optimizer update, around every evaluation run and at
every training forward of the model. The tests read the file ``--truth`` names: an oracle
independent of the profiler. Times are ``time.perf_counter_ns()``; only differences between
them are compared with the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


class Oracle:
    """Step ends, evaluation runs and training forwards, in the order they happened."""

    def __init__(self) -> None:
        self.step_ends_ns: list[int] = []
        self.evaluations_ns: list[tuple[int, int]] = []
        self.epoch_ends: list[int] = []
        self.epoch_begins_ns: list[int] = []
        self.step_starts_ns: list[int] = []
        self.train_forwards = 0
        self._evaluation_start: int | None = None

    def step_end(self, at_ns: int | None = None) -> None:
        """Called right after an optimizer update returned (or with the time a step ended)."""
        self.step_ends_ns.append(time.perf_counter_ns() if at_ns is None else at_ns)

    def step_start(self) -> None:
        """Called where a loop the script owns starts waiting in ``next()`` for a step's batch:
        the step's start as docs/annotation.md says (frameworks that own the loop give none)."""
        self.step_starts_ns.append(time.perf_counter_ns())

    def epoch_begin(self) -> None:
        """The framework starts an epoch: what it does before (and between) epochs is no
        step, so the first step of an epoch is timed from here."""
        self.epoch_begins_ns.append(time.perf_counter_ns())

    def epoch_end(self) -> None:
        """The last step so far ends an epoch (its index is kept)."""
        self.epoch_ends.append(len(self.step_ends_ns) - 1)

    def evaluation_start(self) -> None:
        self._evaluation_start = time.perf_counter_ns()

    def evaluation_end(self) -> None:
        assert self._evaluation_start is not None, "evaluation_end without evaluation_start"
        self.evaluations_ns.append((self._evaluation_start, time.perf_counter_ns()))
        self._evaluation_start = None

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        self.evaluation_start()
        try:
            yield
        finally:
            self.evaluation_end()

    def training_forward(self) -> None:
        self.train_forwards += 1

    def count_training_forwards(self, model: torch.nn.Module) -> None:
        """Count the model's forwards in training mode with grad on (a pre-hook of its own)."""

        def count(module: torch.nn.Module, args: Any) -> None:
            if module.training and torch.is_grad_enabled():
                self.training_forward()

        model.register_forward_pre_hook(count)

    def write(self, path: str | None, model: torch.nn.Module, **extra: Any) -> None:
        """``model``: the user's model, whose type and children the report's names must show."""
        if not path:
            return
        data = {
            "step_ends_ns": self.step_ends_ns,
            "evaluations_ns": self.evaluations_ns,
            "epoch_ends": self.epoch_ends,
            "epoch_begins_ns": self.epoch_begins_ns,
            "step_starts_ns": self.step_starts_ns,
            "optimizer_steps": len(self.step_ends_ns),
            "train_forwards": self.train_forwards,
            "model_type": type(model).__name__,
            "children": [name for name, _ in model.named_children()],
            **extra,
        }
        with open(path, "w", encoding="utf-8") as out:
            json.dump(data, out)
