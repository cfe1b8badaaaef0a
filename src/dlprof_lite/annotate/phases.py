"""Iteration and phase ranges: one ``iteration`` per optimizer step, tiled by its phases.

The tracker is a small state machine fed by hooks (DataLoader, root-module forward, autograd,
optimizer step) and by the manual :func:`~dlprof_lite.annotate.phase` and
:func:`~dlprof_lite.annotate.iteration` context managers. Its ranges are NVTX *start/end*
ranges: the backward phase starts on whichever thread autograd runs (a CUDA device thread),
and a start/end range may be ended from any thread; the analysis attributes kernels launched
from any thread of the process to them.

Tiling: a phase ends exactly where the next one starts, so inside each iteration

    iteration = data | forward | backward | optimizer      (data absent in the first one)

and the phases add up to the iteration. Rules:

- an iteration opens when a phase starts and none is open, and closes at the optimizer
  step's post-hook (not while a manual :func:`iteration` is open);
- ``data`` starts at ``next()`` of a DataLoader whose batches fed an earlier optimizer step
  (an evaluation loader never opens an iteration), or of any loader inside an open iteration
  (gradient accumulation); it lasts until the forward starts, so it covers copying the batch
  to the device and ``zero_grad``;
- ``forward`` starts at the forward of a root module with grad enabled (not under
  ``torch.no_grad()``, not an activation-checkpoint recomputation);
- ``backward`` starts when autograd reaches the output of a root module: with the loss as an
  ``nn.Module`` that is the start of ``loss.backward()``; a functional loss's backward counts
  as forward (torch has no hook on ``Tensor.backward`` itself, and replacing that function
  is the monkey-patching this layer does not do);
- ``optimizer`` spans the optimizer step, pre-hook to post-hook.

An iteration still open when the program ends (a batch was fetched, then the loop was left)
is closed at exit and holds no ``optimizer`` phase: it is incomplete.
"""

from __future__ import annotations

import threading
from typing import Any

from dlprof_lite.annotate.backend import Backend, get_backend
from dlprof_lite.annotate.names import ITERATION, PHASES


class PhaseTracker:
    """The open iteration and phase of this process, and the transitions between them."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._iteration: Any = None
        self._phase: str | None = None
        self._phase_id: Any = None
        self._manual = 0
        self.iterations = 0
        self.steps = 0
        self._training_sources: set[int] = set()
        self._last_source: int | None = None

    @property
    def phase(self) -> str | None:
        """The open phase (read without the lock: a hint for fast paths)."""
        return self._phase

    def enter(self, phase: str) -> None:
        """Make ``phase`` the open phase, opening an iteration when none is open."""
        with self._lock:
            self._enter(phase)

    def _enter(self, phase: str) -> None:
        if self._phase == phase:
            return
        if self._iteration is None:
            self._iteration = self.backend.start(ITERATION, self.iterations)
            self.iterations += 1
        self._end_phase()
        self._phase = phase
        self._phase_id = self.backend.start(phase)

    def _end_phase(self) -> None:
        if self._phase_id is not None:
            self.backend.end(self._phase_id)
        self._phase = None
        self._phase_id = None

    def _end_iteration(self) -> None:
        self._end_phase()
        if self._iteration is not None:
            self.backend.end(self._iteration)
            self._iteration = None

    def leave(self, phase: str) -> None:
        """End ``phase`` if it is still the open one (the end of a manual :func:`phase`)."""
        with self._lock:
            if self._phase == phase:
                self._end_phase()

    # --- hook events -------------------------------------------------------------------

    def on_data(self, source: int) -> None:
        """A DataLoader iterator is about to fetch a batch from dataset ``id`` ``source``."""
        with self._lock:
            self._last_source = source
            if self._iteration is not None or source in self._training_sources:
                self._enter("data")

    def on_forward(self) -> None:
        """A root module's forward starts with grad enabled, outside backward."""
        if self._phase != "forward":
            self.enter("forward")

    def on_backward(self) -> None:
        """Autograd reached the output of a root module."""
        if self._phase != "backward":
            self.enter("backward")

    def on_optimizer_start(self) -> None:
        self.enter("optimizer")

    def on_optimizer_end(self) -> None:
        """The optimizer step is over: close the iteration unless a manual one is open."""
        with self._lock:
            self.steps += 1
            if self._last_source is not None:
                self._training_sources.add(self._last_source)
            if self._manual:
                self._end_phase()
            else:
                self._end_iteration()

    # --- manual ranges -----------------------------------------------------------------

    def begin_iteration(self, index: int | None) -> None:
        """Open a manual iteration (closing an automatic one that is open)."""
        with self._lock:
            if self._manual == 0:
                self._end_iteration()
                self._iteration = self.backend.start(
                    ITERATION, self.iterations if index is None else index
                )
                self.iterations += 1
            self._manual += 1

    def end_iteration(self) -> None:
        with self._lock:
            self._manual = max(0, self._manual - 1)
            if self._manual == 0:
                self._end_iteration()

    def close(self) -> None:
        """End whatever is open (at program exit)."""
        with self._lock:
            self._manual = 0
            self._end_iteration()


def check_phase(name: str) -> str:
    """``name`` if it is one of the documented phases, else :class:`ValueError`."""
    if name not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {name!r}")
    return name


_shared: PhaseTracker | None = None
_shared_lock = threading.Lock()


def shared_tracker() -> PhaseTracker | None:
    """The process's tracker (hooks and manual ranges share it); ``None`` when annotation is off."""
    global _shared
    backend = get_backend()
    if backend is None:
        return None
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = PhaseTracker(backend)
    return _shared
