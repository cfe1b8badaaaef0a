"""The ranks table shown: the console's Ranks table and report.html's ranks chart, from the
hand-worked two-rank profile of tests/test_ranks.py (rank 0 the straggler: compute 490 and
data 500 per step; rank 1: compute 500, exposed communication 390, data 100)."""

from __future__ import annotations

from rich.console import Console

from dlprof_lite.render.console import render
from dlprof_lite.render.page.rank_views import PARTS, ranks_figure
from dlprof_lite.report.build import build_report
from test_html_page import assert_plotly_figure
from test_ranks import _two_ranks


def test_console_lists_each_rank_and_marks_the_straggler() -> None:
    report = build_report(_two_ranks(exposed=True))
    console = Console(record=True, width=160, color_system=None)
    render(report, None, console)
    text = console.export_text()
    table = text[text.index("Ranks") :]
    assert ("0 (straggler)" in table and "\n1 " in table.replace("│", " ")) or " 1 " in table
    assert "390 ns" in table and "500 ns" in table  # exposed/step of rank 1, data of rank 0


def test_chart_stacks_compute_communication_and_data_per_rank() -> None:
    report = build_report(_two_ranks(exposed=True))
    fig = ranks_figure(report.ranks)
    assert fig is not None
    assert_plotly_figure(fig)
    doc = fig
    size = doc["layout"]["meta"]["ns"]
    by = {t["name"]: dict(zip(t["y"], (x * size for x in t["x"]), strict=True))
          for t in doc["data"]}  # fmt: skip
    assert [t["name"] for t in doc["data"]] == [name for name, _ in PARTS]
    slow, other = "rank 0 · GPU 0 (straggler)", "rank 1 · GPU 0"
    assert round(by["compute"][slow]) == 490 and round(by["data"][slow]) == 500
    assert round(by["exposed communication"][other]) == 390
    assert round(by["hidden communication"][slow]) == 90  # its comm ran under its compute
    assert ranks_figure(report.ranks.head(1)) is None  # one rank: no chart
