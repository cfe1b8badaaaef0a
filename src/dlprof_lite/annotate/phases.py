"""Iteration and phase ranges: one ``iteration`` per training step, tiled by its phases.

The tracker is a small state machine fed by hooks (DataLoader, root-module forward, autograd,
optimizer step, Dynamo compilation) and by the manual :func:`~dlprof_lite.annotate.phase`
and :func:`~dlprof_lite.annotate.iteration` context managers. Its ranges are NVTX
*start/end* ranges: the backward phase starts on whichever thread autograd runs, and a
start/end range may be ended from any thread.

Tiling: a phase ends exactly where the next one starts, so inside a training iteration

    iteration = data | forward | backward | optimizer      (data absent in the first one)

A phase may come back in one iteration: a GAN books forward | backward | optimizer twice
(one round per optimizer), a closure step (LBFGS, Lightning) books optimizer | forward |
backward | optimizer ..., and ``compile`` interrupts whatever phase was open.

Training steps (an iteration may hold several optimizer steps, never part of one):

- a *step* is the outermost ``optimizer.step()`` (a step that calls another optimizer's
  step, as SAM does, is one); ``GradScaler.step`` is one when it steps; a step it skips
  (inf gradients) leaves its forward and backward to the next iteration;
- after a step, the iteration closes at once (exact tiling) when every optimizer alive at
  the first step (found once, by a scan of the garbage collector's objects; one made later
  joins when it steps; one stepped by a wrapper's step counts) has stepped in it, and, in a
  DataLoader loop, when it holds as many steps as the last batch did (so one optimizer
  stepping twice per batch is one iteration). Until a loop's second batch shows how many
  steps a batch holds, the first step on a batch leaves its iteration open: the first
  iteration of a DataLoader loop ends at the second fetch, not at its step's end;
- otherwise it stays open, with no phase, for the next step's forward (the generator
  step of a GAN); the next batch fetch, an evaluation forward (grad off) or the exit
  closes it, and an optimizer stepping twice in it without a batch in between means the
  alive set was too large: that set becomes the optimizers that did step;
- ``data`` starts at ``next()`` of a DataLoader whose batches fed an earlier step (an
  evaluation loader never opens an iteration), or of any loader inside an open iteration
  that has not stepped (gradient accumulation); it lasts until that ``next()`` returns
  (what the loop does with the batch before its forward is no data loading);
- ``forward`` starts at a root module's forward with grad on (outside backward), or with
  grad off inside an open iteration that has not stepped (a frozen teacher);
- ``backward`` starts on entry to ``torch.autograd.backward`` after a root forward
  (:class:`~.roots.BackwardWatch`; every ``backward()`` goes through it, so a functional
  loss's backward is backward), else, as a fallback, when autograd reaches the output of
  a root module; it ends where the next phase starts;
- ``optimizer`` spans the step; a closure passed to ``step`` is wrapped so that its
  forward and backward are booked as such and the rest of the step as ``optimizer``. The
  end of each top-level backward pass is reported by an autograd engine callback
  (:meth:`PhaseTracker.on_backward_end`); once a step has shown how many backward passes
  a step holds, the optimizer phase starts at the end of a step's last backward pass, so
  ``GradScaler``'s unscaling and inf check and gradient clipping are the optimizer's, not
  backward's (the rules are in :mod:`.steps`).

Inference (no optimizer step and no backward yet in the process): each call of the model
(the first root module with parameters) with grad off, or in ``eval()`` mode, is one
iteration: ``forward`` from the call's start to its end, preceded by ``data`` when the
batch came from a DataLoader that fed an earlier inference call. The iteration ends with
the model's forward. Once the process has stepped or run a backward, a forward with grad
off outside an open iteration (evaluation between epochs) opens and extends nothing.

``compile`` spans a Dynamo compilation (callbacks of ``torch._dynamo.callback``); inside an
iteration the phase it interrupted resumes after it; outside one it stands alone.

An iteration still open at exit is closed; one with no ``optimizer`` phase inside is
incomplete (training) or an inference iteration: the analysis tells them apart by whether
the profile holds any optimizer phase.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from dlprof_lite.annotate import facts
from dlprof_lite.annotate.backend import Backend, get_backend
from dlprof_lite.annotate.steps import INFER, TRAIN, StepBook
from dlprof_lite.rules.names import COMPILE, ITERATION, MANUAL_MARK, PHASES

# The open phase while a step has not reached its backward (None: its batch was fetched).
_BEFORE_BACKWARD = ("data", "forward", None)


class PhaseTracker(StepBook):
    """The open iteration and phase of this process, and the transitions between them."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._numbers: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._iteration: Any = None
        self._kind: str | None = None
        self._phase: str | None = None
        self._phase_id: Any = None
        self._resume: str | None = None  # the phase a compilation interrupted
        self._manual = 0
        self.iterations = 0
        self.steps = 0
        self.inference_calls = 0  # inference iterations ended (read by .folding)
        self._depth = 0  # nesting of optimizer steps
        self._outer: int | None = None  # the optimizer of the outermost step
        self._stepped: list[int] = []  # optimizers that stepped in the open iteration
        self._inner: set[int] = set()  # optimizers stepped inside those steps
        self._batch_open = False  # the iteration waits for the next fetch (first batch)
        self._backward_ends = 0  # backward passes ended since the last step
        self._backwards_per_step: int | None = None
        self._early = False  # the optimizer phase was entered at a backward's end
        self._alive: weakref.WeakSet[Any] | None = None
        self._per_batch: int | None = None  # steps the last training batch held
        self._since_fetch = 0
        self._backward_seen = False
        self._model: int | None = None  # id of the model inference iterations follow
        self._params: dict[int, bool] = {}
        self._generated_types: dict[type, bool] = {}
        self._infer_root: int | None = None
        self._training_sources: set[int] = set()
        self._fed: set[int] = set()  # sources fetched since the last step
        self._inference_sources: set[int] = set()
        self._described: set[int] = set()
        self._last_source: int | None = None
        # Set by install: the torch optimizer base class (for the alive scan) and a probe
        # that registers the compile callbacks once Dynamo is imported (True when done).
        self.optimizer_base: type | None = None
        self.compile_probe: Callable[[], bool] | None = None

    @property
    def phase(self) -> str | None:
        """The open phase (read without the lock: a hint for fast paths)."""
        return self._phase

    def enter(self, phase: str) -> None:
        """Make ``phase`` the open phase, opening an iteration when none is open."""
        with self._lock:
            self._enter(phase)

    def _enter(self, phase: str, kind: str = TRAIN) -> None:
        if self._phase == COMPILE:
            self._resume = phase  # takes effect when the compilation ends
            return
        if self._phase == phase:
            return
        if self._iteration is None:
            self._open(kind)
        self._end_phase()
        self._phase = phase
        self._phase_id = self.backend.start(phase)

    def _open(self, kind: str) -> None:
        self._iteration = self.backend.start(ITERATION, self.iterations)
        self._kind = kind
        self.iterations += 1

    def _end_phase(self) -> None:
        if self._phase_id is not None:
            self.backend.end(self._phase_id)
        self._phase = None
        self._phase_id = None

    def _end_iteration(self) -> None:
        if self._phase != COMPILE:
            self._end_phase()
        if self._iteration is not None:
            self.backend.end(self._iteration)
            self._iteration = None
        self._kind = None
        self._stepped.clear()
        self._inner.clear()
        self._batch_open = False
        self._infer_root = None

    def leave(self, phase: str) -> None:
        """End ``phase`` if it is still the open one (the end of a manual :func:`phase`)."""
        with self._lock:
            if self._phase == phase:
                self._end_phase()

    def _probe(self) -> None:
        # Cheap until Dynamo is imported (a dict lookup), then never called again.
        probe = self.compile_probe
        if probe is not None and probe():
            self.compile_probe = None

    # --- data --------------------------------------------------------------------------

    def on_data(self, source: int, describe: Callable[[], dict[str, Any]] | None = None) -> None:
        """A DataLoader iterator is about to fetch a batch from dataset ``id`` ``source``."""
        self._probe()
        with self._lock:
            self._last_source = source
            self._fed.add(source)
            if self._since_fetch and source in self._training_sources:
                self._per_batch = self._since_fetch  # steps the last batch held
            self._since_fetch = 0
            if not self._manual and (self._stepped or self._kind == INFER):
                self._end_iteration()  # a new batch: the step (or inference call) is over
            if self._iteration is not None:
                self._enter("data")
            elif source in self._training_sources:
                self._enter("data", TRAIN)
            elif source in self._inference_sources and self.steps == 0:
                self._enter("data", INFER)
            else:
                return
            if describe is not None and source not in self._described:
                self._described.add(source)
                facts.record("dataloader", describe())

    def on_data_end(self) -> None:
        """The fetch returned: the data phase is the wait in ``next()`` only (what the loop
        does with the batch before its forward is the step's, not data loading)."""
        if self._phase != "data":
            return
        with self._lock:
            if self._phase == "data":
                self._end_phase()

    # --- root forwards and backward ----------------------------------------------------

    def on_root_forward(self, module: Any, grad: bool, training: bool = True) -> None:
        """A root module's forward starts outside backward (``grad``: grad mode is on)."""
        self._probe()
        if self._phase == COMPILE or self._generated(module):
            return
        with self._lock:
            if (not grad or not training) and self._inference_call(module):
                self._inference_forward(module)
            elif grad:
                self._training_forward()
            elif self._manual:
                if self._iteration is not None:
                    self._enter("forward")
            elif self._kind == TRAIN and not self._stepped and self._phase in _BEFORE_BACKWARD:
                self._enter("forward")  # a frozen model inside the step (a teacher)
            else:
                # Evaluation: it closes a finished step, and its batches feed no training.
                if self._kind == TRAIN and self._stepped:
                    self._end_iteration()
                self._fed.clear()

    def _generated(self, module: Any) -> bool:
        """An ``fx`` graph module: code a compiler generated (``aot_eager`` runs one with
        grad off inside each compiled call), not the script's model."""
        cls = type(module)
        generated = self._generated_types.get(cls)
        if generated is None:
            generated = self._generated_types[cls] = cls.__module__.startswith("torch.fx")
        return generated

    def on_root_forward_end(self, module: Any) -> None:
        """A root module's forward returned (or raised): ends an inference iteration."""
        if self._infer_root is None:
            return
        with self._lock:
            if self._kind == INFER and self._infer_root == id(module) and not self._manual:
                if self._last_source is not None:
                    self._inference_sources.add(self._last_source)
                self._end_iteration()
                self.inference_calls += 1

    def _training_forward(self) -> None:
        if self._kind == INFER and not self._manual:
            self._end_iteration()
        if self._early and self._phase == "optimizer":
            # A forward after an early optimizer phase, with no step: GradScaler skipped
            # the step (inf gradients). Its backward passes were not the step's: count anew.
            self._backward_ends = 0
        self._early = False
        # With steps taken and the iteration still open: the next optimizer's round (GAN).
        self._enter("forward")

    def _inference_call(self, module: Any) -> bool:
        """Whether this root forward is a call of the model in an inference-only process."""
        if self.steps or self._backward_seen or (self._kind == TRAIN and not self._manual):
            return False
        if self._model is None:
            key = id(module)
            has = self._params.get(key)
            if has is None:
                params = getattr(module, "parameters", None)
                has = callable(params) and next(iter(params()), None) is not None
                self._params[key] = has
            if has:
                self._model = key
        return self._model == id(module)

    def _inference_forward(self, module: Any) -> None:
        if self._manual:
            if self._iteration is not None:
                self._enter("forward")
            return
        if self._kind == INFER and (self._infer_root is not None or self._phase == "forward"):
            self._end_iteration()  # a new call while the last one is still open
        self._enter("forward", INFER)
        self._infer_root = id(module)

    def on_backward(self) -> None:
        """Autograd reached the output of a root module."""
        with self._lock:
            self._backward_seen = True
            if self._kind == INFER and not self._manual:
                self._end_iteration()
            self._enter("backward")

    # --- compilation -------------------------------------------------------------------

    def on_compile_start(self) -> None:
        """Dynamo starts compiling: a ``compile`` phase interrupts the open phase."""
        with self._lock:
            if self._phase == COMPILE:
                return
            self._resume = self._phase
            self._end_phase()
            self._phase = COMPILE
            self._phase_id = self.backend.start(COMPILE)

    def on_compile_end(self) -> None:
        """Compilation is over: the interrupted phase resumes (inside an open iteration)."""
        with self._lock:
            if self._phase != COMPILE:
                return
            self._end_phase()
            resume, self._resume = self._resume, None
            if resume is not None and self._iteration is not None:
                self._enter(resume)

    # --- manual ranges -----------------------------------------------------------------

    def begin_iteration(self, index: int | None) -> None:
        """Open a manual iteration (closing an automatic one that is open)."""
        with self._lock:
            if self._manual == 0:
                self._end_iteration()
                self.backend.mark(MANUAL_MARK)
                self._iteration = self.backend.start(
                    ITERATION, self.iterations if index is None else index
                )
                self._kind = TRAIN
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
            self._end_phase()  # a compile phase outside any iteration
            self._depth = 0


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
