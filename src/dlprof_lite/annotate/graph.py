"""Autograd-graph helpers of the module hooks: a module's output nodes and its subgraph.

Hot path: called twice per module call. Single tensors take a path that builds no lists.
"""

from __future__ import annotations

from typing import Any

import torch

# Walking a module's autograd subgraph stops here; such a module gets no backward range.
MAX_SUBGRAPH_NODES = 20_000
_TENSOR = torch.Tensor
_ACCUMULATE = torch._C._functions.AccumulateGrad  # type: ignore[attr-defined]


def tensors(value: Any, depth: int = 2) -> Any:
    """Tensors in a module's inputs or outputs: a tensor, or inside tuples, lists, dicts."""
    if type(value) is _TENSOR or isinstance(value, torch.Tensor):
        return (value,)
    if depth == 0:
        return ()
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list, type({}.values()))):
        return ()
    found: list[torch.Tensor] = []
    for item in value:
        found.extend(tensors(item, depth - 1))
    return found


def grad_nodes(output: Any) -> list[Any]:
    if type(output) is _TENSOR:  # the common case, without building lists
        node = output.grad_fn
        return [node] if node is not None else []
    nodes: list[Any] = []
    for tensor in tensors(output):
        node = tensor.grad_fn
        if node is not None and all(node is not seen for seen in nodes):
            nodes.append(node)
    return nodes


def floor_of(inputs: Any) -> int:
    """The largest sequence number of the inputs' autograd nodes (-1 when none)."""
    if type(inputs) is tuple and len(inputs) == 1 and type(inputs[0]) is _TENSOR:
        node = inputs[0].grad_fn
        return -1 if node is None else node._sequence_nr()
    floor = -1
    for tensor in tensors(inputs):
        node = tensor.grad_fn
        if node is not None:
            floor = max(floor, node._sequence_nr())
    return floor


def inner(node: Any, floor: int) -> bool:
    # AccumulateGrad (a parameter or leaf) has the largest sequence number: never inside.
    return type(node) is not _ACCUMULATE and node._sequence_nr() > floor


def terminal_nodes(outputs: list[Any], floor: int) -> list[Any] | None:
    """The nodes of a module's subgraph with no successor inside it (None: subgraph too big).

    The root's call walks the whole graph every step, so the loop keeps to local names.
    """
    accumulate = _ACCUMULATE
    todo = [node for node in outputs if inner(node, floor)]
    seen = {id(node) for node in todo}
    terminals = []
    visit, mark = todo.append, seen.add
    while todo:
        node = todo.pop()
        leads_inside = False
        for successor, _ in node.next_functions:
            if (successor is None or type(successor) is accumulate
                    or successor._sequence_nr() <= floor):  # fmt: skip
                continue
            leads_inside = True
            key = id(successor)
            if key not in seen:
                mark(key)
                visit(successor)
        if not leads_inside:
            terminals.append(node)
        if len(seen) > MAX_SUBGRAPH_NODES:
            return None
    return terminals
