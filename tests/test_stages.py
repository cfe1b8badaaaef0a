"""Imports follow the pipeline: annotate < launch < ingest < report < render < pipeline/cli/batch.

docs/design.md "The pipeline": a stage imports only the stages to its left, plus the shared leaf
modules (``errors``, ``rules``, ``progress``, ``safe_text``, ``user_dirs``, ``narrow``,
``numeric``, ``durations``, ``staging``, ``forked``), which
import no stage themselves. ``report`` imports only the ``Profile`` type from ``ingest``;
``render`` imports only the report's model, never an analysis. No module of a stage takes
part in an import circle.
Every import statement counts, inside functions and under ``TYPE_CHECKING`` too: each is read with
``ast``, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dlprof_lite"
STAGES = ("annotate", "launch", "ingest", "report", "render")
TOP = len(STAGES)  # pipeline, cli, batch, memory, the package itself: right of every stage
# Leaves: any module may import them.
SHARED = ("errors", "rules", "progress", "safe_text", "user_dirs", "narrow", "numeric",
          "durations", "staging", "forked")
# Leaves the other leaves may import (they import nothing of ours).
BOTTOM = ("errors", "safe_text", "numeric", "durations", "forked")
REPORT_MAY_IMPORT_FROM_INGEST = {"dlprof_lite.ingest.profile"}
# The report's model: what render may import of report (docs/design.md "The pipeline").
REPORT_MODEL = {"dlprof_lite.report",  # the package itself: its __init__ imports nothing
                *(f"dlprof_lite.report.{m}" for m in ("model", "summary_types", "metrics",
                                                       "units"))}  # fmt: skip
# The imports against the order on purpose: ``Report.save`` writes and ``Report.open`` reads
# through render (a lazy import inside each method), so that a notebook's
# ``report.save(folder)`` and ``Report.open(folder)`` work.
# ``Report.what_if`` reads the report's profile again through the top-level what-if (ingest,
# then report's replay), lazily too.
ON_PURPOSE = {("dlprof_lite.report.model", "dlprof_lite.render.output"),
              ("dlprof_lite.report.model", "dlprof_lite.render.reader"),
              ("dlprof_lite.report.model", "dlprof_lite.whatif")}  # fmt: skip

# Imports against the order that are still there, each with what it waits for. The list may
# only shrink: a test fails when an entry is no longer needed, so it cannot go stale.
KNOWN: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, name: str) -> set[str]:
    """Every ``dlprof_lite`` module named by an import statement anywhere in the file."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # ``from dlprof_lite.ingest import columns``: the submodule is the import
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in modules())  # fmt: skip
    return {m for m in found if m == "dlprof_lite" or m.startswith("dlprof_lite.")}


def part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def rank(module: str) -> int | None:
    """Stage position of a module; None for a shared leaf."""
    first = part(module)
    if first in SHARED:
        return None
    return STAGES.index(first) if first in STAGES else TOP


def violations(found: dict[str, Path] | None = None) -> set[tuple[str, str]]:
    """Imports against the order in ``found`` (module name -> file), the package by default."""
    bad: set[tuple[str, str]] = set()
    for name, path in (modules() if found is None else found).items():
        for target in imports(path, name):
            if target == "dlprof_lite" and rank(name) == TOP:
                continue  # the CLI reads the package's __version__
            if rank(name) is None:
                # A shared leaf imports only itself and the leaves below every other.
                ok = part(target) == part(name) or part(target) in BOTTOM
            elif rank(target) is None:
                ok = True
            else:
                ok = rank(target) <= rank(name)
                if part(name) == "report" and part(target) == "ingest":
                    ok = target in REPORT_MAY_IMPORT_FROM_INGEST
                if part(name) == "render" and part(target) == "report":
                    ok = target in REPORT_MODEL
            ok = ok or (name, target) in ON_PURPOSE
            if not ok:
                bad.add((name, target))
    return bad


def test_the_parser_sees_every_kind_of_import() -> None:
    layers = modules()["dlprof_lite.report.layers.table"]
    assert "dlprof_lite.rules.gemm" in imports(layers, "dlprof_lite.report.layers.table")
    load = modules()["dlprof_lite.ingest.load"]
    found = imports(load, "dlprof_lite.ingest.load")
    assert "dlprof_lite.launch.nsys" in found  # imported inside a function
    assert "dlprof_lite.progress" in found
    assert len(modules()) > 50


def test_no_import_against_the_stage_order() -> None:
    unexpected = violations() - set(KNOWN)
    assert not unexpected, "\n".join(f"{a} imports {b}" for a, b in sorted(unexpected))


def test_known_exceptions_are_still_needed() -> None:
    fixed = set(KNOWN) - violations()
    assert not fixed, f"{sorted(fixed)} fixed: remove from KNOWN"


def test_the_check_flags_planted_imports_against_the_order(tmp_path: Path) -> None:
    # The package has no exception left: modules planted in a scratch folder show that the
    # check still finds each kind of wrong import, and lets the right ones through.
    planted = {
        "dlprof_lite.report.tables": "from dlprof_lite.ingest.correlate import range_gpu_totals",
        "dlprof_lite.report.summary": "from dlprof_lite.ingest.profile import Profile",
        "dlprof_lite.ingest.load": "def f():\n    from dlprof_lite.report import tables",
        "dlprof_lite.launch.nsys": "import dlprof_lite.rules.names",
        "dlprof_lite.rules.apis": "from ..ingest import profile",
    }
    files = {}
    for name, text in planted.items():
        files[name] = tmp_path / f"{name.replace('.', '_')}.py"
        files[name].write_text(text + "\n", encoding="utf-8")
    assert violations(files) == {
        ("dlprof_lite.report.tables", "dlprof_lite.ingest.correlate"),
        ("dlprof_lite.ingest.load", "dlprof_lite.report"),
        ("dlprof_lite.ingest.load", "dlprof_lite.report.tables"),
        ("dlprof_lite.rules.apis", "dlprof_lite.ingest"),
        ("dlprof_lite.rules.apis", "dlprof_lite.ingest.profile"),
    }


def test_report_imports_only_the_profile_type_from_ingest() -> None:
    names: set[str] = set()
    for name, path in modules().items():
        if part(name) != "report":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if module.startswith("dlprof_lite.ingest") and (name, module) not in KNOWN:
                names.update(alias.name for alias in node.names)
    assert names == {"Profile"}, names


def test_shared_leaves_import_no_stage() -> None:
    for name, path in modules().items():
        if rank(name) is None:
            stages = {part(t) for t in imports(path, name)} - {part(name), *BOTTOM}
            assert not stages, (name, stages)


def test_render_imports_only_the_model_of_report() -> None:
    found = {(n, t) for n, path in modules().items() if part(n) == "render"
             for t in imports(path, n) if part(t) == "report"}  # fmt: skip
    assert found and {t for _, t in found} <= REPORT_MODEL, sorted(found)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. An import of a module's own package is
    left out (``from dlprof_lite.annotate import facts`` runs the package's ``__init__``
    first in any case), and so is the one import against the order on purpose."""
    found = modules()
    return {n: {t for t in imports(p, n) if t in found and t != n and not n.startswith(t + ".")
                and (n, t) not in ON_PURPOSE}
            for n, p in found.items()}  # fmt: skip


def test_no_import_circle_in_a_stage() -> None:
    """Every import counts (inside functions and under TYPE_CHECKING too): a module of a
    stage never reaches itself through other modules."""
    circles = [c for c in _circles(import_graph()) if any(part(m) in STAGES for m in c)]
    assert not circles, circles


def test_the_circle_check_finds_a_planted_circle() -> None:
    graph = import_graph()
    graph["dlprof_lite.report.units"] = {*graph["dlprof_lite.report.units"],
                                         "dlprof_lite.report.advice"}  # fmt: skip
    assert any({"dlprof_lite.report.units", "dlprof_lite.report.advice"} <= set(c)
               for c in _circles(graph))  # fmt: skip
