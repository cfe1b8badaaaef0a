"""Backward module ranges, bound to the autograd graph once per forward (rules in :mod:`.modules`).

While a root forward runs, nothing is hooked: each module call whose backward gets a range
records a :class:`Call`, its range name, its enclosing call, and the interval ``[start, end)``
of autograd sequence numbers its thread handed out during the call, so every node the call
created (its children's included) and no other. A root forward's calls make a
:class:`Forward`.

The forward is *bound* when the backward pass that consumes it is about to run
(``torch.autograd.backward`` entered, else the pre-hook of a root output node), or when the
next root forward starts on a thread (a graph that may be used later): :func:`bind` walks
the forward's graph once from the calls' outputs, visiting the nodes it created; a node
gets its owner (the innermost call whose interval holds the node's sequence number) in a
pre-hook where the owner changes, and the last one to run (the smallest sequence number) a
post-hook.

In backward, a node's pre-hook makes the thread's open backward ranges its owner's chain,
outermost first: ranges of calls outside the chain are popped, missing ones pushed. The
engine runs a graph's nodes on a thread in descending sequence number (:func:`_hook_owners`),
so only a node whose owner differs from the node before it in that order needs the hook: a
node's work runs inside exactly the ranges of the calls that created it (branches,
residuals, two models in one pass). When the last nodes have run, the forward's ranges
still open on that thread are popped.

Cost: one pre-hook per owner change (~0.8 us to register, in torch's Python code),
registered in the backward pass, and a visit of each node; the forward pays a
sequence-number read and a small object per call. Nothing
here refers to a node once bound, so a step leaves no reference cycle.
"""

from __future__ import annotations

from typing import Any, Protocol


class ModuleRanges(Protocol):
    """What the backward hooks call on their owner (:class:`~.modules.ModuleRanges`)."""

    def sync(self, owner: Call) -> None: ...

    def root_backward(self, hook: RootHook) -> None: ...

    def end_forward(self, root: Call) -> None: ...


class Call:
    """One module call whose backward gets a range (holds no node, no hook)."""

    __slots__ = ("end", "level", "name", "parent", "root", "start")

    def __init__(self, name: str, parent: Call | None, start: int) -> None:
        self.name = name
        self.parent = parent
        # The root call of its forward (None for the root itself: no cycle to collect).
        self.root: Call | None = None if parent is None else parent.root or parent
        self.level: int = 0 if parent is None else parent.level + 1
        self.start = start
        self.end = start

    def ancestor(self, level: int) -> Call:
        call = self
        while call.level > level:
            call = call.parent  # type: ignore[assignment]
        return call


class Forward:
    """The calls of one root forward, and (until bound) the output nodes to walk from."""

    __slots__ = ("calls", "finals", "outputs", "remaining", "root", "root_hooks", "root_outputs")

    def __init__(self, root: Call) -> None:
        self.root = root
        self.calls = [root]  # in call order: an enclosing call before the calls it holds
        self.root_outputs: list[Any] = []  # nodes
        self.outputs: list[Any] = []  # the other calls' output nodes (side outputs too)
        self.root_hooks: dict[int, RootHook] = {}
        self.finals = 0
        self.remaining = 0


class SyncHook:
    """Pre-hook of a node: the thread's open backward ranges become its owner's chain."""

    __slots__ = ("owner", "ranges")

    def __init__(self, ranges: ModuleRanges, owner: Call) -> None:
        self.ranges = ranges
        self.owner = owner

    def __call__(self, grad_outputs: Any) -> None:
        self.ranges.sync(self.owner)


class RootHook:
    """Pre-hook of a root's output node, registered in forward: the start of its backward
    (phase events for a top-level root) and, once bound, the node's owner chain."""

    __slots__ = ("owner", "ranges", "top_level")

    def __init__(self, ranges: ModuleRanges, top_level: bool) -> None:
        self.ranges = ranges
        self.top_level = top_level
        self.owner: Call | None = None

    def __call__(self, grad_outputs: Any) -> None:
        self.ranges.root_backward(self)


class EndHook:
    """Post-hook of a forward's last node: when it has run, its ranges are popped."""

    __slots__ = ("forward", "ranges")

    def __init__(self, ranges: ModuleRanges, forward: Forward) -> None:
        self.ranges = ranges
        self.forward = forward

    def __call__(self, grad_inputs: Any, grad_outputs: Any) -> None:
        forward = self.forward
        forward.remaining -= 1
        if forward.remaining == 0:
            forward.remaining = forward.finals  # ready for another pass (retain_graph=True)
            self.ranges.end_forward(forward.root)


def bind(ranges: ModuleRanges, forward: Forward) -> None:
    """Hook the nodes ``forward`` created: owners in pre-hooks where the owner changes, the
    final nodes' post-hooks."""
    walks = ((True, forward.root_outputs), (False, forward.outputs))
    forward.root_outputs, forward.outputs = [], []
    root_hooks, forward.root_hooks = forward.root_hooks, {}
    base, end = forward.root.start, forward.root.end
    if end <= base:
        return
    size = end - base
    owner: list[Call | None] = [None] * size
    for call in forward.calls:  # enclosing calls first: the innermost call paints last
        if call.end > call.start:
            owner[call.start - base : call.end - base] = [call] * (call.end - call.start)
    # The node reached at each sequence number (one thread hands each number out once), and
    # whether it was reached from the root's outputs.
    nodes: list[Any] = [None] * size
    main = bytearray(size)
    # The root's outputs first: the last node is found on that walk only (a side output the
    # loss does not use never runs, and would hold the ranges open).
    for counted, firsts in walks:
        todo: list[Any] = []
        pop, push = todo.pop, todo.append  # the loop below runs once per node: kept lean
        for first in firsts:
            at = first._sequence_nr() - base
            if 0 <= at < size and nodes[at] is None:
                nodes[at] = first
                main[at] = counted
                push(first)
        while todo:
            for successor, _ in pop().next_functions:
                if successor is not None:
                    at = successor._sequence_nr() - base
                    # AccumulateGrad (a parameter) has the largest number: never inside.
                    if 0 <= at < size and nodes[at] is None:
                        nodes[at] = successor
                        main[at] = counted
                        push(successor)
    # Nodes run in descending sequence number (_hook_owners): the smallest reached from the
    # root's outputs runs last, and its post-hook ends the forward's ranges.
    last = main.find(1)
    forward.finals = forward.remaining = 1 if last >= 0 else 0
    if last >= 0:
        nodes[last].register_hook(EndHook(ranges, forward))
    # Several devices (several engine threads) among the root's outputs, the last node and a
    # few of its annotated calls' outputs (a node's device costs ~1 µs: not every node's).
    firsts, others = walks[0][1], walks[1][1]
    ends = [*firsts, *others[:: max(1, len(others) // _SAMPLED)]]
    ends += [nodes[last]] if last >= 0 else []
    _hook_owners(ranges, nodes, main, owner, root_hooks, every=len(_devices(ends)) > 1)


def _hook_owners(
    ranges: ModuleRanges,
    nodes: list[Any],
    main: bytearray,
    owner: list[Call | None],
    root_hooks: dict[int, RootHook],
    every: bool = False,
) -> None:
    """A pre-hook on each node whose owner differs from the node run before it (``nodes``,
    ``main`` and ``owner`` by sequence number less the forward's first); ``every``: on each
    node (a graph on several devices).

    On a thread, autograd's engine runs the ready node with the largest sequence number
    first, and a node is ready once the nodes that use its output (all made after it: larger
    numbers) have run; so it runs a graph's nodes in descending sequence number, and the
    ranges a node's pre-hook opened hold every node after it on that thread until the owner
    changes. Each device has its own engine thread (the CPU's is the caller's), so a graph
    on several devices is hooked at every node. A model whose modules are folded (.folding)
    is mostly one owner: its root's. Nodes reached only from side outputs may not run: they,
    and the node after each, are always hooked.
    """
    hooks: dict[int, SyncHook] = {}
    before: Call | None = None
    side = True  # the first node: nothing known ran before it
    for at in range(len(nodes) - 1, -1, -1):
        node = nodes[at]
        if node is None:
            continue
        call, counted = owner[at], main[at]
        root_hook = root_hooks.get(id(node))
        if root_hook is not None:
            root_hook.owner = call
        elif call is not None and (every or side or call is not before or not counted):
            hook = hooks.get(id(call))
            if hook is None:
                hook = hooks[id(call)] = SyncHook(ranges, call)
            node.register_prehook(hook)
        before, side = call, not counted


_SAMPLED = 8  # annotated calls' outputs whose device is read


def _devices(nodes: list[Any]) -> set[Any]:
    """The devices whose engine threads run ``nodes``."""
    return {_device(node) for node in nodes}


def _device(node: Any) -> Any:
    """The device whose engine thread runs ``node``: its inputs' first one that is not the
    CPU, else the CPU (None where the node says nothing)."""
    metadata = getattr(node, "_input_metadata", None)
    if not metadata:
        return None
    for item in metadata:
        device = item.device
        if device.type != "cpu":
            return device
    return metadata[0].device
