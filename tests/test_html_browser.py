"""report.html in a real headless Chromium, from ``file://``, with the network cut off.

First the harness itself (tests/browser.py) on pages written here: a correct Plotly page
passes; a console error, a network request, a chart with nothing drawn, a blank page, a page
that never finishes and one that reports an error are each caught. Then the pages the
command line writes: LeNet profiled for real, a corpus export without module ranges, the
1M-kernel generated profile.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from browser import (  # noqa: F401
    REPORT_CHARTS,
    REPORT_SECTIONS,
    Chromium,
    Image,
    blank_reasons,
    chromium_fixture,
    decode_png,
    dlprof,
    expected_sections,
    profile_lenet,
    rows,
    screenshot_problems,
    section_problems,
    written_page,
)
from dlprof_lite import open_report
from make_profile import make_profile

DOCS = Path(__file__).resolve().parents[1] / "docs"
DOC_PNG_LIMIT = 1 << 20
PAGE_LIMIT = 5 * 1000 * 1000  # issue 15: <= 5 MB for a 1M-kernel profile
MILLION = 1_000_000
KERNELS_PER_ITERATION = 2 * 8 * 12 + 2  # forward and backward of 8 layers x 12, 2 optimizer
# Ranges of cudf's own NVTX domain, no module ranges (no fwd:/bwd: layer ranges).
NO_MODULES = "quasiben__nvtx-examples__cudf.sqlite"
DLPROF_EXPORT = "MohanadOdema__DLProf__nsys_profile.sqlite"


def plotly_page(folder: Path, name: str, *, extra_script: str = "", extra_body: str = "",
                bars: int = 5, points: int | None = None) -> Path:  # fmt: skip
    """A page made the contract's way, by hand: plotly.js inline, one ``div.chart`` drawn
    with ``Plotly.newPlot`` from a figure built in Python, the rendered flag set after it."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    xs = [f"layer{i}" for i in range(bars)]
    fig = go.Figure(go.Bar(x=xs, y=[i + 1 for i in range(bars)]))
    fig.update_layout(width=900, height=500)
    figure = fig.to_plotly_json()
    html = f"""<!doctype html><html><head><meta charset="utf-8">
<script>{get_plotlyjs()}</script></head><body>
<section id="steps"><h2>Step breakdown</h2>
<div class="chart" id="chart-steps" data-points="{bars if points is None else points}"></div>
</section>{extra_body}
<script>
const fig = {json.dumps(figure, default=list)};
Plotly.newPlot("chart-steps", fig.data, fig.layout)
  .then(() => {{ {extra_script} document.body.dataset.rendered = "true"; }})
  .catch((e) => {{ console.error(e); document.body.dataset.error = String(e); }});
</script></body></html>"""
    path = folder / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    return path


def test_a_correct_page_passes(chromium: Chromium, tmp_path: Path) -> None:
    result = chromium.open_page(plotly_page(tmp_path, "good", bars=7))
    assert result.problems() == []
    assert result.section_ids == ["steps"]
    chart = result.chart("chart-steps")
    # One bar path per bar: the count of drawn elements is the figure's, not just "some".
    assert (chart.points, chart.drawn, chart.traces) == (7, 7, 1)
    assert result.render_ms is not None and result.render_ms > 0


def test_a_console_error_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    page = plotly_page(tmp_path, "console", extra_script="console.error('layer table broke');")
    result = chromium.open_page(page)
    assert result.console_errors == ("layer table broke",)
    assert "console error: layer table broke" in result.problems()


def test_an_uncaught_exception_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    page = plotly_page(tmp_path, "throw", extra_body="<script>undefinedThing.call()</script>")
    result = chromium.open_page(page)
    assert any("undefinedThing" in m for m in result.console_errors), result.console_errors


@pytest.mark.parametrize("asks", [
    '<img src="http://example.invalid/logo.png">',
    '<link rel="stylesheet" href="https://cdn.example.invalid/page.css">',
    '<script src="//cdn.example.invalid/plotly.min.js"></script>',
    "<script>fetch('https://example.invalid/data.json').catch(() => {})</script>",
    '<script src="example.invalid/plotly.js"></script>',  # a file beside the page
])  # fmt: skip
def test_a_network_request_is_caught_and_never_made(
    chromium: Chromium, tmp_path: Path, asks: str
) -> None:
    result = chromium.open_page(plotly_page(tmp_path, "net", extra_body=asks))
    assert len(result.requests) == 1 and "example.invalid" in result.requests[0]
    assert result.failed == result.requests  # aborted: nothing left the machine
    assert any(p.startswith("network request: ") for p in result.problems())


def test_a_chart_with_nothing_drawn_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    # The flag is set but the second chart div was never drawn; the first claims 0 points.
    body = (
        '<section id="layers"><h2>Layers</h2><div class="chart" id="chart-layers" '
        'data-points="4" style="height:300px"></div></section>'
    )
    result = chromium.open_page(plotly_page(tmp_path, "undrawn", extra_body=body, points=0))
    problems = result.problems()
    assert "chart 'chart-steps': data-points is 0, want > 0" in problems
    assert "chart 'chart-layers': nothing drawn (0 data elements)" in problems
    assert result.chart("chart-layers").points == 4


def test_a_blank_page_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    page = tmp_path / "blank.html"
    page.write_text('<!doctype html><body><div style="height:3000px"></div>'
                    '<script>document.body.dataset.rendered = "true"</script></body>')  # fmt: skip
    result = chromium.open_page(page)
    reasons = blank_reasons(decode_png(result.screenshot))
    assert len(reasons) == 3, reasons  # colours, ink and bands all fail
    assert result.problems() == [f"screenshot: {r}" for r in reasons]


def test_a_page_blank_below_its_chart_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    """A chart on top, a footer at the bottom and a tall empty stretch between them (a section
    that drew nothing)."""
    body = '<div style="height:4000px"></div><footer>dlprof-lite</footer>'
    page = plotly_page(tmp_path, "half", extra_body=body)
    reasons = blank_reasons(decode_png(chromium.open_page(page).screenshot))
    assert any("bands hold anything" in r for r in reasons), reasons


def test_a_page_that_never_finishes_or_reports_an_error(chromium: Chromium, tmp_path: Path) -> None:
    never = tmp_path / "never.html"
    never.write_text("<!doctype html><body><p>waiting</p></body>")
    result = chromium.open_page(never, timeout_ms=1500)
    assert not result.rendered and result.error is not None and "after" in result.error
    failed = tmp_path / "failed.html"
    failed.write_text('<!doctype html><body><script>document.body.dataset.error = '
                      '"DecompressionStream failed"</script></body>')  # fmt: skip
    result = chromium.open_page(failed)
    assert "page error: DecompressionStream failed" in result.problems()


LATE_MS = 3000  # plotly unpacked by DecompressionStream drew ~1.5 s after load on this VM


def late_page(folder: Path) -> Path:
    """A page whose chart is drawn ``LATE_MS`` after the ``load`` event (as plotly unpacked
    by ``DecompressionStream`` was): drawn by the end, blank in a screenshot taken at load
    (a short delay is not enough: on a loaded machine Chromium's capture itself can take
    longer than it)."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    figure = json.dumps(go.Figure(go.Bar(x=["a", "b"], y=[1, 2])).to_plotly_json(), default=list)
    page = folder / "late.html"
    page.write_text(f"""<!doctype html><html><head><script>{get_plotlyjs()}</script></head><body>
<section id="steps"><h2>Steps</h2><div class="chart" id="chart-steps" data-points="2"></div>
</section><script>window.addEventListener("load", () => setTimeout(() => {{
  const fig = {figure};
  Plotly.newPlot("chart-steps", fig.data, fig.layout)
    .then(() => {{ document.body.dataset.rendered = "true"; }});
}}, {LATE_MS}));</script></body></html>""", encoding="utf-8")
    return page


def test_a_chart_drawn_after_the_load_event_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    """The harness says a late chart was not drawn at ``load``, and ``chromium --headless
    --screenshot`` shows its box blank; a chart drawn while the page loads is in both."""
    page = late_page(tmp_path)
    result = chromium.open_page(page)
    assert result.chart("chart-steps").drawn == 2
    assert "chart 'chart-steps': nothing drawn at the load event" in result.problems()
    blank = screenshot_problems(chromium, page)
    assert len(blank) == 1 and blank[0].startswith("chart 'chart-steps': blank in the"), blank
    assert screenshot_problems(chromium, plotly_page(tmp_path, "at-once")) == []


def test_overlapping_text_and_odd_ticks_are_caught(chromium: Chromium, tmp_path: Path) -> None:
    """A legend laid over the axis labels and a tick step of 23.3 are each named; the same
    chart with its legend where plotly puts it and round ticks passes."""
    import plotly.graph_objects as go
    from plotly.offline import get_plotlyjs

    def page(name: str, **layout: Any) -> Path:
        fig = go.Figure(go.Bar(x=["a", "b", "c"], y=[10, 50, 90], name="forward"))
        fig.update_layout(title={"text": "Layers"}, showlegend=True, **layout)
        body = json.dumps(fig.to_plotly_json(), default=list)
        path = tmp_path / f"{name}.html"
        path.write_text(f"""<!doctype html><html><head><script>{get_plotlyjs()}</script></head>
<body><section id="layers"><h2>Layers</h2><div class="chart" id="chart-layers" data-points="3">
</div></section><script>const fig = {body};
Plotly.newPlot("chart-layers", fig.data, fig.layout)
  .then(() => {{ document.body.dataset.rendered = "true"; }});</script></body></html>""",
                        encoding="utf-8")  # fmt: skip
        return path

    over = {"x": 0.5, "xanchor": "center", "y": 0, "yanchor": "top"}  # on the x tick labels
    bad = chromium.open_page(page("bad", legend=over, yaxis={"tick0": 0, "dtick": 23.3}))
    problems = bad.problems()
    assert "chart 'chart-layers': x tick 'b' overlaps legend 'forward'" in problems, problems
    assert any("y ticks ['0', '23.3', '46.6', '69.9'" in p and "not round" in p
               for p in problems), problems  # fmt: skip
    assert chromium.open_page(page("good")).problems() == []


def test_a_number_wrapped_in_a_table_cell_is_caught(chromium: Chromium, tmp_path: Path) -> None:
    page = tmp_path / "wrap.html"
    page.write_text('<!doctype html><body><p>Run facts, and a table with a narrow column.</p>'
                    '<table><tr><td style="width:2em;max-width:2em">51.8 µs</td>'
                    '<td>12.3 ms</td></tr></table>'
                    '<script>document.body.dataset.rendered = "true"</script></body>',
                    encoding="utf-8")  # fmt: skip
    assert chromium.open_page(page).wrapped == ("51.8 µs",)


GZIP_CASES = {
    "text": b"forward backward optimizer " * 5000,
    "random": np.random.default_rng(1).integers(0, 256, 70_000, dtype=np.uint8).tobytes(),
    "short": b"conv1",
    "empty": b"",
}


def test_the_page_gunzip_reads_what_python_writes(chromium: Chromium, tmp_path: Path) -> None:
    """The page's synchronous gzip reader (render/page/inflate_js.py) gives back, byte for byte,
    what Python's gzip packed: stored blocks (level 0, incompressible data), fixed and
    dynamic Huffman blocks, long back-references, a header with a file name."""
    import base64
    import gzip
    import io

    from dlprof_lite.render.page.inflate_js import GUNZIP

    cases = {}
    for name, data in GZIP_CASES.items():
        for level in (0, 1, 6, 9):
            cases[f"{name}-{level}"] = gzip.compress(data, compresslevel=level, mtime=0)
    named = io.BytesIO()
    with gzip.GzipFile("layers.js", "wb", fileobj=named, mtime=0) as fh:
        fh.write(GZIP_CASES["text"])
    cases["text-named"] = named.getvalue()
    page = tmp_path / "gunzip.html"
    page.write_text(f"<!doctype html><body><script>{GUNZIP}</script>"
                    '<script>document.body.dataset.rendered = "true"</script></body>')  # fmt: skip

    def unpack(p: Any) -> dict[str, str]:
        packed = {k: base64.b64encode(v).decode() for k, v in cases.items()}
        return p.evaluate("""(packed) => Object.fromEntries(Object.entries(packed).map(([k, v]) => {
          const raw = atob(v), bytes = Uint8Array.from(raw, (c) => c.charCodeAt(0));
          const out = gunzip(bytes);
          return [k, btoa(Array.from(out, (b) => String.fromCharCode(b)).join(""))];
        }))""", packed)  # fmt: skip

    result = chromium.open_page(page, then=unpack)
    got: dict[str, str] = result.extra  # type: ignore[assignment]
    for key in cases:
        want = GZIP_CASES.get(key.rsplit("-", 1)[0], GZIP_CASES["text"])
        assert base64.b64decode(got[key]) == want, key


def test_png_decoder_against_known_pixels(chromium: Chromium, tmp_path: Path) -> None:
    """Chromium's own PNG of four coloured blocks of known size decodes to those colours."""
    page = tmp_path / "blocks.html"
    blocks = "".join(f'<div style="position:absolute;left:{x}px;top:0;width:100px;height:50px;'
                     f'background:{c}"></div>'
                     for x, c in ((0, "#ff0000"), (100, "#00ff00"), (200, "#0000ff"),
                                  (300, "#123456")))  # fmt: skip
    page.write_text(f'<!doctype html><body style="margin:0">{blocks}'
                    '<script>document.body.dataset.rendered = "true"</script></body>')  # fmt: skip
    image = decode_png(chromium.open_page(page, viewport={"width": 400, "height": 50}).screenshot)
    assert (image.width, image.height) == (400, 50)
    rgb = image.rgb()
    for x, want in ((50, (255, 0, 0)), (150, (0, 255, 0)), (250, (0, 0, 255)),
                    (350, (0x12, 0x34, 0x56))):  # fmt: skip
        assert np.all(rgb[:, x - 50 : x + 50] == want), (x, want)
    assert isinstance(image, Image)


# --- the product's pages ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lenet(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/lenet.py profiled for real once for this module (CPU: no kernels)."""
    out = tmp_path_factory.mktemp("lenet") / "lenet.dlprof"
    return profile_lenet(nsys, out, "--steps", "12")


def read_layer_table(page: Any) -> dict[str, Any]:
    """The layer table's layer names, then a numeric column's values as shown, after one
    header click and after a second (the page's own sorting)."""
    column = page.evaluate(LAYER_TABLE_COLUMN)
    if column < 0:
        return {"names": None}

    def values() -> list[float]:
        return [float(v) for v in page.evaluate(COLUMN_VALUES, column)]

    names = page.evaluate(COLUMN_TEXT, 1)
    header = page.locator("table#layer-table thead th").nth(column)
    header.click()
    first = values()
    header.click()
    return {"names": names, "first": first, "second": values()}


# The index of the layer table's forward wall column (-1 without one).
LAYER_TABLE_COLUMN = """() => [...document.querySelectorAll("table#layer-table thead th")]
  .findIndex((th) => th.textContent.trim().startsWith("fwd wall"))"""
COLUMN_VALUES = """(col) => [...document.querySelectorAll("table#layer-table tbody tr")]
  .map((tr) => parseFloat(tr.cells[col].dataset.sort))"""
COLUMN_TEXT = """(col) => [...document.querySelectorAll("table#layer-table tbody tr")]
  .map((tr) => tr.cells[col].textContent.trim())"""


def monotone(values: list[float]) -> str | None:
    """The order of the known values (an empty cell, NaN, sorts to one end: left out)."""
    values = [v for v in values if v == v]
    if values == sorted(values):
        return "ascending"
    return "descending" if values == sorted(values, reverse=True) else None


@pytest.mark.nsys
@pytest.mark.slow
def test_lenet_report_in_chromium(chromium: Chromium, lenet: Path) -> None:
    """The example's report.html, as the command line wrote it, shows every section its
    report has data for, each chart drawn with its data, no console error, no request; the
    layer table lists the report's layers in network order and sorts by a header click."""
    report = open_report(lenet)
    want = expected_sections(report)
    # Advice depends on the machine's load (data-loading share, step spread): data-driven.
    assert {"header", "steps", "layers", "cost", "memory", "iterations", "timeline"} <= set(
        want), want
    assert "kernels" not in want  # a CPU run: no GPU work, no kernels section
    result = chromium.open_page(written_page(lenet, "report.html"), then=read_layer_table)
    assert result.problems() == []
    assert result.size_bytes <= PAGE_LIMIT
    assert section_problems(result, want, REPORT_CHARTS) == []
    table = result.extra
    assert isinstance(table, dict)
    layers = report.layers.sort_values("order")
    assert table["names"] == [str(n) for n in layers["layer"]]
    # A folded layer (issue 25) has no forward range in the window: no value (NaN), which
    # sorts nowhere in particular, so the known values and the empty ones are compared apart.
    values = [float(v) for v in layers["step_forward_wall_ns"]]
    page = [float(v) for v in table["first"]]
    assert sorted(v for v in page if v == v) == pytest.approx(
        sorted(v for v in values if v == v), rel=1e-9)
    assert sum(v != v for v in page) == sum(v != v for v in values)
    # A click sorts by the column one way, the next click the other way.
    assert {monotone(table["first"]), monotone(table["second"])} == {"ascending", "descending"}
    assert screenshot_problems(chromium, result.path) == []


def save_figure(png: bytes, path: Path) -> None:
    """A screenshot written under 1 MB (the README's pictures are made by
    scripts/screenshots.py)."""
    assert len(png) < DOC_PNG_LIMIT, f"{path.name}: {len(png)} bytes"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(png)


@pytest.mark.parametrize("name", ["report.png", "report-cudf.png", "report-dlprof.png",
                                  "report-million.png", "compare.png"])  # fmt: skip
def test_committed_screenshots_are_pages_not_blanks(name: str) -> None:
    """The README's and docs/screenshots.md's figures (written by scripts/screenshots.py
    from real runs) are decodable, not blank and under 1 MB, and each is shown in the docs."""
    path = DOCS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: python scripts/screenshots.py")
    shown = (DOCS / "screenshots.md").read_text(encoding="utf-8")
    assert f"]({name})" in shown, f"docs/screenshots.md does not show {name}"
    data = path.read_bytes()
    assert len(data) < DOC_PNG_LIMIT
    image = decode_png(data)
    assert image.width >= 1000 and image.height >= 1500, (image.width, image.height)
    assert blank_reasons(image) == []


@pytest.mark.corpus
def test_export_without_module_ranges_shows_what_it_has(chromium: Chromium, corpus_dir: Path,
                                                         tmp_path: Path) -> None:  # fmt: skip
    """A corpus export with no ``fwd:``/``bwd:`` ranges, analysed by the command line: no
    layers section, and the sections it has data for all render."""
    # cuDF's own null_count range as the steps: named, since no guess takes a library's.
    dlprof(tmp_path, "analyze", str(corpus_dir / NO_MODULES), "-o", "cudf", "--quiet",
           "--key-range", "^null_count$")  # fmt: skip
    report = open_report(tmp_path / "cudf")
    assert rows(report.layers) == 0 and rows(report.iterations) > 0  # what makes it a case
    want = expected_sections(report)
    assert "layers" not in want and len(want) >= 4, want
    result = chromium.open_page(written_page(tmp_path / "cudf", "report.html"), then=log_axis)
    assert result.problems() == []
    assert section_problems(result, want, REPORT_CHARTS) == []
    assert screenshot_problems(chromium, result.path) == []
    # Its steps range from 1 µs to 216 ms: the outliers are cut off the linear axis (a note
    # names the highest); the log button shows every step.
    shown: dict[str, Any] = result.extra  # type: ignore[assignment]
    wall = report.iterations["wall_ns"].astype(float) / shown["ns"]
    assert shown["before"]["type"] == "linear" and shown["before"]["top"] < wall.max()
    assert shown["notes"][0].startswith("▲ iteration ")
    assert shown["after"]["type"] == "log"
    after = shown["after"]
    assert 10 ** after["top"] >= wall.max() and 10 ** after["bottom"] <= wall.min()


# The iterations chart's y axis (type, range) before and after a click on "log scale".
READ_AXIS = """() => {
  const gd = document.getElementById("chart-iterations");
  const y = gd._fullLayout.yaxis;
  return {type: y.type, bottom: y.range[0], top: y.range[1], ns: gd.layout.meta.ns,
          notes: (gd.layout.annotations || []).map((a) => a.text)};
}"""


def log_axis(page: Any) -> dict[str, Any]:
    before = page.evaluate(READ_AXIS)
    page.locator("#chart-iterations g.updatemenu-button", has_text="log scale").click()
    page.wait_for_function("() => document.getElementById('chart-iterations')"
                           "._fullLayout.yaxis.type === 'log'")  # fmt: skip
    after = page.evaluate(READ_AXIS)
    return {"before": before, "after": after, "ns": before["ns"], "notes": before["notes"]}


def test_a_short_run_and_many_long_layer_names(chromium: Chromium, tmp_path: Path) -> None:
    """The fixture's three iterations (integer ticks only, none on the corner where the
    axes meet) and 400 charted layers of long names (rotated, thinned by plotly, shortened
    but distinct): every check passes."""
    import pandas as pd

    from dlprof_lite.render.page.html import report_page
    from dlprof_lite.report.build import build_report
    from example_profiles import training_profile

    report = build_report(training_profile())
    short = tmp_path / "short.html"
    short.write_text(report_page(report), encoding="utf-8")
    base = report.layers.iloc[[1]]
    layers = pd.concat([base] * 500, ignore_index=True).assign(parent=None)
    layers["layer"] = [f"model.encoder.layers.{i}.self_attention.linear_qkv" for i in range(500)]
    layers["order"] = range(500)
    layers["step_forward_wall_ns"] = [float(i + 1) for i in range(500)]
    wide = tmp_path / "wide.html"
    wide.write_text(report_page(replace(report, layers=layers)), encoding="utf-8")
    for page in (short, wide):
        result = chromium.open_page(page)
        assert result.problems() == [], page.name
    labels = [t.text for t in result.chart("chart-layers").texts if t.kind == "x tick"]
    assert labels and all(len(t) <= 28 for t in labels), labels
    assert len(set(labels)) == len(labels)


@pytest.mark.corpus
def test_dlprof_export_page(chromium: Chromium, corpus_dir: Path, tmp_path: Path) -> None:
    """The DLProf corpus export (a PyTorch net profiled by NVIDIA's DLProf: pyprof-style
    ranges, cuDNN kernels, no iterations): every section it has data for renders, legible
    (the harness's text, tick and table checks) and in a plain Chromium screenshot."""
    dlprof(tmp_path, "analyze", str(corpus_dir / DLPROF_EXPORT), "-o", "dlprof", "--quiet")
    report = open_report(tmp_path / "dlprof")
    want = expected_sections(report)
    assert {"layers", "kernels", "timeline"} <= set(want), want
    result = chromium.open_page(written_page(tmp_path / "dlprof", "report.html"))
    assert result.problems() == []
    assert section_problems(result, want, REPORT_CHARTS) == []
    assert screenshot_problems(chromium, result.path) == []


def open_first_layer_kernels(page: Any) -> dict[str, Any]:
    """Open the first layer row's ``<details>`` (its kernels) by a click, as a person would."""
    details = page.locator("table#layer-table details").first
    details.locator("summary").click()
    return {
        "open": details.evaluate("(d) => d.open"),
        "kernels": details.locator("li").all_inner_texts(),
        "rows": page.locator("table#layer-table tbody tr").count(),
        "details": page.locator("table#layer-table details").count(),
    }


@pytest.mark.slow
def test_million_kernel_page(chromium: Chromium, tmp_path: Path) -> None:
    """The 1M-kernel generated profile: a page of at most 5 MB (aggregates, not events) that
    renders every section without an error; each layer row's kernels open on a click. Render
    time is measured by scripts/bench_html.py, not here."""
    export = tmp_path / "million.sqlite"
    truth = make_profile(export, iterations=-(-MILLION // KERNELS_PER_ITERATION), layers=8,
                         kernels_per_layer=12, seed=5)  # fmt: skip
    assert truth.totals["kernels"] >= MILLION
    dlprof(tmp_path, "analyze", str(export), "-o", "million", "--quiet")
    report = open_report(tmp_path / "million")
    assert report.summary["kernel_count"] == truth.totals["kernels"]
    page = written_page(tmp_path / "million", "report.html")
    assert page.stat().st_size <= PAGE_LIMIT, page.stat().st_size
    result = chromium.open_page(page, then=open_first_layer_kernels)
    assert result.problems() == []
    assert screenshot_problems(chromium, page) == []
    want = expected_sections(report)
    # A one-process GPU training profile has every section but the ranks', the cost's and
    # the memory's (the generated export holds no FLOP count or tensor bytes: no annotation
    # ran).
    assert want == [s for s in REPORT_SECTIONS if s not in ("ranks", "cost", "memory")], want
    assert section_problems(result, want, REPORT_CHARTS) == []
    # Every event the timeline chart holds is drawn as its own bar, none lost in the browser.
    timeline = result.chart("chart-timeline")
    assert timeline.drawn == timeline.points, timeline
    shown = result.extra
    assert isinstance(shown, dict) and shown["open"] is True
    assert shown["rows"] == len(report.layers) and shown["details"] >= 1
    # The first layer (network order) with kernels: its top kernels, as layers.csv has them.
    layers = report.layers.sort_values("order")
    top = next(t for t in layers["top_kernels"] if isinstance(t, str) and t)
    assert shown["kernels"] == top.split("; ")


def encode_png(pixels: np.ndarray, filters: list[int]) -> bytes:
    """An RGB PNG with the given filter type per row, written from the PNG specification's
    forward filters (the decoder undoes them): the decoder's oracle for every filter."""
    height, width, bpp = pixels.shape
    data = pixels.reshape(height, width * bpp).astype(np.int64)
    out = bytearray()
    for y, kind in enumerate(filters):
        cur, up = data[y], data[y - 1] if y else np.zeros_like(data[0])
        left = np.concatenate([np.zeros(bpp, np.int64), cur[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int64), up[:-bpp]])
        p = left + up - upleft
        pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
        pred = [0 * cur, left, up, (left + up) // 2, paeth][kind]
        out += bytes([kind]) + bytes(((cur - pred) % 256).astype(np.uint8))

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(bytes(out))) + chunk(b"IEND", b""))  # fmt: skip


def test_png_decoder_undoes_every_filter() -> None:
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, size=(10, 13, 3), dtype=np.uint8)
    filters = [0, 1, 2, 3, 4, 4, 3, 2, 1, 0]
    assert np.array_equal(decode_png(encode_png(pixels, filters)).pixels, pixels)
    flat = np.full((40, 40, 3), 255, dtype=np.uint8)
    assert len(blank_reasons(decode_png(encode_png(flat, [1] * 40)))) == 3


def test_several_ranks_page_draws_the_ranks(chromium: Chromium, tmp_path: Path) -> None:
    """A generated 2-process profile: the all-ranks page has a ranks section whose chart
    draws one bar per part and rank, and a table row per rank."""
    export = tmp_path / "two.sqlite"
    make_profile(export, iterations=12, layers=3, kernels_per_layer=2, processes=2, seed=3)
    dlprof(tmp_path, "analyze", str(export), "-o", "two", "--quiet")
    report = open_report(tmp_path / "two")
    assert len(report.ranks) == 2
    result = chromium.open_page(written_page(tmp_path / "two", "report.html"))
    assert result.problems() == []
    want = expected_sections(report)
    assert "ranks" in want
    assert section_problems(result, want, REPORT_CHARTS) == []
    chart = result.chart("chart-ranks")
    assert chart.points == 4 * 2 and chart.drawn >= 2  # 4 parts x 2 ranks (zero bars drawn flat)
