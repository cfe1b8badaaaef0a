"""Backward ranges of forwards run inside a backward pass (recomputation; rules in :mod:`.modules`).

One :class:`BackwardCall` per such module call whose backward gets a range: opened by the first
pre-hook of its output nodes, closed when the post-hooks of all its terminal nodes have run.
One :class:`NodeHooks` per hooked node and direction, shared by every module call that
starts (or ends) at that node: a registration costs ~1 us in torch's Python code, so a
node shared by a parent and its child is hooked once.
"""

from __future__ import annotations

from typing import Any, Protocol


class ModuleRanges(Protocol):
    """What the node hooks use of their owner (:class:`~.modules.ModuleRanges`): its
    thread's stack of open ranges, popped to an entry, and the start of a backward."""

    _frame: Any

    def _pop_to(self, frame: Any, key: object) -> Any: ...

    def _backward_started(self, call: BackwardCall) -> None: ...


class BackwardCall:
    """The backward of one module call: opened by its output nodes, closed by its terminals."""

    __slots__ = ("name", "owner", "remaining", "started", "terminals", "top_level")

    def __init__(self, owner: ModuleRanges, name: str | None, top_level: bool) -> None:
        self.owner = owner
        self.name = name
        self.top_level = top_level
        self.terminals = 0
        self.remaining = 0
        self.started = False

    def finish_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            if self.started and self.name is not None:
                self.owner._pop_to(self.owner._frame, self)
            # Ready for another backward through the same graph (retain_graph=True).
            self.remaining = self.terminals
            self.started = False


class NodeHooks:
    """The one pre-hook (or post-hook) this layer puts on an autograd node (holds no node)."""

    __slots__ = ("calls",)

    def __init__(self, node: Any, pre: bool) -> None:
        self.calls: list[BackwardCall] = []
        if pre:
            node.register_prehook(self._pre)
        else:
            node.register_hook(self._post)

    def _pre(self, grad_outputs: Any) -> None:
        for call in self.calls:
            if not call.started:  # once per module call
                # A call with no range (a root's phase events only) has no terminals to
                # reset it: it stays ready for each backward pass through its graph.
                call.started = call.name is not None
                call.owner._backward_started(call)

    def _post(self, grad_inputs: Any, grad_outputs: Any) -> None:
        for call in self.calls:
            call.finish_one()
