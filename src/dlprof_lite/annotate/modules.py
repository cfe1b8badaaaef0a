"""Module ranges: ``fwd:<qualname>:<type>`` around each forward, ``bwd:...`` around its backward.

Forward ranges are pushed and popped by module forward pre/post hooks on the calling thread;
the post hook is registered with ``always_call=True``, so a forward that raises still pops
its range.

Backward ranges come from autograd graph hooks registered when the forward returns, not from
``register_full_backward_hook``: full backward hooks wrap every module's inputs and outputs in
a custom autograd Function, which makes in-place ops on them an error (``ReLU(inplace=True)``
after a BatchNorm, as in torchvision's ResNet, raises) and which ends the backward of a module
whose inputs need no grad (the first layer, the root model) before its work has run. Instead:

- the range opens in a pre-hook of the autograd nodes that produced the module's outputs;
- it closes when every *terminal* node of the module's subgraph has run (a post-hook on each):
  the nodes of the subgraph are those created during the forward, found by walking
  ``next_functions`` from the outputs and stopping at parameter leaves and at nodes with a
  sequence number at most the largest of the inputs' nodes (older nodes: outside the module).

Pre-hooks and post-hooks run on the thread autograd runs the nodes on, so each backward range
is pushed and popped on that thread. Where a parent and its last child share an output node,
one hook per node opens the parent first; where they share a terminal node the child closes
first. Activation checkpointing: non-reentrant recomputation pushes forward ranges inside the
checkpointed module's backward range; reentrant recomputation registers hooks on the new
graph, which its nested backward runs. Ranges left open when autograd skipped part of a graph
are popped when the next backward pass starts on that thread.

Qualified names come from ``named_modules()`` of the root model, learnt on the first forward
of a module with no forward open on its thread; the first such root with submodules or
parameters is named ``model`` (``names.ROOT_MODULE``); later roots, and roots with neither
(a loss module), are named by their class. A module with no known name is named by its
parent's name and its own class.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from dlprof_lite.annotate.backend import Backend
from dlprof_lite.annotate.names import BACKWARD, FORWARD, module_range
from dlprof_lite.annotate.phases import PhaseTracker

# Walking a module's autograd subgraph stops here; such a module gets no backward range.
MAX_SUBGRAPH_NODES = 20_000
_NO_TASK = -1
_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: _NO_TASK)


class _Name:
    __slots__ = ("bwd", "depth", "fwd", "qualname")

    def __init__(self, qualname: str, type_name: str, depth: int) -> None:
        self.qualname = qualname
        self.depth = depth
        self.fwd = module_range(FORWARD, qualname, type_name)
        self.bwd = module_range(BACKWARD, qualname, type_name)


class _Open:
    """One range this layer pushed (or chose not to push) on a thread's NVTX stack."""

    __slots__ = ("floor", "key", "pushed", "task")

    def __init__(self, key: object, pushed: bool, task: int = _NO_TASK, floor: int = -1) -> None:
        self.key = key
        self.pushed = pushed
        self.task = task
        self.floor = floor


class _Frame(threading.local):
    """Per-thread state: the open ranges, and the node hooks registered during one forward."""

    def __init__(self) -> None:
        self.stack: list[_Open] = []
        self.forwards = 0
        self.starts: dict[int, _NodeHooks] = {}
        self.ends: dict[int, _NodeHooks] = {}


class _BackwardCall:
    """The backward of one module call: opened by its output nodes, closed by its terminals."""

    __slots__ = ("name", "owner", "remaining", "started", "terminals", "top_level")

    def __init__(self, owner: ModuleRanges, name: str | None, top_level: bool) -> None:
        self.owner = owner
        self.name = name
        self.top_level = top_level
        self.terminals = 0
        self.remaining = 0
        self.started = False

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self.owner._backward_started(self)

    def finish_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            if self.started and self.name is not None:
                self.owner._pop_to(self.owner._frame, self)
            # Ready for another backward through the same graph (retain_graph=True).
            self.remaining = self.terminals
            self.started = False


class _NodeHooks:
    """The one pre-hook (or post-hook) this layer puts on an autograd node."""

    __slots__ = ("calls", "node")

    def __init__(self, node: Any, pre: bool) -> None:
        self.node = node
        self.calls: list[_BackwardCall] = []
        if pre:
            node.register_prehook(self._pre)
        else:
            node.register_hook(self._post)

    def _pre(self, grad_outputs: Any) -> None:
        for call in self.calls:
            call.start()

    def _post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        for call in self.calls:
            call.finish_one()


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
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, _Name] = weakref.WeakKeyDictionary()
        self._model_named = False
        self._frame = _Frame()

    # --- names -------------------------------------------------------------------------

    def name_model(self, model: torch.nn.Module, prefix: str = "") -> None:
        """Learn the qualified names of ``model`` and its submodules (known names are kept)."""
        for qual, module in model.named_modules():
            if module in self._names:
                continue
            full = ".".join(part for part in (prefix, qual) if part).replace(":", "_")
            depth = qual.count(".") + 1 if qual else 0
            self._names[module] = _Name(full, type(module).__name__, depth)
        if not prefix:
            self._model_named = True

    def _learn(self, module: torch.nn.Module, parent: torch.nn.Module | None) -> _Name:
        type_name = type(module).__name__
        if parent is None:
            # The model, not a loss module: it has submodules or parameters of its own.
            is_model = next(module.children(), None) is not None or any(
                True for _ in module.parameters(recurse=False)
            )
            prefix = "" if is_model and not self._model_named else type_name
            self.name_model(module, prefix)
            return self._names[module]
        outer = self._names.get(parent)
        qual = f"{outer.qualname}.{type_name}" if outer and outer.qualname else type_name
        name = _Name(qual, type_name, outer.depth + 1 if outer else 1)
        self._names[module] = name
        return name

    # --- forward hooks -----------------------------------------------------------------

    def forward_pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        frame = self._frame
        root = frame.forwards == 0
        name = self._names.get(module)
        if name is None:
            name = self._learn(module, None if root else _innermost_module(frame.stack))
        grad = torch.is_grad_enabled()
        if root and grad and self._tracker is not None and _graph_task_id() == _NO_TASK:
            self._tracker.on_forward()
        pushed = self._ranges and (self._depth is None or name.depth <= self._depth)
        if pushed:
            self._backend.push(name.fwd)
        floor = _floor(args) if pushed and grad else -1
        frame.stack.append(_Open(module, pushed, floor=floor))
        frame.forwards += 1

    def forward_post(self, module: torch.nn.Module, args: tuple[Any, ...], *rest: Any) -> None:
        """Forward hook, with or without kwargs (torch drops them when forward raised)."""
        frame = self._frame
        entry = self._pop_to(frame, module)
        if entry is None:
            return
        root = frame.forwards == 0
        if torch.is_grad_enabled() and (entry.pushed or root):
            kwargs = rest[0] if len(rest) == 2 else None
            self._watch_backward(module, entry, kwargs, rest[-1], root)
        if root:
            frame.starts.clear()
            frame.ends.clear()

    def _watch_backward(
        self, module: torch.nn.Module, entry: _Open, kwargs: Any, output: Any, root: bool
    ) -> None:
        nodes = _grad_nodes(output)
        if not nodes:
            return
        top_level = root and _graph_task_id() == _NO_TASK
        call = _BackwardCall(self, None, top_level)
        if entry.pushed:
            floor = max(entry.floor, _floor(kwargs.values()) if kwargs else -1)
            terminals = _terminal_nodes(nodes, floor)
            if terminals:
                call.name = self._names[module].bwd
                call.terminals = call.remaining = len(terminals)
                for node in terminals:
                    self._hooks(self._frame.ends, node, pre=False).calls.append(call)
                # Outputs made before the module ran (an input returned as is) are not its own.
                nodes = [node for node in nodes if _inner(node, floor)]
        if call.name is None and not top_level:
            return
        for node in nodes:
            # A parent registers after its children: put it first, so it opens first.
            self._hooks(self._frame.starts, node, pre=True).calls.insert(0, call)

    @staticmethod
    def _hooks(table: dict[int, _NodeHooks], node: Any, *, pre: bool) -> _NodeHooks:
        hooks = table.get(id(node))
        if hooks is None:
            hooks = table[id(node)] = _NodeHooks(node, pre)
        return hooks

    # --- backward ----------------------------------------------------------------------

    def _backward_started(self, call: _BackwardCall) -> None:
        if call.top_level and self._tracker is not None:
            self._tracker.on_backward()
        if call.name is None:
            return
        frame = self._frame
        task = _graph_task_id()
        if call.top_level:
            self._drop_stale(frame, task)
        self._backend.push(call.name)
        frame.stack.append(_Open(call, True, task))

    def _drop_stale(self, frame: _Frame, task: int) -> None:
        """Pop backward ranges a finished backward pass left open on this thread."""
        stack = frame.stack
        while stack and isinstance(stack[-1].key, _BackwardCall) and stack[-1].task != task:
            if stack.pop().pushed:
                self._backend.pop()

    # --- the stack ---------------------------------------------------------------------

    def _pop_to(self, frame: _Frame, key: object) -> _Open | None:
        """Pop ``key``'s entry and any left above it; ``None`` when it is not open here."""
        stack = frame.stack
        for index in range(len(stack) - 1, -1, -1):
            if stack[index].key is key:
                break
        else:
            return None
        while True:
            entry = stack.pop()
            if entry.pushed:
                self._backend.pop()
            if not isinstance(entry.key, _BackwardCall):
                frame.forwards -= 1
            if entry.key is key:
                return entry

    def close(self) -> None:
        """Pop every range still open on the calling thread (at program exit)."""
        frame = self._frame
        while frame.stack:
            self._pop_to(frame, frame.stack[-1].key)


def _innermost_module(stack: list[_Open]) -> torch.nn.Module | None:
    for entry in reversed(stack):
        if isinstance(entry.key, torch.nn.Module):
            return entry.key
    return None


def _tensors(value: Any, depth: int = 2) -> list[torch.Tensor]:
    """Tensors in a module's inputs or outputs: a tensor, or inside tuples, lists, dicts."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0:
        return []
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list, type({}.values()))):
        return []
    found: list[torch.Tensor] = []
    for item in value:
        found.extend(_tensors(item, depth - 1))
    return found


def _grad_nodes(output: Any) -> list[Any]:
    nodes: list[Any] = []
    for tensor in _tensors(output):
        node = tensor.grad_fn
        if node is not None and all(node is not seen for seen in nodes):
            nodes.append(node)
    return nodes


def _floor(inputs: Any) -> int:
    """The largest sequence number of the inputs' autograd nodes (-1 when none)."""
    floor = -1
    for tensor in _tensors(inputs):
        node = tensor.grad_fn
        if node is not None:
            floor = max(floor, node._sequence_nr())
    return floor


def _inner(node: Any, floor: int) -> bool:
    return type(node).__name__ != "AccumulateGrad" and node._sequence_nr() > floor


def _terminal_nodes(outputs: list[Any], floor: int) -> list[Any] | None:
    """The nodes of a module's subgraph with no successor inside it (None: subgraph too big)."""
    todo = [node for node in outputs if _inner(node, floor)]
    seen = {id(node) for node in todo}
    terminals = []
    while todo:
        node = todo.pop()
        leads_inside = False
        for successor, _ in node.next_functions:
            if successor is None or not _inner(successor, floor):
                continue
            leads_inside = True
            if id(successor) not in seen:
                seen.add(id(successor))
                todo.append(successor)
        if not leads_inside:
            terminals.append(node)
        if len(seen) > MAX_SUBGRAPH_NODES:
            return None
    return terminals
