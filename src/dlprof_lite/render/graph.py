"""The module tree as Graphviz text (``layers.dot``): each layer with its time per step.

Place in the pipeline: report (a renderer of the layers table, like the CSV and JSON
writers; :mod:`dlprof_lite.render.output` writes it into the report folder). The network can
then be drawn as Neural Network Console's graph view does: ``dot -Tsvg layers.dot``.

The tree comes from the layer names' nesting, ``model`` -> ``layer1`` -> ``layer1.0`` ->
``layer1.0.conv1``: a dotted name's parent is its longest dotted prefix; a container that
never ran a forward of its own (a ``ModuleList``) is drawn dashed, without time, so that the
tree keeps its shape. Names without a dot are the root models and the children of ``model``
(whose submodules keep their plain names, docs/annotation.md "Models"): a layer is a root when its
forward ran outside every other module's (the ranges table: a ``fwd:`` range with no module
range around it), else it hangs under ``model``. Children are listed in network order (the
layers table's ``order`` where it has one, else its row order).

Each node shows forward + backward host time per step (the layers table's per-step means
where it has them, else its totals over the steps they cover) and, when the profile has
kernels, the GPU time of the layer's kernels per step.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from dlprof_lite.durations import significant
from dlprof_lite.report.summary_types import number
from dlprof_lite.rules.names import FORWARD, MODULE_RANGE_RE, ROOT_MODULE

if TYPE_CHECKING:
    from dlprof_lite.report.model import Report

# Fill colours by the node's share of the largest root's time (ColorBrewer "Oranges").
HEAT = ("#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c")


@dataclass(frozen=True)
class Node:
    """One layer (``measured`` False: a container implied by its children's names)."""

    name: str
    parent: str | None
    type: str
    measured: bool
    forward_ns: float
    backward_ns: float
    gpu_ns: float | None


def top_level_callers(ranges: pd.DataFrame) -> set[str]:
    """Layers whose forward ran outside every other module's forward or backward."""
    if ranges.empty or "parent_path_id" not in ranges:
        return set()
    names = dict(zip(ranges["path_id"].tolist(), ranges["name"].astype(str), strict=True))
    out = set()
    for name, parent in zip(ranges["name"].astype(str), ranges["parent_path_id"], strict=True):
        m = MODULE_RANGE_RE.match(name)
        if m is None or m["dir"] != FORWARD:
            continue
        above = names.get(int(parent)) if pd.notna(parent) else None
        if above is None or MODULE_RANGE_RE.match(above) is None:
            out.add(m["layer"])
    return out


def _number(value: object) -> float:
    """A table cell as a float; 0 for an empty cell (no time measured)."""
    return number(value) or 0.0


def _per_step(row: Mapping[Hashable, object], total: str, steps: int | None) -> float:
    """The layers table's per-step mean (``step_forward_wall_ns`` for ``forward_wall_ns``)
    where it has one, else the total over ``steps`` (None: the total itself)."""
    mean = number(row.get("step_" + total))
    if mean is not None:
        return mean
    return _number(row.get(total)) / steps if steps else _number(row.get(total))


def module_tree(layers: pd.DataFrame, ranges: pd.DataFrame, steps: int | None) -> list[Node]:
    """Every layer and implied container with its parent and per-step times (per run
    without ``steps``), in network order (a parent before its children)."""
    rows = layers
    if "order" in layers and layers["order"].notna().any():
        rows = layers.sort_values("order", kind="stable", na_position="last")
    gpu_total = pd.to_numeric(layers.get("gpu_ns", pd.Series(dtype="float64")), errors="coerce")
    has_gpu = bool(gpu_total.fillna(0).sum() > 0)
    nodes: dict[str, Node] = {}
    for row in rows.to_dict("records"):
        name = str(row["layer"])
        gpu = _per_step(row, "forward_gpu_ns", steps) + _per_step(row, "backward_gpu_ns", steps)
        nodes[name] = Node(
            name=name, parent=None, type=_text(row.get("type")), measured=True,
            forward_ns=_per_step(row, "forward_wall_ns", steps),
            backward_ns=_per_step(row, "backward_wall_ns", steps),
            gpu_ns=gpu if has_gpu else None,
        )  # fmt: skip
    roots = top_level_callers(ranges)
    for name in list(nodes):
        _link(nodes, name, roots)
    return _network_order(nodes)


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _link(nodes: dict[str, Node], name: str, roots: set[str]) -> None:
    """Set ``name``'s parent, adding the implied containers above it."""
    node = nodes[name]
    if "." in name:
        parent = name.rsplit(".", 1)[0]
        if parent not in nodes:
            nodes[parent] = Node(parent, None, "", False, 0.0, 0.0, None)
            _link(nodes, parent, roots)
    elif name == ROOT_MODULE or name in roots or ROOT_MODULE not in nodes:
        return
    else:
        parent = ROOT_MODULE
    nodes[name] = Node(name, parent, node.type, node.measured, node.forward_ns,
                       node.backward_ns, node.gpu_ns)  # fmt: skip


def _network_order(nodes: Mapping[str, Node]) -> list[Node]:
    """Depth-first from the roots; siblings in the order of their first listed layer (an
    implied container takes its first child's place)."""
    rank = {name: i for i, name in enumerate(nodes)}
    for name in nodes:
        parent = nodes[name].parent
        while parent is not None and rank[parent] > rank[name]:
            rank[parent] = rank[name]
            parent = nodes[parent].parent
    children: dict[str | None, list[str]] = {}
    for node in sorted(nodes.values(), key=lambda n: rank[n.name]):
        children.setdefault(node.parent, []).append(node.name)
    out: list[Node] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        name = stack.pop()
        out.append(nodes[name])
        stack.extend(reversed(children.get(name, [])))
    return out


def quote(text: str) -> str:
    """A Graphviz double-quoted string (backslashes and quotes escaped, no raw newlines)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", " ").replace("\n", "\\n") + '"'


def _label(node: Node, per: str) -> str:
    short = node.name.rsplit(".", 1)[-1]
    lines = [short if node.type in ("", short) else f"{short}: {node.type}"]
    if node.measured:
        total = node.forward_ns + node.backward_ns
        lines.append(f"fwd+bwd {significant(total)}{per}")
        lines.append(f"(fwd {significant(node.forward_ns)}, bwd {significant(node.backward_ns)})")
        if node.gpu_ns is not None:
            lines.append(f"GPU {significant(node.gpu_ns)}{per}")
    return "\n".join(lines)


def _heat(node: Node, top: float) -> str:
    share = (node.forward_ns + node.backward_ns) / top if top > 0 else 0.0
    return HEAT[min(len(HEAT) - 1, int(share * len(HEAT)))]


def to_dot(nodes: Iterable[Node], title: str, per: str = "/step") -> str:
    """The Graphviz ``digraph`` of ``nodes`` (parents before children); ``per`` follows
    each time ("/step", or "" for whole-run totals)."""
    nodes = list(nodes)
    top = max((n.forward_ns + n.backward_ns for n in nodes if n.parent is None), default=0.0)
    out = [
        "// dlprof-lite layers.dot: the module tree, forward + backward time per step",
        "// draw it with: dot -Tsvg layers.dot -o layers.svg",
        "digraph layers {",
        # Left to right like a file tree; ordering=out keeps children in network order.
        f"  graph [rankdir=LR, ordering=out, labelloc=t, label={quote(title)}];",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontsize=10];',
    ]
    for node in nodes:
        attrs = [f"label={quote(_label(node, per))}", f"tooltip={quote(node.name)}"]
        if node.measured:
            attrs.append(f"fillcolor={quote(_heat(node, top))}")
        else:
            attrs.append('style="rounded,dashed"')
        out.append(f"  {quote(node.name)} [{', '.join(attrs)}];")
    out += [f"  {quote(n.parent)} -> {quote(n.name)};" for n in nodes if n.parent is not None]
    out.append("}")
    return "\n".join(out) + "\n"


def layers_dot(layers: pd.DataFrame, ranges: pd.DataFrame, steps: int | None, title: str) -> str:
    """``layers.dot`` for a layers table whose figures cover ``steps`` steps (None or 0:
    no steps, whole-run totals shown as they are)."""
    per_step = bool(steps and steps > 0)
    nodes = module_tree(layers, ranges, steps if per_step else None)
    return to_dot(nodes, title, "/step" if per_step else "")


def report_graph(report: Report) -> str:
    """``layers.dot`` of a report: per step over the steps its tables cover (the window's
    ``window_steps`` where the summary states a window, else every iteration)."""
    summary = report.summary
    window = number(summary.window.window_steps)
    counted = summary.iterations.iterations_count if window is None else int(window)
    where = summary.system.source or "the profile"
    if counted:
        title = f"{where}: forward + backward time per step ({counted} steps)"
    else:
        title = f"{where}: forward + backward time in the whole run (no steps found)"
    return layers_dot(report.layers, report.ranges, counted, title)
