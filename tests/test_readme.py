"""The README's column reference is the metric registry's, word for word."""

from __future__ import annotations

from pathlib import Path

from dlprof_lite.report.metrics import markdown_reference

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_documents_every_report_column_as_the_registry_does() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- columns")
    end = text.index("<!-- /columns -->")
    assert markdown_reference().strip() in text[start:end], (
        "README report columns are stale: regenerate them from "
        "dlprof_lite.report.metrics.markdown_reference()"
    )


def test_readme_documents_every_compare_column_as_its_registry_does() -> None:
    from dlprof_lite.compare.columns import markdown_reference as compare_reference

    text = README.read_text(encoding="utf-8")
    start = text.index("<!-- compare-columns")
    end = text.index("<!-- /compare-columns -->")
    assert compare_reference().strip() in text[start:end], (
        "README compare columns are stale: run python scripts/gen_reference.py"
    )


def test_readme_names_the_two_setup_commands_that_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    assert "bash scripts/example.sh" in text and "bash scripts/test.sh" in text
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in ci
