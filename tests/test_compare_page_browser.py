"""compare.html in a real headless Chromium, from ``file://``, with the network cut off.

Two LeNet runs profiled for real under nsys, the second with a 5 ms sleep in conv2's forward
(``examples/lenet.py --slow-layer conv2``); the page of their comparison must show the
verdict, one box plot per side, the layer deltas with conv2's forward as the largest change
by about the sleep (the oracle: ``time.sleep`` never returns early), and the phases; no
console error, no request, a screenshot that is not blank.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from browser import (  # noqa: F401
    Chromium,
    chromium_fixture,
    profile_lenet,
    section_problems,
)
from dlprof_lite.compare.comparison import Comparison, compare_sides
from dlprof_lite.compare.page import compare_page
from dlprof_lite.compare.resolve import resolve
from dlprof_lite.compare.side import Side
from dlprof_lite.store.database import RunStore

pytest.importorskip("torch")
pytestmark = [pytest.mark.nsys, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[1] / "docs"
SLEEP_MS = 5.0
SCRIPT = ("--steps", "20", "--batch-size", "32")
COMPARE_SECTIONS = ("verdict", "steps", "layers", "phases")
COMPARE_CHARTS = {"steps": "chart-step-box", "layers": "chart-layer-delta",
                  "phases": "chart-phase-delta"}  # fmt: skip


def no_store() -> RunStore:
    raise AssertionError("the sides are report folders: the run store is never needed")


@pytest.fixture(scope="module")
def compared(
    nsys: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Comparison, list[Side], Path]:
    """The two runs, their comparison as ``compare`` builds it, and its compare.html (the
    command line's where it writes one, else built here with ``compare_page``)."""
    root = tmp_path_factory.mktemp("compare")
    base = profile_lenet(nsys, root / "base.dlprof", *SCRIPT)
    slow = profile_lenet(nsys, root / "slow.dlprof", *SCRIPT, "--slow-layer", "conv2",
                         "--slow-ms", str(SLEEP_MS))  # fmt: skip
    # Short labels, as a user naming the folders from their parent would see them.
    sides = [replace(resolve(str(base), no_store), label="baseline"),
             replace(resolve(str(slow), no_store), label="conv2 +5 ms")]  # fmt: skip
    comparison = compare_sides(sides)
    page = root / "compare.html"
    page.write_text(compare_page(comparison, sides), encoding="utf-8")
    return comparison, sides, page


# Per chart trace: its name, the full names its bars carry (customdata), its values and the
# unit's size in ns (layout.meta), and the boxes/bars Plotly drew for it.
READ_FIGURES = """() => Object.fromEntries([...document.querySelectorAll("div.chart")].map((gd) => [
  gd.id, {
    ns: (gd.layout.meta || {}).ns ?? null,
    traces: gd.data.map((t, i) => ({
      name: t.name ?? null, type: t.type,
      labels: (t.customdata || []).map((c) => c[0]),
      x: t.x ?? null,
      drawn: [...gd.querySelectorAll("g.trace")].filter((g) => g.__data__
          && g.__data__[0] && g.__data__[0].trace && g.__data__[0].trace.index === i)
        .flatMap((g) => [...g.querySelectorAll("path.box, .point path, path.point")])
        .filter((p) => (p.getAttribute("d") || "M0,0Z") !== "M0,0Z").length,
    })),
  }]))"""


def expected_sections(comparison: Comparison, sides: list[Side]) -> list[str]:
    """The comparison's sections from its own data: layers and phases when it has deltas."""
    has = {
        "verdict": True,
        "steps": any(len(s.step_ns()) for s in sides),
        "layers": any(d.section == "layer" for d in comparison.deltas),
        "phases": any(d.section == "phase" for d in comparison.deltas),
    }
    return [name for name in COMPARE_SECTIONS if has[name]]


def test_compare_page_in_chromium(
    chromium: Chromium, compared: tuple[Comparison, list[Side], Path]
) -> None:
    comparison, sides, page = compared
    result = chromium.open_page(page, then=lambda p: p.evaluate(READ_FIGURES))
    assert result.problems() == []
    want = expected_sections(comparison, sides)
    assert want == list(COMPARE_SECTIONS), want
    assert section_problems(result, want, COMPARE_CHARTS) == []
    figures: dict[str, Any] = result.extra  # type: ignore[assignment]

    # One box per side, in side order, each drawn.
    boxes = figures["chart-step-box"]["traces"]
    assert [t["name"] for t in boxes] == [s.label for s in sides]
    assert all(t["type"] == "box" and t["drawn"] >= 1 for t in boxes), boxes

    # The layer deltas: every trace drawn; the bars are the comparison's changes of self
    # wall time per step, in its rank order; conv2's forward grew by at least the sleep (on
    # a loaded machine a sleep overruns, so no upper bound here: test_compare_nsys has one).
    layer = figures["chart-layer-delta"]
    assert all(t["drawn"] >= 1 for t in layer["traces"]), layer["traces"]
    wall = next(t for t in layer["traces"] if t["name"] == "self wall")
    want = {f"{d.name} ({d.direction})": d for d in comparison.deltas
            if d.section == "layer" and d.metric == "self_wall_median_ns"}  # fmt: skip
    drawn = {label.split(" [")[0]: x * layer["ns"] for label, x in zip(wall["labels"], wall["x"],
                                                                      strict=True)}  # fmt: skip
    assert all(want[k].delta == pytest.approx(v, rel=1e-3, abs=1.0) for k, v in drawn.items())
    ranks = [want[k].rank for k in drawn]
    assert ranks == sorted(ranks) and len(ranks) >= 10, ranks
    assert drawn["conv2 (forward)"] >= SLEEP_MS * 1e6, drawn
    if os.environ.get("DLPROF_UPDATE_DOCS"):
        from test_html_browser import save_figure

        save_figure(result.screenshot, DOCS / "compare.png")
