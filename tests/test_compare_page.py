"""compare.html (compare/page.py) read back with html.parser: sections, charts, numbers.

Oracles: sides built with known step times and per-step layer and phase times
(tests/compare_builders.py), so the changes the page draws are worked out by hand; the box
plot must hold every side's own steps (``Side.step_ns``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from compare_builders import MS, normal_steps, run, side
from dlprof_lite.compare.comparison import compare_sides, verdict_line
from dlprof_lite.compare.page import BOX_POINTS, box_sample, compare_page
from dlprof_lite.compare.side import Side
from test_html_page import Page, assert_plotly_figure

N = 60
HOSTILE = "</script><img src=x onerror=alert(1)><!--"


def _layers(extra_ms: float, gpu_ms: float = 0.0) -> list[dict[str, object]]:
    """model holds model.fc; fc's self forward time per step is 1 + extra ms."""
    return [
        dict(layer="model", self_forward_wall_ns=1 * MS * N, calls_per_step=1.0),
        dict(layer="model.fc", parent="model", self_forward_wall_ns=(1 + extra_ms) * MS * N,
             self_forward_gpu_ns=gpu_ms * MS * N, calls_per_step=1.0),
    ]  # fmt: skip


def _sides(gpu_ms: tuple[float, float] = (0.0, 0.0), label: str = "B") -> list[Side]:
    a = side("A", run(normal_steps(100, 4, N, 1), layer_rows=_layers(0, gpu_ms[0]),
                      phases={"forward": (3 * MS, 3 * MS), "data": (0, 2 * MS)},
                      summary={"tc_share": 0.25}))  # fmt: skip
    b = side(label, run(normal_steps(106, 4, N, 2), layer_rows=_layers(2, gpu_ms[1]),
                        phases={"forward": (4 * MS, 8 * MS), "data": (0, 2 * MS)},
                        summary={"tc_share": 0.5}))  # fmt: skip
    return [a, b]


def read(text: str) -> Page:
    page = Page(text)
    assert not page.errors and not page.stack, (page.errors, page.stack)
    for link in page.links:
        assert not link.lower().startswith(("http:", "https:", "//")), link
    for sid in page.sections:
        assert sid in page.h2_in, sid
    for cid, attrs in page.charts.items():
        assert int(attrs["data-points"] or 0) > 0, cid
        assert_plotly_figure(json.loads(page.scripts[f"{cid}-figure"]))
    return page


def ns(fig: dict, values: list) -> list[float]:
    return [v * fig["layout"]["meta"]["ns"] for v in values]


@pytest.fixture(scope="module")
def sides() -> list[Side]:
    return _sides(gpu_ms=(2.0, 1.5))


@pytest.fixture(scope="module")
def page(sides: list[Side]) -> Page:
    return read(compare_page(compare_sides(sides, resamples=300), sides))


def test_compare_page_sections_and_verdict(sides: list[Side], page: Page) -> None:
    assert page.sections == ["verdict", "steps", "layers", "phases"]
    assert set(page.charts) == {"chart-step-box", "chart-layer-delta", "chart-phase-delta"}
    comparison = compare_sides(sides, resamples=300)
    text = compare_page(comparison, sides)
    assert verdict_line(comparison.steps[0]).replace("'", "&#x27;") in text
    assert comparison.steps[0].verdict == "not tested (one run a side)"
    assert "Tensor Core share: A 25.0% -&gt; B 50.0%" in text
    assert "launch overhead" not in text.split('id="plotly-gz"')[0]  # unknown on both sides
    stats = page.tables["step-stats"]
    assert [r[0] for r in stats[1:]] == ["A", "B"] and stats[1][2] == str(N)


def test_box_plot_holds_every_step(sides: list[Side], page: Page) -> None:
    fig = page.figure("step-box")
    assert [t["name"] for t in fig["data"]] == ["A", "B"]
    for trace, s in zip(fig["data"], sides, strict=True):
        assert trace["type"] == "box"
        assert ns(fig, trace["y"]) == pytest.approx(s.step_ns().tolist())


def test_layer_deltas_are_the_hand_worked_changes(page: Page) -> None:
    fig = page.figure("layer-delta")
    wall = next(t for t in fig["data"] if t["name"] == "self wall")
    gpu = next(t for t in fig["data"] if t["name"] == "self GPU")
    got = dict(zip((c[0] for c in wall["customdata"]), ns(fig, wall["x"]), strict=True))
    # model.fc forward: self 1 -> 3 ms per step; model: 1 -> 1 ms, unchanged, so no bar.
    assert list(got) == ["model.fc (forward)"]
    assert got["model.fc (forward)"] == pytest.approx(2 * MS)
    assert wall["customdata"][0][1] == "+200.0 %"
    assert ns(fig, gpu["x"])[0] == pytest.approx(-0.5 * MS)  # 2 -> 1.5 ms GPU


def test_phase_deltas_and_table(page: Page) -> None:
    fig = page.figure("phase-delta")
    got = {
        (t["name"], c[0]): v
        for t in fig["data"]
        for c, v in zip(t["customdata"], ns(fig, t["x"]), strict=True)
    }
    assert got[("GPU", "forward")] == pytest.approx(1 * MS)  # 3 -> 4 ms
    assert got[("host", "forward")] == pytest.approx(5 * MS)  # 3 -> 8 ms
    assert got[("host", "data")] == pytest.approx(0.0)
    rows = page.tables["phase-table"]
    forward = next(r for r in rows if r[0] == "forward")
    assert forward[1:4] == ["3.00 ms", "4.00 ms", "+1.00 ms"]


def test_cpu_sides_show_no_gpu_bars() -> None:
    sides = _sides()
    page = read(compare_page(compare_sides(sides, resamples=200), sides))
    fig = page.figure("layer-delta")
    assert [t["name"] for t in fig["data"]] == ["self wall"]


def test_hostile_side_label_stays_text() -> None:
    sides = _sides(label=HOSTILE)
    text = compare_page(compare_sides(sides, resamples=200), sides)
    assert "<img" not in text and "</script><" not in text.split('id="plotly-gz"')[0]
    page = read(text)
    assert [t["name"] for t in page.figure("step-box")["data"]] == ["A", HOSTILE]
    assert page.tables["step-stats"][2][0] == HOSTILE
    assert json.loads(page.scripts["chart-step-box-figure"])["data"][1]["name"] == HOSTILE


def test_huge_sides_are_sampled_by_order_statistics() -> None:
    steps = np.random.default_rng(3).lognormal(0.0, 0.5, 200_000)
    sample = box_sample(steps)
    assert len(sample) == BOX_POINTS
    assert sample.min() == steps.min() and sample.max() == steps.max()
    for q in (25, 50, 75):
        assert np.percentile(sample, q) == pytest.approx(np.percentile(steps, q), rel=0.01)


def test_cpu_sides_phase_table_has_no_gpu_columns() -> None:
    """Runs with no GPU time in any phase: the table shows host time only, not zeros."""
    sides = [
        side(label, run(normal_steps(mean, 4, N, seed), layer_rows=_layers(extra, 0.0),
                        phases={"forward": (0, fwd * MS), "data": (0, 2 * MS)}))
        for label, mean, seed, extra, fwd in (("A", 100, 1, 0, 3), ("B", 106, 2, 2, 8))
    ]  # fmt: skip
    page = read(compare_page(compare_sides(sides, resamples=200), sides))
    rows = page.tables["phase-table"]
    forward = next(r for r in rows if r[0] == "forward")
    assert forward[1:] == ["3.00 ms", "8.00 ms", "+5.00 ms"]  # host only
