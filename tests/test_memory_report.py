"""Memory per layer in the report (report/layers/memory.py) from hand-written facts with
round numbers, on the cost tests' generated profile (a root ``model`` with ``fc1`` and
``fc2``, whose weight is tied to ``fc1``'s)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from browser import Chromium, chromium_fixture  # noqa: F401
from builders import fact_mark
from dlprof_lite.report.build import build_report
from test_flops_report import profile

T = 35_000  # the facts' time: after the steps


def memory_marks(*, peak: int | None = 200_000, saved: tuple[int, int, int] = (
        60_000, 30_000, 5_000)) -> list[dict[str, object]]:  # fmt: skip
    fc1, fc2, model = saved
    step: dict[str, object] = {"off": None, "layers": 3}
    if peak is not None:
        step["cuda_peak"] = peak
    return [
        fact_mark("memory", {"layer": "fc1", "optimizer": "Adam", "param_bytes": 4096,
                             "grad_bytes": 4096, "optimizer_bytes": 8200, "tied": None}, T),
        fact_mark("memory", {"layer": "fc2", "optimizer": "Adam", "param_bytes": 0,
                             "grad_bytes": 0, "optimizer_bytes": 0, "tied": "fc1"}, T),
        fact_mark("memory", {"layer": "model", "optimizer": "Adam", "param_bytes": 1000,
                             "grad_bytes": 1000, "optimizer_bytes": 2000, "tied": None}, T),
        fact_mark("saved", {"layer": "fc1", "saved_bytes": fc1}, T),
        fact_mark("saved", {"layer": "fc2", "saved_bytes": fc2}, T),
        fact_mark("saved", {"layer": "model", "saved_bytes": model}, T),
        fact_mark("saved_step", step, T),
        fact_mark("module", {"layer": "fc1", "type": "Linear", "in_shape": "10x100",
                             "dtype": "float32"}, 100),
    ]  # fmt: skip


def test_columns_and_totals_worked_out_by_hand() -> None:
    report = build_report(profile(memory_marks()))
    layers = report.layers.set_index("layer")
    assert layers.loc["fc1", ["param_bytes", "gradient_bytes", "optimizer_bytes"]].tolist() == [
        4096, 4096, 8200]
    assert layers.loc["fc2", "param_bytes"] == 0 and layers.loc["fc2", "memory_tied"] == (
        "tied to fc1")
    assert layers.loc["fc1", "saved_bytes"] == 60_000
    # inclusive: the root holds its children's too
    assert layers.loc["model", "saved_inclusive_bytes"] == 95_000
    assert layers.loc["fc1", "saved_inclusive_bytes"] == 60_000
    m = report.summary.memory
    assert (m.memory_param_bytes, m.memory_gradient_bytes, m.memory_optimizer_bytes,
            m.memory_saved_bytes) == (5096, 5096, 10_200, 95_000)  # fmt: skip
    assert m.memory_gpu_peak_bytes == 200_000
    assert m.memory_gpu_unexplained_bytes == 200_000 - (5096 + 5096 + 10_200 + 95_000)


def test_without_facts_the_columns_are_empty() -> None:
    report = build_report(profile([]))
    assert report.layers["param_bytes"].isna().all() and report.layers["saved_bytes"].isna().all()
    assert report.summary.memory.memory_saved_bytes is None
    assert math.isnan(report.layers.set_index("layer").loc["fc1", "saved_inclusive_bytes"])


def test_a_few_layers_holding_the_activations_get_checkpointing_advice() -> None:
    """fc1 and fc2 save 90 of the 95 kB of activations, 81 % of the tensor bytes: checkpointing
    advice names them (the root is never one), largest first, each with what it frees: its
    saved bytes less its input (fc1: 60,000 - 10 x 100 x 4 = 56,000 B)."""
    report = build_report(profile(memory_marks()))
    (row,) = report.advice[report.advice["metric"] == "memory_saved_bytes"].to_dict("records")
    assert row["value"] == 95_000
    first = "fc1 (Linear) saves 58.6 KiB, checkpointing it frees about 54.7 KiB"
    assert row["evidence"].index(first) < row["evidence"].index("fc2")
    assert "model (Net)" not in row["evidence"] and "checkpointing it frees" in row["evidence"]


def test_small_activations_get_no_checkpointing_advice() -> None:
    report = build_report(profile(memory_marks(saved=(100, 100, 100))))
    assert not (report.advice["metric"] == "memory_saved_bytes").any()


def test_console_and_page_show_memory_per_layer() -> None:
    from rich.console import Console

    from dlprof_lite.render.console import render
    from test_html_page import read, trace

    report = build_report(profile(memory_marks()))
    out = io.StringIO()
    render(report, None, Console(file=out, width=120, force_terminal=False))
    text = out.getvalue()
    assert "Memory per layer" in text and "GPU peak 195.3 KiB" in text
    assert "fc1" in text.split("Memory per layer")[1]
    page = read(report)
    figure = page.figure("memory")
    saved = trace(figure, "saved activations")
    assert dict(zip(saved["customdata"], saved["y"], strict=True))["fc1"] == pytest.approx(
        60_000 / 1024)
    assert figure["layout"]["meta"]["unit"] == "KiB"


@pytest.mark.slow
def test_the_memory_chart_draws_in_chromium(chromium: Chromium, tmp_path: Path) -> None:
    from dlprof_lite.render.page.html import report_page

    page = tmp_path / "memory.html"
    page.write_text(report_page(build_report(profile(memory_marks()))), encoding="utf-8")
    result = chromium.open_page(page)
    assert result.problems() == []
    chart = result.chart("chart-memory")
    assert chart.section == "memory" and chart.drawn == chart.points > 0
