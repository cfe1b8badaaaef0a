"""Optimizer steps and backward ends: the part of :class:`~.phases.PhaseTracker` that
decides where a training step's optimizer phase starts and where its iteration ends.

The rules are stated in :mod:`.phases`. Two of them live here:

- the end of a step: after the outermost ``optimizer.step()`` returns, the iteration closes
  when every optimizer alive at the first step has stepped in it and, in a DataLoader loop,
  when it holds as many steps as the last batch did; otherwise it waits;
- the end of backward: each top-level backward pass reports its end
  (:meth:`StepBook.on_backward_end`, an autograd engine callback queued by the module
  hooks). A step learns how many backward passes it holds; from the next step on, the
  optimizer phase starts when that many have ended, not at ``optimizer.step()``: what runs
  in between (``GradScaler.unscale_`` and its inf check, ``clip_grad_norm_``) prepares the
  step. A forward that follows such an early optimizer phase with no step in between (a
  step ``GradScaler`` skipped for inf gradients) restarts the count, so a skipped step
  does not teach a wrong one. After a step in the open iteration the phase starts early
  only when a known per-batch count says another step follows (else the next step may
  cut a new iteration, and the early phase would land in the old one).
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

from dlprof_lite.annotate.backend import Backend
from dlprof_lite.rules.names import BACKWARD_END_MARK, UPDATE_MARK

TRAIN, INFER = "train", "infer"


class StepBook:
    """Optimizer-step bookkeeping of the tracker (state set up by ``PhaseTracker``)."""

    backend: Backend
    _lock: threading.Lock
    _numbers: weakref.WeakKeyDictionary[Any, int]  # each optimizer's number, 1, 2, ...
    _phase: str | None
    _kind: str | None
    _manual: int
    steps: int
    _depth: int
    _outer: int | None
    _stepped: list[int]
    _inner: set[int]
    _batch_open: bool
    _backward_ends: int
    _backwards_per_step: int | None
    _early: bool
    _alive: weakref.WeakSet[Any] | None
    _per_batch: int | None
    _since_fetch: int
    _fed: set[int]
    _training_sources: set[int]
    optimizer_base: type | None

    def _enter(self, phase: str, kind: str = TRAIN) -> None:
        raise NotImplementedError

    def _end_phase(self) -> None:
        raise NotImplementedError

    def _end_iteration(self) -> None:
        raise NotImplementedError

    def _probe(self) -> None:
        raise NotImplementedError

    def on_backward_end(self) -> None:
        """A top-level backward pass finished (an engine callback queued at its start).

        What follows the last backward of a step (``GradScaler.step``'s unscaling and inf
        check, gradient clipping) serves the optimizer: once the loop has shown how many
        backward passes a step holds, the optimizer phase starts at the end of the last one
        instead of at ``optimizer.step()``. Before that (the first step) the backward phase
        lasts until the step.
        """
        self.backend.mark(BACKWARD_END_MARK)  # where a loop without an optimizer's step ends
        with self._lock:
            if self._phase != "backward" or self._depth or self._manual:
                return  # a closure's backward: the step is already the optimizer's
            self._backward_ends += 1
            expected = self._backwards_per_step
            # After a step in the open iteration, only a known per-batch count says another
            # step follows: with none, the next step may cut a new iteration (an optimizer
            # stepping again), and an optimizer phase begun here would land in the old one.
            follows = not self._stepped or (
                self._per_batch is not None and len(self._stepped) < self._per_batch
            )
            if follows and expected is not None and self._backward_ends >= expected:
                self._enter("optimizer")
                self._early = True

    # --- optimizer steps ---------------------------------------------------------------

    def on_optimizer_start(self, optimizer: Any = None) -> None:
        """An optimizer step begins (steps nested in a step are part of it)."""
        self._probe()
        with self._lock:
            if self._depth and id(optimizer) == self._outer:
                self._depth = 0  # its last step raised: no post-hook ended it
            self._depth += 1
            if self._depth > 1:
                # The optimizer a wrapper steps (accelerate, ZeRO, SAM) has stepped too.
                self._inner.add(id(optimizer))
                return
            self._outer = id(optimizer)
            self._early = False
            if self._alive is None:
                self._alive = self._find_alive(optimizer)
            more = self._batch_open or (
                self._per_batch is not None and len(self._stepped) < self._per_batch
            )
            if id(optimizer) in self._stepped and not self._manual and not more:
                # Stepping again without a batch in between: some alive optimizer never
                # steps. Keep the ones that do, and start a new step here.
                stepped = (*self._stepped, *self._inner)
                self._alive = weakref.WeakSet(o for o in self._alive if id(o) in stepped)
                self._end_iteration()
            if self._kind == INFER and not self._manual:
                self._end_iteration()
            self._enter("optimizer")

    def on_closure_end(self) -> None:
        """A closure passed to ``step`` returned: the rest of the step is the optimizer's."""
        with self._lock:
            if self._depth > 0:
                self._enter("optimizer")

    def on_optimizer_end(self, optimizer: Any = None) -> None:
        """The step is over: close the iteration when the training step is complete."""
        with self._lock:
            self._depth = max(0, self._depth - 1)
            if self._depth:
                return
            self.steps += 1
            self._mark_update(optimizer)
            self._since_fetch += 1
            if self._backward_ends:
                self._backwards_per_step = self._backward_ends  # learnt from this step
                self._backward_ends = 0
            self._stepped.append(id(optimizer))
            if self._alive is not None and optimizer is not None:
                self._alive.add(optimizer)  # one made after the first step
            # The first step on a batch, while the steps a batch holds are not known yet:
            # wait for the next fetch (a second step on the same batch joins this one).
            first_batch = self._per_batch is None and bool(self._fed)
            self._batch_open = self._batch_open or first_batch
            self._training_sources.update(self._fed)
            self._fed.clear()
            if self._manual:
                self._end_phase()
            elif first_batch or self._expects_more():
                self._end_phase()  # the iteration waits for the other optimizers
            else:
                self._end_iteration()

    def _mark_update(self, optimizer: Any) -> None:
        """The ``update:<n>`` mark: ingest ends each step at its last update's mark."""
        if self._manual:
            return  # the script's own iteration() ranges are the steps
        number = 0
        if optimizer is not None:
            try:
                number = self._numbers.setdefault(optimizer, len(self._numbers) + 1)
            except TypeError:  # an optimizer that cannot be weakly referenced
                number = 0
        self.backend.mark(f"{UPDATE_MARK}{number}")

    def _expects_more(self) -> bool:
        """Whether the open iteration's training step has optimizer steps still to come."""
        if self._per_batch is not None and len(self._stepped) < self._per_batch:
            return True
        stepped = (*self._stepped, *self._inner)
        return any(id(optimizer) not in stepped for optimizer in self._alive or ())

    def _find_alive(self, optimizer: Any) -> weakref.WeakSet[Any]:
        """The optimizers alive now (once, at the first step: ~30 ms per 100k objects)."""
        alive: weakref.WeakSet[Any] = weakref.WeakSet()
        base = self.optimizer_base
        if base is not None:
            gc.collect()  # an optimizer in a garbage cycle is not one that will step
            for obj in gc.get_objects():
                # type(), not isinstance: that reads ``__class__``, which some lazy
                # module attributes answer with a deprecation warning.
                if issubclass(type(obj), base):
                    alive.add(obj)
        if optimizer is not None:
            alive.add(optimizer)
        return alive
