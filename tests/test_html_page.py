"""report.html (render/page/html.py) read back with html.parser: sections, charts, figure data.

Oracles: the example profile's hand-worked numbers (tests/example_profiles.py docstring),
the Report's own tables for a real corpus export (the page must show what the tables say,
in network order), and hostile names that must come back as data, never markup. Every
figure a page holds is plotly's own figure JSON: ``plotly.graph_objects`` validates it and
writes it back unchanged (:func:`assert_plotly_figure`; the pages build it without plotly).
No browser here: tests/browser.py (the browser tests) draws these pages in Chromium.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dlprof_lite.render.page.html import report_page
from dlprof_lite.render.page.plotly_bundle import count_points, script_json
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.model import Report
from dlprof_lite.report.summary_types import number
from dlprof_lite.rules.names import PHASES
from example_profiles import training_profile

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr"}


class Page(HTMLParser):
    """What the tests read from a page: sections (with their h2), chart divs, JSON script
    blocks by id, every src/href, the text of each table cell, ``<details>`` in the layer
    table, and tag balance."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.h2_in: set[str] = set()
        self.charts: dict[str, dict[str, str | None]] = {}
        self.scripts: dict[str, str] = {}
        self.links: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.details = 0
        self.stack: list[str] = []
        self.errors: list[str] = []
        self._script: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "section":
            self.sections.append(a["id"] or "")
        elif tag == "h2" and self.sections:
            self.h2_in.add(self.sections[-1])
        elif tag == "div" and "chart" in (a.get("class") or "").split():
            self.charts[a["id"] or ""] = a
        elif tag == "script" and a.get("type") == "application/json":
            self._script, self._text = a["id"], []
        elif tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "details" and self._table == "layer-table":
            self.details += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        if tag == "script" and self._script is not None:
            self.scripts[self._script] = "".join(self._text)
            self._script = None
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def figure(self, name: str) -> dict:
        return json.loads(self.scripts[f"chart-{name}-figure"])


def assert_plotly_figure(figure: dict) -> None:
    """``plotly.graph_objects`` accepts the figure (a misspelt or misplaced property raises)
    and writes the same JSON back (a shorthand it would expand differs)."""
    import plotly.graph_objects as go
    import plotly.io

    data = json.loads(json.dumps(figure))
    assert json.loads(plotly.io.to_json(go.Figure(data), validate=True)) == data


def read(report: Report) -> Page:
    page = Page(report_page(report))
    assert not page.errors and not page.stack, (page.errors, page.stack)
    for link in page.links:  # no network: nothing fetched from http(s) or //
        assert not link.lower().startswith(("http:", "https:", "//")), link
    for sid in page.sections:
        assert sid in page.h2_in, f"section {sid} has no <h2>"
    for cid, attrs in page.charts.items():
        figure = json.loads(page.scripts[f"{cid}-figure"])
        assert int(attrs["data-points"] or 0) == count_points(figure) > 0, cid
        assert_plotly_figure(figure)
    return page


def trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t["name"] == name)


def ns(fig: dict, values: list) -> list[float | None]:
    size = fig["layout"]["meta"]["ns"]
    return [None if v is None else v * size for v in values]


@pytest.fixture(scope="module")
def example() -> Report:
    return build_report(training_profile())


def test_example_page_has_every_section(example: Report) -> None:
    page = read(example)
    assert not example.timeline.empty  # the example's steady iteration (report/timeline.py)
    assert page.sections == ["header", "steps", "idle", "critical", "layers", "iterations",
                             "kernels", "advice", "timeline"]  # fmt: skip
    assert set(page.charts) == {"chart-steps", "chart-idle", "chart-critical", "chart-layers",
                                "chart-iterations", "chart-kernels", "chart-timeline"}  # fmt: skip
    facts = dict(page.tables["run-facts"])
    # Analysed steps of 2000 and 3000 ns: median 2500, p10 2100, p90 2900 (linear).
    # One spread beside a step time, as the console writes it (render/phrases.py).
    assert facts["steady step time"] == "2.5 µs median (p10–p90 2.1 µs–2.9 µs)"
    assert facts["source"] == "test.sqlite"
    assert facts["analysed window"].startswith("iterations 1–2 (2 steps, analysed)")
    assert facts["iterations"] == "3 found, 1 warm-up, 2 analysed"
    assert facts["GPUs"] == "NVIDIA H100 80GB HBM3 (device 0, cc 9.0, busy 12.2% of the session)"


def test_steps_chart_is_the_hand_worked_breakdown(example: Report) -> None:
    fig = read(example).figure("steps")
    got = {}
    for t in fig["data"]:
        for view, value in zip(t["y"], ns(fig, t["x"]), strict=True):
            got[(view, t["name"])] = pytest.approx(value)
    # Per analysed step (example_profiles.py): GPU copy 20, gemm 100 + relu 20, sgemm 200,
    # adam 50; host gaps 120 + 290 + 390 + 490 = 1290 of the idle 2500 - 390 = 2110 (mean of
    # steps of 2000 and 3000 ns); host ranges data 200, forward 600, backward 800, optimizer
    # 300, the rest 2500 - 1900 = 600.
    assert got == {
        ("GPU", "data"): 20, ("GPU", "forward"): 120, ("GPU", "backward"): 200,
        ("GPU", "optimizer"): 50, ("GPU", "launch overhead"): 1290, ("GPU", "idle"): 820,
        ("host", "data"): 200, ("host", "forward"): 600, ("host", "backward"): 800,
        ("host", "optimizer"): 300, ("host", "other"): 600,
    }  # fmt: skip
    s = example.summary
    assert got[("GPU", "forward")] == s.step.step_forward_ns
    assert got[("host", "other")] == s.step.step_other_wall_ns


def test_layers_chart_in_network_order_with_toggle(example: Report) -> None:
    page = read(example)
    fig = page.figure("layers")
    assert trace(fig, "forward (host wall)")["x"] == ["fc1", "act"]
    # fc1: forward 150 ns, backward 400 per step; act: forward 150 (example_profiles.py).
    assert ns(fig, trace(fig, "forward (host wall)")["y"]) == pytest.approx([150, 150])
    assert ns(fig, trace(fig, "backward (host wall)")["y"]) == pytest.approx([400, 0])
    assert ns(fig, trace(fig, "forward (GPU)")["y"]) == pytest.approx([100, 20])
    assert ns(fig, trace(fig, "backward (GPU)")["y"]) == pytest.approx([200, 0])
    layers = example.layers.sort_values("order")
    assert ns(fig, trace(fig, "forward (host wall)")["y"]) == pytest.approx(
        layers["step_forward_wall_ns"].tolist()
    )
    assert trace(fig, "Tensor Core share")["y"] == pytest.approx([100 / 3, 0])  # 100 of 300
    buttons = fig["layout"]["updatemenus"][0]["buttons"]
    assert [b["label"] for b in buttons] == ["host wall time", "GPU time"]
    assert [t.get("visible", True) for t in fig["data"]] == [True, True, False, False, True]
    rows = page.tables["layer-table"]
    assert [r[1] for r in rows[1:]] == ["fc1", "act"]
    assert page.details == 2  # each layer's kernels on expand
    assert "sgemm_128x64_nt 67% no tc" in rows[1][-1]


def test_iterations_and_kernels_charts_hold_the_tables(example: Report) -> None:
    page = read(example)
    it = page.figure("iterations")
    wall = trace(it, "step wall time")
    assert wall["x"] == [0, 1, 2]
    assert ns(it, wall["y"]) == pytest.approx([2000, 2000, 3000])
    bands = {s["name"]: (s["x0"], s["x1"]) for s in it["layout"]["shapes"]}
    assert bands == {"warm-up": (-0.5, 0.5), "analysed": (0.5, 2.5)}
    k = page.figure("kernels")
    bar = k["data"][0]
    assert bar["y"] == example.kernels["short_name"].tolist()
    assert ns(k, bar["x"]) == pytest.approx([400, 200, 100, 40])  # totals over 2 steps
    assert [c[1] for c in bar["customdata"]] == ["no_tc", "tc", "no_tc", "no_tc"]
    rows = page.tables["kernel-table"]
    assert rows[0][-3:] == ["avg launch call", "avg queue", "short launches"]
    assert rows[4][0] == "relu_kernel" and rows[4][-1] == "2"  # launch 30 ns > 20 ns on GPU


def test_cpu_only_run_hides_gpu_parts() -> None:
    report = build_report(training_profile(kernels=[], memops=[]))
    page = read(report)
    assert "kernels" not in page.sections
    fig = page.figure("steps")
    assert {v for t in fig["data"] for v in t["y"]} == {"host"}
    layers = page.figure("layers")
    assert [t["name"] for t in layers["data"]] == ["forward (host wall)", "backward (host wall)"]
    assert "updatemenus" not in layers["layout"]
    assert page.tables["layer-table"][0][-1] == "self wall/step"  # no GPU columns


def test_hostile_names_stay_data() -> None:
    evil = 'x</script><img src=x onerror="alert(1)"><!--'
    from example_profiles import _step  # the fixture's own ranges, one layer renamed

    def renamed(b: int, wall: int) -> list:
        return [replace(r, name=r.name.replace("fc1", evil)) for r in _step(b, wall)]

    report = build_report(training_profile(
        ranges=[*renamed(1000, 2000), *renamed(3000, 2000), *renamed(5000, 3000)]))  # fmt: skip
    assert evil in report.layers["layer"].tolist()
    text = report_page(report)
    assert "</script><img" not in text and "<!--" not in text.split("plotly-gz")[0]
    page = read(report)
    assert trace(page.figure("layers"), "forward (host wall)")["customdata"][0] == evil
    assert page.tables["layer-table"][1][1] == evil
    assert json.loads(script_json({"k": "</script><!--"})) == {"k": "</script><!--"}


@pytest.mark.corpus
def test_export_without_module_ranges_has_no_layers(corpus_dir: Path) -> None:
    import dlprof_lite

    report = dlprof_lite.analyze(
        corpus_dir / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite"
    )
    assert report.layers.empty and len(report.iterations) > 0
    page = read(report)
    assert "layers" not in page.sections and "iterations" in page.sections
    fig = page.figure("iterations")
    wall = trace(fig, "step wall time")
    assert ns(fig, wall["y"]) == pytest.approx(report.iterations["wall_ns"].astype(float).tolist())


@pytest.mark.corpus
def test_corpus_kernels_chart_is_the_top_of_the_table(corpus_dir: Path) -> None:
    import dlprof_lite

    report = dlprof_lite.analyze(corpus_dir / "MohanadOdema__DLProf__nsys_profile.sqlite")
    page = read(report)
    fig = page.figure("kernels")
    top = report.kernels.head(20)
    assert ns(fig, fig["data"][0]["x"]) == pytest.approx(top["total_ns"].astype(float).tolist())
    assert len(page.tables["kernel-table"]) == 21
    # The table names each kernel as the chart does (its fft2d_r2c_32x32s told apart).
    assert [r[0] for r in page.tables["kernel-table"][1:]] == fig["data"][0]["y"]
    assert len(set(fig["data"][0]["y"])) == 20
    # No iterations: the layers chart shows window totals; kernels only, so GPU time only.
    layers = page.figure("layers")
    order = report.layers.sort_values("order")
    assert [t["name"] for t in layers["data"]] == ["forward (GPU)", "backward (GPU)",
                                                   "Tensor Core share"]  # fmt: skip
    assert ns(layers, layers["data"][0]["y"]) == pytest.approx(
        order["forward_gpu_ns"].astype(float).tolist()
    )
    assert page.tables["layer-table"][0][3:6] == ["calls", "fwd wall", "bwd wall"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [[], ["--layers", "1000", "--kernels-per-layer", "1", "--per-kernel-ranges"]],
    ids=["32-layers", "1000-layers-per-kernel-ranges"],
)
def test_million_kernel_page_stays_under_5_mb(tmp_path: Path, shape: list[str]) -> None:
    import dlprof_lite
    from make_profile import main as make_profile

    export = tmp_path / "big.sqlite"
    assert make_profile([str(export), "--kernels", "1000000", *shape]) == 0
    report = dlprof_lite.analyze(export)
    assert report.summary.totals.kernel_count >= 1_000_000
    start = time.perf_counter()
    text = report_page(report)
    took = time.perf_counter() - start
    size = len(text.encode("utf-8"))
    print(f"1M-kernel page ({'default' if not shape else ' '.join(shape)}): {size} bytes, "
          f"built in {took:.2f} s")  # fmt: skip
    assert size <= 5_000_000
    page = read(report)
    assert {"header", "steps", "layers", "iterations", "kernels"} <= set(page.sections)
    points = {cid: int(a["data-points"] or 0) for cid, a in page.charts.items()}
    assert points["chart-iterations"] <= 2 * 5000  # two series, each decimated to 5000


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_saved_report_renders_the_same_page(example: Report, tmp_path: Path, fmt: str) -> None:
    from dlprof_lite.render.reader import open_report

    folder = example.save(tmp_path / "run.dlprof", formats=(fmt,))
    back = open_report(folder)
    if fmt == "csv":  # summary.csv has no GPU list: the header names the GPUs only
        back = replace(back, summary=replace(back.summary, gpus=example.summary.gpus))
    assert report_page(back) == report_page(example)


def test_hostile_kernel_names_stay_data() -> None:
    from example_profiles import _step_ops

    evil = 'relu<script>alert("k")</script>'
    kernels, memops = [], []
    for b, gap in ((1000, 610), (3000, 440), (5000, 440)):
        k, m = _step_ops(b, gap)
        kernels += [dict(op, name=evil) if op["name"] == "relu_kernel" else op for op in k]
        memops += m
    report = build_report(training_profile(kernels=kernels, memops=memops))
    assert evil in report.kernels["name"].tolist()
    text = report_page(report)
    assert "<script>alert" not in text
    page = read(report)
    assert evil in [c[0] for c in page.figure("kernels")["data"][0]["customdata"]]
    assert evil in [r[0] for r in page.tables["kernel-table"]]


def assert_steps_are_the_summary(report: Report, fig: dict) -> None:
    """Every bar of the step breakdown is its summary field (per analysed step): GPU phases
    step_<p>_ns, launch overhead the phases' host gaps, idle the rest of step_idle_ns; host
    phases step_<p>_wall_ns. Parts that are 0 are not drawn."""
    s = report.summary
    gaps = sum(number(s[f"step_{p}_host_gap_ns"]) or 0.0 for p in PHASE_COLUMNS)
    want = {("GPU", p): number(s[f"step_{p}_ns"]) for p in PHASE_COLUMNS}
    want[("GPU", "launch overhead")] = gaps
    want[("GPU", "idle")] = (s.step.step_idle_ns or 0.0) - gaps
    want.update({("host", p): number(s[f"step_{p}_wall_ns"]) for p in (*PHASES, "other")})
    want = {k: v for k, v in want.items() if v}
    got = {(view, t["name"]): value for t in fig["data"]
           for view, value in zip(t["y"], ns(fig, t["x"]), strict=True)}  # fmt: skip
    assert got == pytest.approx(want)


@pytest.mark.corpus
def test_corpus_steps_chart_is_the_summary(corpus_dir: Path) -> None:
    import dlprof_lite

    # cuBLAS's own API range as the step: named, since no guess takes a library's range.
    report = dlprof_lite.analyze(
        corpus_dir / "VerticalResearchGroup__casio__nerf_output-file.sqlite",
        key_range="^cublasSgemmEx$",
    )
    page = read(report)
    assert (report.summary.totals.kernel_count or 0) > 0
    assert_steps_are_the_summary(report, page.figure("steps"))
    assert_steps_are_the_summary(build_report(training_profile()), read(
        build_report(training_profile())).figure("steps"))  # fmt: skip
