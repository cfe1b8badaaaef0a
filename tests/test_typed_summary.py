"""The summary is read by attribute inside dlprof-lite, never by a field's name as a string.

``Summary`` has no ``get``/``number`` (mypy strict rejects any such call); its
``summary["name"]`` is for notebooks, and ``Summary.metrics()`` (every field by its flat name)
is for the modules that turn fields into rows. This test reads every module with ``ast``: a
subscript of a summary by a field's name, or ``metrics()`` outside those modules, fails it.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from dlprof_lite.report import summary_types
from dlprof_lite.report.summary_types import GROUPS, LISTS, Summary

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dlprof_lite"
NAMES = {f.name for cls in GROUPS.values() for f in fields(cls)} | set(LISTS)
# Modules that turn every field into a row or a column, by name: serialisation proper
# (summary_types), compare's summary rows and environment checks, the run store's columns,
# and ``runs show``.
BY_NAME = {"report/summary_types.py", "compare/deltas.py", "compare/checks.py",
           "store/rows.py", "cli_store.py"}  # fmt: skip


def _summary_like(node: ast.expr) -> bool:
    """An expression that names a summary: ``summary``, ``s``, ``x.summary``."""
    if isinstance(node, ast.Name):
        return node.id in {"summary", "s", "found"}
    return isinstance(node, ast.Attribute) and node.attr == "summary"


def by_name_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Subscript) and _summary_like(node.value)
                and isinstance(node.slice, ast.Constant) and node.slice.value in NAMES):
            found.append(f"{path.name}:{node.lineno} [{node.slice.value!r}]")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"get", "number", "metrics"}
                and _summary_like(node.func.value)):
            found.append(f"{path.name}:{node.lineno} .{node.func.attr}()")
    return found  # fmt: skip


# Stages before report cannot hold a Summary (tests/test_stages.py): their dicts are not read.
BEFORE_REPORT = ("annotate", "launch", "ingest", "rules")


def test_no_module_reads_a_summary_field_by_name() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] not in BEFORE_REPORT and relative.as_posix() not in BY_NAME:
            bad += by_name_reads(path)
    assert not bad, bad


def test_the_check_finds_each_kind_of_read(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "a = summary['kernel_ns']\nb = report.summary.get('host')\nc = s.metrics()\n"
        "d = row['kernel_ns']\ne = summary.totals.kernel_ns\n",
        encoding="utf-8",
    )
    assert [r.split(" ", 1)[1] for r in by_name_reads(planted)] == [
        "['kernel_ns']", ".get()", ".metrics()"]


def test_summary_has_no_by_name_getters() -> None:
    assert not hasattr(Summary, "get") and not hasattr(Summary, "number")
    assert summary_types.Summary.__getitem__  # the notebook's summary["name"]


def test_the_by_name_modules_still_read_by_name() -> None:
    """The allowed list may only shrink: a module that no longer needs it leaves it."""
    for module in BY_NAME - {"report/summary_types.py"}:
        assert by_name_reads(PACKAGE / module), module


def test_every_field_carries_its_unit_and_definition_and_is_the_registry() -> None:
    """One declaration: the registry's summary columns are the fields' metadata, in order."""
    from dlprof_lite.report.metrics import SUMMARY_REPORT

    declared = [(f.name, f.metadata["unit"], f.metadata["doc"])
                for cls in GROUPS.values() for f in fields(cls)]  # fmt: skip
    assert all(unit in ("", "ns", "%", "FLOP", "FLOP/s", "B") and doc for _, unit, doc in declared)
    registry = [(c.name, c.unit, c.doc) for c in SUMMARY_REPORT]
    assert registry[: len(declared)] == declared
    assert [name for name, _, _ in registry[len(declared):]] == ["advice_count", "warnings"]


def test_a_misspelled_field_of_the_analysis_is_an_error_not_an_empty_field() -> None:
    """The analysis builds each group strictly: a name that is none of its fields fails at
    once (before, it became a silent None); a document read back may hold another release's."""
    import pytest

    from dlprof_lite.report.summary_types import Totals, build_summary

    with pytest.raises(ValueError, match="kernel_nss"):
        Totals.of({"kernel_nss": 5})
    with pytest.raises(ValueError, match="tc_share"):  # a field of another group
        Totals.of({"tc_share": 0.5})
    assert Totals.of({"kernel_ns": 5}).kernel_ns == 5
    assert build_summary({"a_field_of_tomorrow": 1}).totals.kernel_ns is None
