"""The idle partition's views: the console's "Why the GPU waits" (a CPU run: "Where the step
goes (host)") and the page's stacked bars per analysed step.

Oracles: the planted step of tests/test_idle_partition.py, whose causes are worked out by
hand there (``DEVICE_PLANTED``, ``DEVICE_LAYERS``; one step of 10 000 ns on one device, so
each cause's share of the step is its ns / 100), a CPU-only step worked out here, and
iterations tables written here with round numbers.
"""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from builders import R, make_profile, phase
from dlprof_lite.durations import short
from dlprof_lite.render.console import render
from dlprof_lite.render.page.idle_chart import IDLE_BARS, idle_figure
from dlprof_lite.report.build import build_report
from dlprof_lite.report.model import Report, empty_idle
from dlprof_lite.rules.idle import (
    CAUSE_WORDS,
    DEVICE,
    DEVICE_CAUSES,
    HOST,
    HOST_CAUSES,
    cause_column,
)
from test_html_page import assert_plotly_figure, read
from test_idle_partition import DEVICE_PLANTED, planted

STEP_NS = 10_000  # the planted step, on one device


@pytest.fixture(scope="module")
def gpu_run() -> Report:
    return planted()


@pytest.fixture(scope="module")
def cpu_run() -> Report:
    """One step of 1000 ns, no GPU op: data 300, the model's forward 300 (conv inside it
    150 of them), its backward 200, the optimizer 200."""
    ranges = [phase("iteration", 0, 1_000), phase("data", 0, 300), phase("forward", 300, 600),
              R("fwd:model:Net", 300, 600, [R("fwd:conv:Conv2d", 350, 500)]),
              phase("backward", 600, 800), R("bwd:model:Net", 600, 800),
              phase("optimizer", 800, 1_000)]  # fmt: skip
    return build_report(make_profile(ranges=ranges, iterations=[(0, 1_000, False, True)]))


def printed(report: Report, top: int = 5) -> list[str]:
    out = io.StringIO()
    render(report, None, Console(file=out, width=250, force_terminal=False), top=top)
    return out.getvalue().splitlines()


def section(lines: list[str], title: str) -> list[str]:
    """The section's lines: its title line and the indented lines after it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")),
               len(lines))  # fmt: skip
    return lines[start:end]


def cause_line(cause: str, ns: int, step_ns: int, where: str = "") -> str:
    return (f"  {cause} — {CAUSE_WORDS[cause]}: {short(ns)}/step "
            f"({ns / step_ns * 100:.1f}% of the step){where}")


# Where the planted causes happened, as tests/test_idle_partition.py plants them: the sync
# and the collection inside conv1's and fc's forward, the compilation in the model's; host
# work in fc's forward (950 ns) and backward (750 ns) above conv1's backward (700 ns);
# launch calls in conv1's backward (50 ns), then conv1's and fc's forward (40 ns each: by
# name), beside the optimizer's 100 ns in no layer.
PLANTED_WHERE = {
    "sync": ", in conv1 (forward)", "gc": ", in fc (forward)", "compile": ", in model (forward)",
    "layer": ", in fc (forward) 950 ns, fc (backward) 750 ns",
    "launch": ", in conv1 (backward) 50 ns, conv1 (forward) 40 ns",
}  # fmt: skip


def test_console_says_why_the_gpu_waits(gpu_run: Report) -> None:
    """Every planted cause is at least 1 % of the step (unknown: exactly 1 %): with room for
    all, each is one line, largest first, with the layers the partition booked it in."""
    idle = sum(DEVICE_PLANTED.values())
    lines = section(printed(gpu_run, top=len(DEVICE_CAUSES)), "Why the GPU waits")
    assert lines[0] == (f"Why the GPU waits: idle {short(idle)} per step "
                        f"({idle / STEP_NS * 100:.1f}% of the step's device time), by cause "
                        "(mean per analysed step)")  # fmt: skip
    largest = sorted(DEVICE_PLANTED, key=lambda c: -DEVICE_PLANTED[c])  # stable: rules' order
    assert lines[1:] == [cause_line(c, DEVICE_PLANTED[c], STEP_NS, PLANTED_WHERE.get(c, ""))
                         for c in largest]  # fmt: skip
    assert "  data — waiting for data: 1.4 µs/step (14.5% of the step)" in lines
    assert "Where the step goes" not in "\n".join(printed(gpu_run))


def test_console_lists_the_top_causes_and_counts_the_rest(gpu_run: Report) -> None:
    lines = section(printed(gpu_run), "Why the GPU waits")
    shown = ["layer", "data", "optimizer", "other", "queued"]  # 2900, 1450, 1000, 650, 560
    assert lines[1:-1] == [cause_line(c, DEVICE_PLANTED[c], STEP_NS, PLANTED_WHERE.get(c, ""))
                           for c in shown]  # fmt: skip
    assert lines[-1] == f"  +{len(DEVICE_CAUSES) - 5} smaller causes (idle.csv)"


def test_console_leaves_out_causes_under_one_percent_of_the_step(gpu_run: Report) -> None:
    """A cause under 1 % of the step is counted, not listed: the planted unknown (100 ns,
    1 %) scaled to 0.5 %."""
    idle = gpu_run.idle.copy()
    small = ((idle["kind"] == DEVICE) & (idle["cause"] == "unknown")).to_numpy()
    idle.loc[small, ["step_mean_ns", "step_pct"]] = [50.0, 0.5]
    lines = section(printed(replace(gpu_run, idle=idle), top=len(DEVICE_CAUSES)),
                    "Why the GPU waits")  # fmt: skip
    assert not any(line.startswith("  unknown") for line in lines)
    assert lines[-1] == "  +1 smaller cause, each under 1% of the step (idle.csv)"


def test_console_on_a_cpu_run_says_where_the_host_step_goes(cpu_run: Report) -> None:
    """No GPU work: the main thread's step by cause, host work named by the layers' self
    time (the model's backward 200; conv's forward 150 and the model's own forward 150 (300
    less conv's), the first in the table's order: by name)."""
    lines = printed(cpu_run)
    assert not any(line.startswith("Why the GPU waits") for line in lines)
    assert section(lines, "Where the step goes (host)") == [
        "Where the step goes (host): 1.0 µs per step, by cause (mean per analysed step)",
        cause_line("layer", 500, 1_000, ", in model (backward) 200 ns, conv (forward) 150 ns"),
        cause_line("data", 300, 1_000),
        cause_line("optimizer", 200, 1_000),
    ]


def test_console_says_nothing_of_causes_without_analysed_steps(gpu_run: Report) -> None:
    """No analysed step (every one warm-up): the idle table is empty, no figure is shown."""
    warm = gpu_run.iterations.assign(warmup=True)
    lines = printed(replace(gpu_run, iterations=warm, idle=empty_idle()))
    assert not any("Why the GPU waits" in line or "Where the step goes" in line
                   for line in lines)  # fmt: skip
    assert idle_figure(warm, gpu=True) is None


def _bars(figure: dict) -> dict[str, list[float]]:
    """Each trace's bars back in ns (the unit the figure's meta names)."""
    size = figure["layout"]["meta"]["ns"]
    return {t["name"]: [v * size for v in t["y"]] for t in figure["data"]}


def test_chart_stacks_the_planted_device_causes(gpu_run: Report) -> None:
    fig = idle_figure(gpu_run.iterations, gpu=True)
    assert fig is not None
    assert_plotly_figure(fig)
    assert fig["layout"]["barmode"] == "stack"
    assert fig["layout"]["meta"]["unit"] == "µs"  # the 8050 ns of idle time
    # One trace per cause the step has, in rules/idle.py's order.
    assert [t["name"] for t in fig["data"]] == [c for c in DEVICE_CAUSES if DEVICE_PLANTED[c]]
    bars = _bars(fig)
    for cause, ns in DEVICE_PLANTED.items():
        assert bars[cause] == pytest.approx([ns])
        assert bars[cause] == pytest.approx(
            gpu_run.iterations[cause_column(DEVICE, cause)].astype(float).tolist())
    # Hover: the cause, its share of the step (wall x devices) and the step.
    sync = next(t for t in fig["data"] if t["name"] == "sync")
    assert sync["x"] == [0] and sync["customdata"] == [[4.0, "iteration 0"]]
    assert "% of the step" in sync["hovertemplate"] and CAUSE_WORDS["sync"] in sync["hovertemplate"]
    assert "add up to its idle time" in fig["layout"]["title"]["text"]


def test_chart_of_a_cpu_run_stacks_the_host_causes(cpu_run: Report) -> None:
    fig = idle_figure(cpu_run.iterations, gpu=False)
    assert fig is not None
    assert_plotly_figure(fig)
    it = cpu_run.iterations
    want = {c: float(it[cause_column(HOST, c)].iloc[0]) for c in HOST_CAUSES}
    assert want == {"data": 300, "sync": 0, "comm": 0, "compile": 0, "gc": 0, "layer": 500,
                    "optimizer": 200, "other": 0}  # fmt: skip
    assert {c: v for c, (v,) in _bars(fig).items()} == pytest.approx(
        {c: v for c, v in want.items() if v})
    assert [t["name"] for t in fig["data"]] == ["data", "layer", "optimizer"]
    assert [t["customdata"][0][0] for t in fig["data"]] == [30.0, 50.0, 20.0]


def test_pages_have_the_idle_section_after_the_step_breakdown(gpu_run: Report,
                                                              cpu_run: Report) -> None:  # fmt: skip
    for report in (gpu_run, cpu_run):
        page = read(report)
        assert page.sections[:3] == ["header", "steps", "idle"]
        assert "chart-idle" in page.charts
        assert _bars(page.figure("idle")) == _bars(idle_figure(
            report.iterations, gpu=report is gpu_run))  # fmt: skip


def test_many_steps_are_charted_as_means_of_runs() -> None:
    """1200 analysed steps (after 3 warm-up): 400 bars, each the mean of 3 consecutive
    steps; the bars' sums are the steps' sums."""
    n, warm = 1_200, 3
    numbers = np.arange(n + warm, dtype=np.int64)
    data = (numbers % 7) * 100  # 0..600 ns, varying
    frame = pd.DataFrame({
        "iteration": numbers, "warmup": numbers < warm, "in_window": True,
        "wall_ns": 10_000, "gpu_busy_ns": 9_000 - data, "phase_idle_ns": 1_000 + data,
        **{cause_column(DEVICE, c): 0 for c in DEVICE_CAUSES},
    })  # fmt: skip
    frame[cause_column(DEVICE, "data")] = data
    frame[cause_column(DEVICE, "queued")] = 1_000
    fig = idle_figure(frame, gpu=True)
    assert fig is not None
    bars = _bars(fig)
    size = -(-n // IDLE_BARS)
    assert len(bars["data"]) == n // size == 400
    assert sum(bars["data"]) * size == pytest.approx(float(data[warm:].sum()))
    assert bars["queued"] == pytest.approx([1_000.0] * 400)
    first = next(t for t in fig["data"] if t["name"] == "data")
    assert first["x"][:2] == [4, 7]  # the middle of iterations 3-5, 6-8
    assert first["customdata"][0][1] == "iterations 3–5 (mean)"
    assert "1200 steps" in fig["layout"]["title"]["text"]
