"""``layers.dot`` (render/graph.py): the module tree with each layer's time per step.

The profile is hand-built with round numbers (two steps of a model with a named container, an
implied ``ModuleList``, a loss module and a second model), so every node, edge and per-step
figure is known. The text is read back with Graphviz's ``dot`` where it is installed, and
always with the small parser below, written from the DOT language grammar
(https://graphviz.org/doc/info/lang.html) for the subset a ``digraph`` of nodes, edges and
attribute lists uses: a syntax error anywhere fails the test.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from builders import R, make_profile, phase
from dlprof_lite.render.graph import layers_dot, quote, report_graph
from dlprof_lite.render.output import GRAPH_FILE
from dlprof_lite.report.build import build_report
from dlprof_lite.report.model import Report

# --- a DOT reader for the subset we write ----------------------------------------------

_TOKEN = re.compile(
    r"""\s+|//[^\n]*|/\*.*?\*/|^\#[^\n]*
    |(?P<string>"(?:[^"\\]|\\.)*")
    |(?P<id>[A-Za-z_\x80-\uffff][A-Za-z0-9_\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))
    |(?P<punct>->|--|[{}\[\];,=])""",
    re.VERBOSE | re.DOTALL | re.MULTILINE,
)
_KEYWORDS = {"graph", "node", "edge", "digraph", "subgraph", "strict"}


@dataclass
class Dot:
    name: str | None = None
    defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)


def tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            raise SyntaxError(f"unexpected {text[at : at + 20]!r} at {at}")
        at = m.end()
        if m["string"] is not None:
            assert "\n" not in m["string"], "a raw newline inside a quoted string"
            out.append(("id", bytes(m["string"][1:-1], "utf-8").decode("unicode_escape")
                        .encode("latin-1").decode("utf-8")))  # fmt: skip
        elif m["id"] is not None:
            kind = "kw" if m["id"].lower() in _KEYWORDS else "id"
            out.append((kind, m["id"].lower() if kind == "kw" else m["id"]))
        elif m["punct"] is not None:
            out.append(("p", m["punct"]))
    return out


def parse_dot(text: str) -> Dot:
    """``graph : [strict] digraph [ID] '{' stmt_list '}'`` with node, edge, attribute and
    ``ID = ID`` statements; raises SyntaxError on anything else."""
    toks = tokens(text)
    pos = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        return toks[pos + offset] if pos + offset < len(toks) else ("eof", "")

    def take(kind: str, value: str | None = None) -> str:
        nonlocal pos
        k, v = peek()
        if k != kind or (value is not None and v != value):
            raise SyntaxError(f"expected {value or kind}, got {v or k} (token {pos})")
        pos += 1
        return v

    def attr_list() -> dict[str, str]:
        attrs: dict[str, str] = {}
        while peek() == ("p", "["):
            take("p", "[")
            while peek() != ("p", "]"):
                key = take("id")
                take("p", "=")
                attrs[key] = take("id")
                if peek() in (("p", ","), ("p", ";")):
                    take("p")
            take("p", "]")
        return attrs

    dot = Dot()
    if peek() == ("kw", "strict"):
        take("kw")
    take("kw", "digraph")
    if peek()[0] == "id":
        dot.name = take("id")
    take("p", "{")
    while peek() != ("p", "}"):
        if peek()[0] == "kw" and peek()[1] in ("graph", "node", "edge"):
            kind = take("kw")
            dot.defaults[kind] = attr_list()
        elif peek(1) == ("p", "="):
            take("id")
            take("p", "=")
            take("id")
        else:
            chain = [take("id")]
            while peek() == ("p", "->"):
                take("p", "->")
                chain.append(take("id"))
            attrs = attr_list()
            for name in chain:
                dot.nodes.setdefault(name, {}).update(attrs if len(chain) == 1 else {})
            dot.edges += list(itertools.pairwise(chain))
        if peek() == ("p", ";"):
            take("p", ";")
    take("p", "}")
    take("eof")
    return dot


def check_with_graphviz(text: str, tmp_path: Path) -> None:
    dot = shutil.which("dot")
    if dot is None:
        return  # the parser above is the check (no Graphviz dependency)
    path = tmp_path / "layers.dot"
    path.write_text(text, encoding="utf-8")
    done = subprocess.run([dot, "-Tcanon", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_the_reader_refuses_broken_dot() -> None:
    for broken in ('digraph { "a" -> ; }', 'digraph { "a" [label="x" }', 'graph { "a\n" }',
                   'digraph { "a" } extra'):  # fmt: skip
        with pytest.raises((SyntaxError, AssertionError)):
            parse_dot(broken)


# --- the hand-built profile ------------------------------------------------------------


def _step(b: int) -> list[R]:
    """One step from ``b``: ``model`` (forward 2000) holds ``features`` (1000: ``features.0``
    400, ``features.1`` 200) and ``blocks.0`` (500; its ``ModuleList`` never runs); then the
    loss (200) and a second model ``student`` (300, holding ``student.fc1`` 100). Backward:
    ``model`` 3000 holding ``features.0`` 1000."""
    return [
        phase("iteration", b, b + 10_000),
        R("fwd:model:Net", b + 100, b + 2_100, [
            R("fwd:features:Sequential", b + 200, b + 1_200, [
                R("fwd:features.0:Conv2d", b + 300, b + 700),
                R("fwd:features.1:ReLU", b + 700, b + 900),
            ]),
            R("fwd:blocks.0:Linear", b + 1_300, b + 1_800),
        ]),
        R("fwd:CrossEntropyLoss:CrossEntropyLoss", b + 2_200, b + 2_400),
        R("fwd:student:Net", b + 2_500, b + 2_800, [R("fwd:student.fc1:Linear", b + 2_600,
                                                       b + 2_700)]),
        R("bwd:model:Net", b + 3_000, b + 6_000, [R("bwd:features.0:Conv2d", b + 4_000,
                                                     b + 5_000)]),
    ]  # fmt: skip


def two_steps_report() -> Report:
    profile = make_profile(
        ranges=[*_step(0), *_step(10_000)],
        iterations=[(0, 10_000, False, True), (10_000, 20_000, False, True)],
        session=(0, 20_000),
    )
    return build_report(profile)


def _label(dot: Dot, node: str) -> str:
    return dot.nodes[node]["label"]


def test_tree_and_per_step_times(tmp_path: Path) -> None:
    text = report_graph(two_steps_report())
    check_with_graphviz(text, tmp_path)
    dot = parse_dot(text)
    assert set(dot.edges) == {
        ("model", "features"), ("features", "features.0"), ("features", "features.1"),
        ("model", "blocks"), ("blocks", "blocks.0"), ("student", "student.fc1"),
    }  # fmt: skip
    roots = set(dot.nodes) - {child for _, child in dot.edges}
    assert roots == {"model", "CrossEntropyLoss", "student"}
    # totals over the two steps, shown per step
    assert _label(dot, "model") == "model: Net\nfwd+bwd 5 µs/step\n(fwd 2 µs, bwd 3 µs)"
    assert "fwd+bwd 1.4 µs/step\n(fwd 400 ns, bwd 1 µs)" in _label(dot, "features.0")
    assert "(fwd 200 ns, bwd 0 ns)" in _label(dot, "features.1")
    assert _label(dot, "CrossEntropyLoss").startswith("CrossEntropyLoss\nfwd+bwd 200 ns/step")
    assert _label(dot, "student.fc1").startswith("fc1: Linear\nfwd+bwd 100 ns/step")
    # the ModuleList never ran: drawn, dashed, without a time
    assert _label(dot, "blocks") == "blocks" and "dashed" in dot.nodes["blocks"]["style"]
    assert "GPU" not in text  # a profile without kernels shows no GPU line
    assert "per step (2 steps)" in dot.defaults["graph"]["label"]


def test_network_order_lists_children_as_they_ran() -> None:
    report = two_steps_report()
    layers = report.layers.copy()
    # the layers table's `order` column (network order) decides, whatever its row order
    ran = ["model", "features", "features.0", "features.1", "blocks.0", "CrossEntropyLoss",
           "student", "student.fc1"]  # fmt: skip
    layers["order"] = layers["layer"].map({name: i for i, name in enumerate(ran)})
    text = layers_dot(layers.iloc[::-1], report.ranges, 2, "t")
    dot = parse_dot(text)
    assert list(dot.nodes) == ["model", "features", "features.0", "features.1", "blocks",
                               "blocks.0", "CrossEntropyLoss", "student",
                               "student.fc1"]  # fmt: skip


def totals_only(layers: pd.DataFrame) -> pd.DataFrame:
    """The table without per-step columns: its totals over the steps are the figures."""
    return layers.drop(columns=[c for c in layers if c.startswith("step_")])


def test_gpu_time_is_shown_when_the_profile_has_kernels() -> None:
    report = two_steps_report()
    layers = totals_only(report.layers)
    layers["forward_gpu_ns"] = layers["layer"].map({"features.0": 600}).fillna(0)
    layers["backward_gpu_ns"] = layers["layer"].map({"features.0": 1_000}).fillna(0)
    layers["gpu_ns"] = layers["forward_gpu_ns"] + layers["backward_gpu_ns"]
    dot = parse_dot(layers_dot(layers, report.ranges, 2, "t"))
    assert _label(dot, "features.0").endswith("\nGPU 800 ns/step")
    assert _label(dot, "model").endswith("\nGPU 0 ns/step")


def test_per_step_columns_are_preferred_to_totals() -> None:
    """The layers table's per-step means (``step_forward_wall_ns``, ...) where it has them:
    totals may hold events outside the steps (``--all-iterations``)."""
    report = two_steps_report()
    layers = totals_only(report.layers)
    layers["step_forward_wall_ns"] = layers["layer"].map({"features.1": 150.0})
    layers["step_backward_wall_ns"] = layers["layer"].map({"features.1": 50.0})
    dot = parse_dot(layers_dot(layers, report.ranges, 2, "t"))
    assert "fwd+bwd 200 ns/step\n(fwd 150 ns, bwd 50 ns)" in _label(dot, "features.1")
    assert "(fwd 400 ns, bwd 1 µs)" in _label(dot, "features.0")  # no mean: total / steps


def test_without_steps_the_graph_shows_whole_run_totals() -> None:
    report = two_steps_report()
    dot = parse_dot(layers_dot(totals_only(report.layers), report.ranges, None, "t"))
    assert _label(dot, "model") == "model: Net\nfwd+bwd 10 µs\n(fwd 4 µs, bwd 6 µs)"


def test_odd_names_stay_valid_dot(tmp_path: Path) -> None:
    report = two_steps_report()
    layers = report.layers.copy()
    odd = 'a "quoted" \\ name\nwith a newline'
    layers.loc[layers["layer"] == "CrossEntropyLoss", "layer"] = odd
    text = layers_dot(layers, report.ranges, 2, 'title "x"')
    check_with_graphviz(text, tmp_path)
    assert odd in parse_dot(text).nodes
    assert quote('a"b\\') == '"a\\"b\\\\"'


def test_no_layers_is_an_empty_valid_graph(tmp_path: Path) -> None:
    report = build_report(make_profile(ranges=[phase("iteration", 0, 10)], iterations=[
        (0, 10, False, True)]))  # fmt: skip
    text = report_graph(report)
    check_with_graphviz(text, tmp_path)
    dot = parse_dot(text)
    assert (dot.nodes, dot.edges) == ({}, [])


def test_saved_reports_hold_the_graph(tmp_path: Path) -> None:
    report = two_steps_report()
    folder = report.save(tmp_path / "run.dlprof", formats=("json",))
    assert parse_dot((folder / GRAPH_FILE).read_text(encoding="utf-8")).nodes.keys() >= {
        "model",
        "features.0",
    }
