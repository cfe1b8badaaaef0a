"""The documentation site builds, strictly, from what is in the repository.

``mkdocs build --strict`` fails on any warning: a broken link or anchor, a page missing from
the nav or a nav entry without its page, a docstring mkdocstrings cannot read. It runs offline
(no plugin fetches anything). A machine without mkdocs skips with a reason; under CI
(``CI=true``) a missing mkdocs fails (``conftest.missing``), so the site is always built there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, missing

DOCS = ROOT / "docs"


def _mkdocs() -> None:
    probe = subprocess.run([sys.executable, "-c", "import mkdocs, material, mkdocstrings"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode != 0:
        missing("mkdocs, its Material theme or mkdocstrings is not installed "
                "(pip install -e '.[docs]'; scripts/setup.sh does)")  # fmt: skip


def _build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    _mkdocs()
    site = tmp_path / "site"
    done = _build(site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    nav = [p.relative_to(DOCS).with_suffix(".html") for p in DOCS.rglob("*.md")]
    assert nav and all((site / page).is_file() for page in nav), nav
    # The notebook API page is made from the docstrings, Sphinx roles dropped.
    api = (site / "notebook.html").read_text(encoding="utf-8")
    assert "Analyse one nsys export" in api and "Read a report folder written by" in api
    assert ":class:" not in api and ":func:" not in api
    # The generated column reference is on its page.
    assert "iterations_median_ns" in (site / "reference" / "report.html").read_text("utf-8")


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """--strict is what makes a broken link an error: a copy of the site with one fails."""
    _mkdocs()
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    (copy / "src").symlink_to(ROOT / "src")
    page = copy / "docs" / "design.md"
    page.write_text(page.read_text("utf-8") + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    done = _build(tmp_path / "site", copy / "mkdocs.yml")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


def test_every_page_is_in_the_nav() -> None:
    """Each page under docs/ is reachable from the site's navigation (and each nav entry is
    a page), so nothing written is lost off the menu."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    listed = {line.rsplit(":", 1)[1].strip() for line in nav.splitlines() if line.endswith(".md")}
    assert pages == listed


def test_the_report_reference_is_the_registry_word_for_word() -> None:
    from dlprof_lite.report.metrics import markdown_reference

    text = (DOCS / "reference" / "report.md").read_text(encoding="utf-8")
    start, end = text.index("<!-- columns"), text.index("<!-- /columns -->")
    assert markdown_reference().strip() in text[start:end], (
        "docs/reference/report.md is stale: run python scripts/gen_reference.py"
    )


def test_the_compare_reference_is_the_registry_word_for_word() -> None:
    from dlprof_lite.compare.columns import markdown_reference

    text = (DOCS / "reference" / "compare.md").read_text(encoding="utf-8")
    start, end = text.index("<!-- compare-columns"), text.index("<!-- /compare-columns -->")
    assert markdown_reference().strip() in text[start:end], (
        "docs/reference/compare.md is stale: run python scripts/gen_reference.py"
    )


def test_gen_reference_check_finds_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``gen_reference.py --check`` (CI's drift check) passes on the repository and fails,
    naming the page, on a copy whose reference lost a column; a rewrite repairs it."""
    import dataclasses

    import gen_reference

    assert gen_reference.main(["--check"]) == 0
    page = tmp_path / "report.md"
    good = gen_reference.REPORT_PAGE.read_text(encoding="utf-8")
    page.write_text(good.replace("| `iterations_median_ns` |", "| `gone` |"), encoding="utf-8")
    sections = tuple(
        dataclasses.replace(s, page=page) if s.page == gen_reference.REPORT_PAGE else s
        for s in gen_reference.SECTIONS
    )
    monkeypatch.setattr(gen_reference, "SECTIONS", sections)
    assert gen_reference.main(["--check"]) == 1
    assert f"{page} is stale" in capsys.readouterr().err
    assert gen_reference.main([]) == 0 and page.read_text(encoding="utf-8") == good
