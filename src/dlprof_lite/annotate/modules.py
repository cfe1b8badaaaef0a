"""Module ranges: ``fwd:<qualname>:<type>`` around each forward, ``bwd:...`` around its backward.

Forward ranges are pushed and popped by module forward pre/post hooks on the calling thread;
the post hook is registered with ``always_call=True``, so a forward that raises still pops
its range.

Backward ranges come from autograd graph hooks, not from ``register_full_backward_hook``:
full backward hooks wrap every module's inputs and outputs in a custom autograd Function,
which makes in-place ops on them an error (``ReLU(inplace=True)`` after a BatchNorm, as in
torchvision's ResNet, raises) and which ends the backward of a module whose inputs need no
grad (the first layer, the root model) before its work has run. Instead (:mod:`.backward`):
each module call records the interval of autograd sequence numbers handed out while it ran;
when the backward pass starts, the graph of the forward is walked once and each node's
pre-hook opens exactly the ranges of the calls that created it (innermost interval first),
popping the others; the ranges still open are popped when the graph's last nodes have run.
Hooks run on the thread autograd runs the nodes on, so each backward range is pushed and
popped on that thread. Ranges left open when autograd skipped part of a graph are popped
when the next backward pass starts on that thread.

Recomputation (activation checkpointing, reentrant or not, ``checkpoint_sequential``): a
module forward that runs while a backward pass runs on its thread (autograd's graph task id
is set) is pushed as ``rec:<qualname>:<type>``, never starts a forward phase, and nests in
the backward range of the checkpointed module (non-reentrant: recomputed when a node needs
a saved tensor; reentrant: recomputed first, then backward through the new graph). Such a
forward is hooked as it returns (its graph runs at once, inside the pass): the range opens
in a pre-hook of the nodes that produced its outputs and closes when every *terminal* node
of its subgraph has run (found by walking ``next_functions`` from the outputs down to the
inputs' nodes), see :mod:`.nodehooks`. So is every forward on a torch without sequence
numbers for Python (``torch._C._autograd._get_sequence_nr``).

Phase events: a root forward outside backward calls ``tracker.on_root_forward`` (and
``on_root_forward_end``); the backward phase starts when ``torch.autograd.backward`` is
entered after a root forward (:class:`~.roots.BackwardWatch`), and otherwise, as a fallback,
in the pre-hook of the root's output nodes. That pre-hook also queues an autograd engine
callback (once per graph task) that reports the end of the pass (``tracker.on_backward_end``:
what runs between the last backward and the step is the optimizer's, see :mod:`.steps`).

Names (rule in :mod:`.roots`): a root model is named by the variable or attribute it is bound
to (``student``, ``ema_model``, ``models["gen"]`` → ``gen``), else ``model``; another model
object under a name already given is ``model#2``, ``model#3``, …; a root with neither
children nor parameters (a loss module) by its class. The submodules of the model named
``model`` keep their plain qualified names (``layer1.0.conv1``); those of every other root are
prefixed with the root's name (``student.fc1``, ``model#2.layer1.0.conv1``), so a script's
usual single ``model`` reads as before and two models never share a layer. A module with no
known name is named by its parent's name and its own class. Wrappers (DDP, FSDP,
``torch.compile``, Lightning, DeepSpeed; :mod:`.wrappers`) are seen through: the wrapper's
range is its model's layer, the wrapped module's own call inside it pushes nothing, and no
name carries a wrapper's attribute (``module.``, ``_orig_mod.``).

Compiled modules: see :mod:`.compiled` (hooks do nothing while Dynamo traces). DDP models: a
root forward remembers them, the first backward pass hooks their gradient buckets
(:mod:`.ddp`).

Cost (the hot path runs twice per module call in forward, once per owner change of the
autograd nodes in backward): names are cached per module id (a weak reference tells a reused
id apart), a forward call records a sequence-number interval and no hook (hooks are
registered in the backward pass, where a node's owner changes: :mod:`.backward`), and
nothing kept after the pass starts refers to an autograd
node, so a step leaves no reference cycle for the garbage collector. A graph no backward pass
used is let go when the next model forward starts. After the warm-up step the modules too
short to time are folded (:mod:`.folding`): ``forward_pre`` returns at once for them, or
torch does not call the hooks for them at all. The ``annotation`` fact (annotated module
calls, ns per call, steps) is written at exit; ns per call comes from
:func:`~.calibrate.calibrate`, a measurement of this hook path in-process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from dlprof_lite.annotate import facts
from dlprof_lite.annotate.backend import Backend
from dlprof_lite.annotate.backward import Call, Forward, RootHook, bind
from dlprof_lite.annotate.calibrate import CALIBRATION_ROUNDS, calibrate
from dlprof_lite.annotate.compiled import CompiledRoots
from dlprof_lite.annotate.ddp import DdpBuckets
from dlprof_lite.annotate.describe import MAX_MODULE_FACTS, describe
from dlprof_lite.annotate.flops import FlopCapture, _Capture
from dlprof_lite.annotate.graph import floor_of, grad_nodes, inner, terminal_nodes
from dlprof_lite.annotate.module_names import ModuleName, ModuleNames
from dlprof_lite.annotate.nodehooks import BackwardCall, NodeHooks
from dlprof_lite.annotate.phases import PhaseTracker
from dlprof_lite.annotate.roots import BackwardWatch, generated
from dlprof_lite.annotate.tensor_bytes import MemoryFacts
from dlprof_lite.rules.facts import fact_text

if TYPE_CHECKING:
    from dlprof_lite.annotate.folding import Warmup

_NO_TASK = -1
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: _NO_TASK)
_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_engine = torch.autograd.Variable._execution_engine
_TENSOR = torch.Tensor
# The calling thread's next autograd sequence number (None: an older torch; every module
# call is then hooked as its forward returns, as during recomputation).
_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)


class _Open:
    """One range this layer pushed (or chose not to push) on a thread's NVTX stack.

    ``forward``: a module's forward (else a backward range); ``call``: the module call's
    backward record, ``scope``: the innermost such record open (see :mod:`.backward`);
    ``floor``: the inputs' largest sequence number, for ranges hooked as the forward runs.
    """

    __slots__ = ("call", "floor", "forward", "key", "pushed", "scope", "task")

    def __init__(
        self,
        key: object,
        pushed: bool,
        forward: bool = True,
        task: int = _NO_TASK,
        floor: int = -1,
        call: Call | None = None,
        scope: Call | None = None,
    ) -> None:
        self.key = key
        self.pushed = pushed
        self.forward = forward
        self.task = task
        self.floor = floor
        self.call = call
        self.scope = scope


class _Frame(threading.local):
    """Per-thread state: the open ranges, the root forward being recorded, and the node hooks
    registered while a forward runs inside a backward pass (recomputation)."""

    def __init__(self) -> None:
        self.stack: list[_Open] = []
        self.forwards = 0
        self.forward: Forward | None = None  # the root forward running on this thread
        self.starts: dict[int, NodeHooks] = {}
        self.ends: dict[int, NodeHooks] = {}
        self.capture: _Capture | None = None  # the root call whose module calls are kept
        # Keeps the hooked nodes alive until the root forward returns, so that an id in the
        # tables above is never reused by a new node. Cleared then: no node outlives the
        # forward through us, and nothing of ours refers back to a node (no cycles).
        self.nodes: list[Any] = []


class ModuleRanges:
    """Forward and backward ranges of modules, and the root-forward/backward phase events."""

    def __init__(
        self,
        backend: Backend,
        tracker: PhaseTracker | None = None,
        *,
        ranges: bool = True,
        depth: int | None = None,
    ) -> None:
        self._backend = backend
        self._tracker = tracker
        self._ranges = ranges
        self._depth = depth
        self.names = ModuleNames()
        self._names = self.names.table  # the hot path's lookup
        self._frame = _Frame()
        self.calls = 0  # hooked forward calls, for the ``annotation`` fact
        self._described = 0  # ``module`` facts written
        self._queued = _NO_TASK  # the graph task whose end is queued for the tracker
        self._reported = False
        self._cost: int | None = None  # measured ns per annotated call (hook_cost)
        # Times module calls until the warm-up step ends (set by install; see .folding).
        self.warmup: Warmup | None = None
        self.warm_up: dict[str, int] = {}  # calls and steps when warm-up ended (the fact's)
        self._pending: list[Forward] = []  # root forwards recorded, not yet bound
        self._watch = BackwardWatch(self._backward_entered) if tracker is not None else None
        self.compiled = CompiledRoots(self)
        self.ddp = DdpBuckets(backend, self.layer_of) if ranges else None
        self.flops = FlopCapture(self._fact, _quiet) if ranges else None
        self.memory = (MemoryFacts(self._fact, self._known_modules, self._innermost_layer)
                       if ranges else None)  # fmt: skip

    def _fact(self, key: str, value: dict[str, Any]) -> None:
        self._backend.mark(fact_text(key, value))

    def _known_modules(self) -> list[tuple[str, torch.nn.Module]]:
        """(layer, module) of every module named so far that is alive, in naming order."""
        found = []
        for name in list(self.names.table.values()):
            module = name.ref()
            if module is not None:
                layer = self.layer_of(module)
                if layer is not None:
                    found.append((layer, module))
        return found

    def _innermost_layer(self) -> str | None:
        """The layer of the innermost module forward running on the calling thread."""
        module = _innermost_module(self._frame.stack)
        return self.layer_of(module) if module is not None else None

    def optimizer_stepped(self, optimizer: Any) -> None:
        """An optimizer step ended (the step post-hook): its first writes the memory facts."""
        if self.memory is not None:
            self.memory.optimizer_stepped(optimizer)

    def layer_of(self, module: torch.nn.Module) -> str | None:
        """The layer name ``module``'s ranges carry (its nearest ancestor's within ``--depth``);
        ``None`` for a module not named yet."""
        name = self.names.known(module)
        if name is None:
            return None
        if self._depth is None or name.depth <= self._depth:
            return name.qualname
        parts = name.qualname.split(".")
        return ".".join(parts[: max(1, len(parts) - (name.depth - self._depth))])

    def name_model(self, model: torch.nn.Module, prefix: str = "") -> None:
        """Learn the qualified names of ``model`` and its submodules (known names are kept)."""
        self.names.name_model(model, prefix)

    # --- forward hooks -----------------------------------------------------------------

    def forward_pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if _compiling():
            return  # inside a traced region: no side effect, no guard (see .compiled)
        frame = self._frame
        root = frame.forwards == 0
        if not root and not self._ranges:
            frame.forwards += 1  # phases only: an inner module matters for its depth alone
            return
        name = self._names.get(id(module))
        if name is None or name.ref() is not module:
            if generated(module):
                return  # compiled code run eagerly: part of its compiled root's range
            name = self.names.learn(module, None if root else _innermost_module(frame.stack))
        if name.folded:
            return  # too short to time: its parent's (see .folding)
        self.calls += 1
        grad = _grad_enabled()
        recompute = _graph_task_id() != _NO_TASK  # a forward run by a backward pass
        if root and not recompute:
            if self.warmup is not None:
                self.warmup.root_starts(module)  # may end warm-up: before this step's events
            if self._pending and name.model:
                # A model's forward while the last graphs wait for a backward pass: one that
                # may never come (evaluation with grad on); bind them now rather than hold
                # their graphs. A loss module's forward (the usual next root) waits.
                self.bind_pending()
            if self.ddp is not None:
                self.ddp.seen(module)
            if self._tracker is not None:
                self._watch.disarm()  # type: ignore[union-attr]
                self._tracker.on_root_forward(module, grad, module.training)
            if self.flops is not None:
                frame.capture = self.flops.root_start(module, name.qualname, args)
            if self.memory is not None:
                tracker = self._tracker
                self.memory.root_start(module, tracker.iterations if tracker is not None
                                       else None, grad, module.training)  # fmt: skip
        # A wrapper's module called inside it is the wrapper's layer: one range, not two.
        pushed = (self._ranges and (root or not name.alias)
                  and (self._depth is None or name.depth <= self._depth))  # fmt: skip
        if not name.described:
            self._describe(module, name, args)  # after any phase event it starts
        stack = frame.stack
        if recompute or _sequence_nr is None:  # hooked as it runs (see _watch_backward)
            floor = floor_of(args) if pushed and grad else -1
            stack.append(_Open(module, pushed, True, _NO_TASK, floor))
        else:
            scope = stack[-1].scope if stack and not root else None
            call = None
            if pushed and grad:
                if root:
                    call = Call(name.bwd, None, _sequence_nr())
                    frame.forward = Forward(call)
                elif frame.forward is not None:
                    call = Call(name.bwd, scope, _sequence_nr())
                    frame.forward.calls.append(call)
            stack.append(_Open(module, pushed, True, _NO_TASK, -1, call, call or scope))
        frame.forwards += 1
        memory = self.memory
        if memory is not None and memory.measuring and pushed and not recompute:
            memory.module_in(name.qualname)
        if pushed:  # last: the range holds the module's own work, not this bookkeeping
            self._backend.push(name.rec if recompute else name.fwd)
        warmup = self.warmup
        if warmup is not None:
            warmup.started(module)

    def _describe(self, module: torch.nn.Module, name: ModuleName, args: Any) -> None:
        name.described = True
        if self._described < MAX_MODULE_FACTS:
            self._described += 1
            warmup = self.warmup
            start = warmup.now() if warmup is not None else 0
            self._backend.mark(describe(module, name.qualname, name.type, args, name.wrapper))
            prepare = getattr(self._backend, "prepare", None)
            if prepare is not None:
                prepare(name.fwd, name.bwd)  # the first push's work, here
            if warmup is not None:  # first-call work inside the modules that enclose it
                warmup.annotated(start)

    def forward_post(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        """Forward hook, with or without kwargs (torch drops them when forward raised)."""
        if _compiling():
            return
        frame = self._frame
        if frame.forwards > 1 and not self._ranges:
            frame.forwards -= 1
            return
        warmup = self.warmup
        if warmup is not None:
            warmup.ended(module)
        entry = self._pop_to(frame, module)
        if entry is None:
            return
        root = frame.forwards == 0
        grad = _grad_enabled()
        in_backward = _graph_task_id() != _NO_TASK
        memory = self.memory
        if memory is not None and memory.measuring and not in_backward:
            if entry.pushed:
                name = self._names.get(id(module))
                if name is not None:
                    memory.module_out(name.qualname)
            if root:
                memory.root_end()
        capture = frame.capture
        if capture is not None and not in_backward:
            if entry.pushed:
                self._capture(capture, frame, module, args, rest)
            if root:
                frame.capture = None
        if in_backward or _sequence_nr is None:
            if grad and (entry.pushed or root):
                kwargs = rest[0] if len(rest) == 2 else None
                self._watch_backward(module, entry, kwargs, rest[-1], root)
            if root:
                frame.starts.clear()
                frame.ends.clear()
                frame.nodes.clear()
        else:
            call = entry.call
            if call is not None:
                call.end = _sequence_nr()
            if root:
                self._root_done(frame, grad, rest[-1])
            elif call is not None and grad and frame.forward is not None:
                output = rest[-1]  # walked from too: a side output may not lead to the root's
                if type(output) is _TENSOR:
                    node = output.grad_fn
                    if node is not None:
                        frame.forward.outputs.append(node)
                else:
                    frame.forward.outputs.extend(grad_nodes(output))
        if root:
            tracker = self._tracker
            if tracker is not None and not in_backward:
                tracker.on_root_forward_end(module)
                if self.warmup is not None:
                    self.warmup.root_done(module, grad)
                if grad:
                    self._watch.arm()  # type: ignore[union-attr]

    def _capture(
        self, capture: _Capture, frame: _Frame, module: torch.nn.Module, args: Any,
        rest: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """A module call of a captured root call returned: keep its inputs (.flops). Like the
        first call's fact, this work is left out of the warm-up timing of the modules that
        enclose it (.folding)."""
        name = self._names.get(id(module))
        if name is not None and self.flops is not None:
            warmup = self.warmup
            start = warmup.now() if warmup is not None else 0
            kwargs = rest[0] if len(rest) == 2 else None
            self.flops.record(capture, module, name.qualname, len(frame.stack), args, kwargs,
                              name.wrapper)  # fmt: skip
            if warmup is not None:
                warmup.annotated(start)

    def _root_done(self, frame: _Frame, grad: bool, output: Any) -> None:
        """A root forward returned: hook its output nodes; its graph waits to be bound."""
        forward, frame.forward = frame.forward, None
        if not grad or (forward is None and self._tracker is None):
            return
        nodes = grad_nodes(output)
        for node in nodes:
            hook = RootHook(self, True)
            node.register_prehook(hook)
            if forward is not None:
                forward.root_hooks[id(node)] = hook
        if forward is not None:
            forward.root_outputs = nodes
            self._pending.append(forward)

    def _watch_backward(
        self, module: torch.nn.Module, entry: _Open, kwargs: Any, output: Any, root: bool
    ) -> None:
        nodes = grad_nodes(output)
        if not nodes:
            return
        top_level = root and _graph_task_id() == _NO_TASK
        call = BackwardCall(self, None, top_level)
        frame = self._frame
        if entry.pushed:
            floor = max(entry.floor, floor_of(kwargs.values()) if kwargs else -1)
            terminals = terminal_nodes(nodes, floor)
            if terminals:
                call.name = self._names[id(module)].bwd
                call.terminals = call.remaining = len(terminals)
                for node in terminals:
                    self._hooks(frame, frame.ends, node, pre=False).calls.append(call)
                # Outputs made before the module ran (an input returned as is) are not its own.
                nodes = [node for node in nodes if inner(node, floor)]
        if call.name is None and not top_level:
            return
        for node in nodes:
            # A parent registers after its children: put it first, so it opens first.
            self._hooks(frame, frame.starts, node, pre=True).calls.insert(0, call)

    @staticmethod
    def _hooks(frame: _Frame, table: dict[int, NodeHooks], node: Any, *, pre: bool) -> NodeHooks:
        hooks = table.get(id(node))
        if hooks is None:
            hooks = table[id(node)] = NodeHooks(node, pre)
            frame.nodes.append(node)
        return hooks

    # --- backward ----------------------------------------------------------------------

    def _backward_entered(self) -> None:
        """``torch.autograd.backward`` was entered after a root forward (before the engine)."""
        if self._pending:
            self.bind_pending()
        if self.ddp is not None and self.ddp.pending:
            self.ddp.arm()
        self._tracker.on_backward()  # type: ignore[union-attr]

    def bind_pending(self) -> None:
        pending, self._pending = self._pending, []
        for forward in pending:
            bind(self, forward)

    def root_backward(self, hook: RootHook) -> None:
        """Pre-hook of a root's output node: bind, report a top-level pass, open the chain."""
        if self._pending:
            self.bind_pending()  # the engine runs without torch.autograd.backward seen
        if self.ddp is not None and self.ddp.pending:
            self.ddp.arm()
        frame = self._frame
        if hook.top_level:
            task = _graph_task_id()
            self._top_level_started(task)
            if self._ranges:
                self._drop_stale(frame, task)
        if hook.owner is not None:
            self.sync(hook.owner)

    def _top_level_started(self, task: int) -> None:
        if self._tracker is not None:
            self._tracker.on_backward()
            if task != self._queued:
                # Once per graph task: two root models (a GAN's G and D) in one backward
                # pass each start it, and the pass ends once.
                self._queued = task
                _queue_backward_end(self._tracker)

    def sync(self, owner: Call) -> None:
        """Make the backward ranges open on this thread ``owner``'s chain (a node's pre-hook)."""
        stack = self._frame.stack
        if stack and stack[-1].key is owner:
            return  # the common case: the same call as the last node
        level = -1
        while stack:
            key = stack[-1].key
            if type(key) is not Call:
                break
            if key.level <= owner.level and owner.ancestor(key.level) is key:
                level = key.level
                break
            stack.pop()
            self._backend.pop()
        missing = []
        call: Call | None = owner
        while call is not None and call.level > level:
            missing.append(call)
            call = call.parent
        task = _graph_task_id()
        for call in reversed(missing):
            self._backend.push(call.name)
            stack.append(_Open(call, True, False, task))

    def end_forward(self, root: Call) -> None:
        """The last nodes of a forward's graph ran: pop its ranges open on this thread."""
        stack = self._frame.stack
        while stack:
            key = stack[-1].key
            if type(key) is not Call or (key is not root and key.root is not root):
                break
            stack.pop()
            self._backend.pop()

    def _backward_started(self, call: BackwardCall) -> None:
        frame = self._frame
        task = _graph_task_id()
        if call.top_level:
            self._top_level_started(task)
        if call.name is None:
            return
        if call.top_level:
            self._drop_stale(frame, task)
        self._backend.push(call.name)
        frame.stack.append(_Open(call, True, False, task))

    def _drop_stale(self, frame: _Frame, task: int) -> None:
        """Pop backward ranges a finished backward pass left open on this thread."""
        stack = frame.stack
        while stack and not stack[-1].forward and stack[-1].task != task:
            if stack.pop().pushed:
                self._backend.pop()

    # --- the stack ---------------------------------------------------------------------

    def _pop_to(self, frame: _Frame, key: object) -> _Open | None:
        """Pop ``key``'s entry and any left above it; ``None`` when it is not open here."""
        stack = frame.stack
        if stack and stack[-1].key is key:  # the common case: the innermost entry
            entry = stack.pop()
            if entry.pushed:
                self._backend.pop()
            if entry.forward:
                frame.forwards -= 1
            return entry
        for index in range(len(stack) - 1, -1, -1):
            if stack[index].key is key:
                break
        else:
            return None
        while True:
            entry = stack.pop()
            if entry.pushed:
                self._backend.pop()
            if entry.forward:
                frame.forwards -= 1
            if entry.key is key:
                return entry

    def close(self) -> None:
        """Pop every range still open on the calling thread; record the ``annotation`` fact."""
        frame = self._frame
        while frame.stack:
            self._pop_to(frame, frame.stack[-1].key)
        if self._watch is not None:
            self._watch.disarm()
        self._pending.clear()  # graphs never consumed: nothing to hook
        if self.memory is not None:
            self.memory.finish()
        if self.flops is not None:
            self.flops.finish()
        if self.calls and not self._reported:
            self._reported = True
            steps = self._tracker.steps if self._tracker is not None else None
            facts.record("annotation", {"module_calls": self.calls,
                                        "ns_per_call": self.hook_cost(), "steps": steps,
                                        **self.warm_up})  # fmt: skip

    def hook_cost(self, rounds: int = CALIBRATION_ROUNDS) -> int:
        """Measured ns of one annotated module call (:func:`~.calibrate.calibrate`); the
        exit fact's full measurement is made once. Warm-up's end (:mod:`.folding`), inside the
        run, asks for fewer ``rounds``."""
        if rounds != CALIBRATION_ROUNDS:
            return calibrate(ModuleRanges, rounds)
        if self._cost is None:
            self._cost = calibrate(ModuleRanges)
        return self._cost

    def remove(self) -> None:
        """Undo what is not a hook handle: the compiled-call wrappers."""
        self.compiled.remove()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The module hooks do nothing meanwhile (the FLOP count's own module calls): they
    return at once as they do while Dynamo traces, at no cost to the hot path."""
    global _compiling
    kept = _compiling
    _compiling = _always
    try:
        yield
    finally:
        _compiling = kept


def _always() -> bool:
    return True


def _queue_backward_end(tracker: PhaseTracker) -> None:
    """Report the end of this graph task to the tracker (called inside the engine: once per
    top-level backward pass, from the pre-hook of the root's output nodes)."""
    # RuntimeError: no graph task on this thread (a hook run by hand): no end to report.
    with contextlib.suppress(RuntimeError):
        _engine.queue_callback(tracker.on_backward_end)


def _innermost_module(stack: list[_Open]) -> torch.nn.Module | None:
    for entry in reversed(stack):
        if isinstance(entry.key, torch.nn.Module):
            return entry.key
    return None
