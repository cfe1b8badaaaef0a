"""Headless Chromium for the page tests: open a page from disk with the network cut off and
report what a person would have seen.

Debian's ``chromium`` (``scripts/setup.sh`` installs it; ``DLPROF_CHROMIUM`` names another
binary) is driven by the ``playwright`` package, used only as a driver: never its downloaded
browsers. Without either, a test skips with the reason; under ``CI=true`` it fails
(``conftest.missing``).

A test module takes the fixture with ``from browser import chromium_fixture  # noqa: F401``
(registered under the name ``chromium``) and calls ``chromium.open_page(path)``. The page is
loaded from ``file://``; every request beyond the page itself and inline ``data:``/``blob:``/
``about:`` URLs is recorded and aborted: a page that asks the network, or for any other file
(a page must be one self-contained file), shows it in :attr:`PageResult.requests` and fails
:meth:`PageResult.problems`. The page is done when it sets
``document.body.dataset.rendered = "true"`` (or ``dataset.error``), the contract of issue
#15's pages; then its charts, sections and a full-page screenshot are read.

The screenshot is checked with our own PNG decoder (zlib + struct + numpy, no imaging
library): :func:`decode_png` and :func:`blank_reasons`.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import missing

RENDER_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 900}
INLINE_SCHEMES = ("data:", "blob:", "about:")

# Plotly's SVG data elements, by trace type; a path Plotly hides (a zero-size bar, a point
# off the axes) has an empty path or "M0,0Z" and is not counted.
DRAWN_SELECTOR = ", ".join([
    ".trace path.point",  # scatter markers, box outliers
    ".trace.bars path",  # bars (also horizontal: a timeline drawn as bars)
    ".scatterlayer path.js-line",  # lines
    ".scatterlayer path.js-fill",  # filled areas
    ".boxlayer path.box",  # box plots
    ".trace path.surface",  # pie slices
    ".heatmaplayer image",  # heatmaps
])  # fmt: skip

# In the page, before any of its scripts: ``__drawn(el)`` counts the data elements drawn in
# ``el``; the time (ms after navigation start) at which the page sets body.dataset.rendered
# or .error, seen by a MutationObserver, so a render time is the page's own clock rather than
# the driver's polling interval; and each chart's drawn elements at the ``load`` event, what
# a screenshot, a print or ``chromium --screenshot`` taken then shows.
RENDER_CLOCK = """
window.__drawn = (el) => [...el.querySelectorAll(SELECTOR)].filter((e) => {
  if (e.tagName === "image") return true;
  const d = e.getAttribute("d") || "";
  return d !== "" && d !== "M0,0Z" && !d.includes("NaN");
}).length;
new MutationObserver(() => {
  const b = document.body;
  if (b && (b.dataset.rendered === "true" || b.dataset.error) && !window.__doneAt) {
    window.__doneAt = performance.now();
  }
}).observe(document, {attributes: true, subtree: true,
                      attributeFilter: ["data-rendered", "data-error"]});
window.addEventListener("load", () => {
  window.__atLoad = Object.fromEntries([...document.querySelectorAll("div.chart")]
    .map((el) => [el.id, window.__drawn(el)]));
});
""".replace("SELECTOR", json.dumps(DRAWN_SELECTOR))

DONE = """() => document.body
  && (document.body.dataset.rendered === "true" || !!document.body.dataset.error)"""

READ_PAGE = """
() => {
  // Every piece of text Plotly drew in a chart (titles, axis and tick labels, legend, notes,
  // buttons, text on bars), hover labels left out: what it says, what it is, where it is.
  const kinds = [["g.legend", "legend"], ["g.updatemenu-container", "button"],
                 ["g.annotation", "annotation"], ["g.xtick", "x tick"], ["g.ytick", "y tick"],
                 ["g.y2tick", "y2 tick"], ["text.gtitle", "title"], ["text.xtitle", "x title"],
                 ["text.ytitle", "y title"], ["text.y2title", "y2 title"],
                 [".bartext", "bar text"], [".shapelayer", "shape label"]];
  const chartTexts = (el) => [...el.querySelectorAll("svg text")].flatMap((t) => {
    if (t.closest(".hoverlayer")) return [];
    const b = t.getBoundingClientRect();
    const words = t.textContent.trim();
    if (!words || b.width < 1 || b.height < 1) return [];
    const kind = (kinds.find(([sel]) => t.matches(sel) || t.closest(sel)) || [0, "text"])[1];
    return [{text: words, kind, box: [b.left, b.top, b.right, b.bottom]}];
  });
  // Table cells holding a number (and its unit) shown on more than one line.
  const wrappedNumbers = () => [...document.querySelectorAll("table td")].flatMap((td) => {
    const words = td.textContent.trim();
    if (td.children.length || !/^[-+\\u2212]?\\d[\\d.,]*( ?[^\\s\\d]+)?$/.test(words)) return [];
    const range = document.createRange();
    range.selectNodeContents(td);
    const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
    return lines > 1 ? [words] : [];
  });
  const drawn = window.__drawn;
  const atLoad = window.__atLoad || {};
  const charts = [...document.querySelectorAll("div.chart")].map((el) => {
    const box = el.getBoundingClientRect();
    const section = el.closest("section");
    return {id: el.id, points: el.dataset.points ?? null, drawn: drawn(el),
            atLoad: atLoad[el.id] ?? 0, texts: chartTexts(el),
            section: section ? section.id : null,
            traces: (el._fullData || []).length, plotly: el.classList.contains("js-plotly-plot"),
            width: box.width, height: box.height,
            left: box.left + window.scrollX, top: box.top + window.scrollY};
  });
  const sections = [...document.querySelectorAll("section[id]")].map((s) => {
    const h2 = s.querySelector("h2");
    return {id: s.id, title: h2 ? h2.textContent.trim() : null,
            height: s.getBoundingClientRect().height};
  });
  return {charts, sections, wrapped: wrappedNumbers(),
          pageHeight: document.documentElement.scrollHeight,
          rendered: document.body.dataset.rendered === "true",
          error: document.body.dataset.error || null, doneAt: window.__doneAt ?? null};
}
"""


@dataclass(frozen=True)
class Chart:
    """One ``div.chart``: ``points`` is its ``data-points`` attribute (None when absent or not
    a whole number), ``drawn`` the SVG data elements Plotly drew in it, ``traces`` the traces
    Plotly holds for it, ``plotly`` whether Plotly rendered into it at all; ``drawn_at_load``
    the data elements drawn at the page's ``load`` event (what a screenshot taken then shows),
    ``texts`` every piece of text drawn in it."""

    id: str
    points: int | None
    drawn: int
    traces: int
    plotly: bool
    width: float
    height: float
    section: str | None  # the id of the <section> holding it
    drawn_at_load: int = 0
    texts: tuple[Text, ...] = ()
    left: float = 0.0  # its box on the page (CSS px from the page's top left corner)
    top: float = 0.0

    def problems(self) -> list[str]:
        found = []
        if self.points is None or self.points <= 0:
            found.append(f"chart {self.id!r}: data-points is {self.points}, want > 0")
        if not self.plotly or self.drawn <= 0:
            found.append(f"chart {self.id!r}: nothing drawn ({self.drawn} data elements)")
        elif self.drawn_at_load <= 0:
            found.append(f"chart {self.id!r}: nothing drawn at the load event")
        if self.width <= 0 or self.height <= 0:
            found.append(f"chart {self.id!r}: no size ({self.width} x {self.height})")
        found += [f"chart {self.id!r}: {p}" for p in overlaps(self.texts) + odd_ticks(self.texts)]
        return found


@dataclass(frozen=True)
class Text:
    """A piece of text drawn in a chart: its words, what it is (``x tick``, ``legend``,
    ``title``, ...) and its box on the page (left, top, right, bottom) in CSS px."""

    text: str
    kind: str
    box: tuple[float, float, float, float]


OVERLAP_PX = 1.0  # two boxes sharing less than this in either direction only touch


def overlaps(texts: Sequence[Text]) -> list[str]:
    """Every pair of texts whose boxes overlap, one sentence each."""
    found = []
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            wide = min(a.box[2], b.box[2]) - max(a.box[0], b.box[0])
            high = min(a.box[3], b.box[3]) - max(a.box[1], b.box[1])
            if wide > OVERLAP_PX and high > OVERLAP_PX:
                found.append(f"{a.kind} {a.text!r} overlaps {b.kind} {b.text!r}")
    return found


ROUND_STEPS = (1.0, 2.0, 2.5, 5.0)  # a round tick step is one of these times a power of ten
SI = {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "µ": 1e-6, "μ": 1e-6}


def tick_value(label: str) -> float | None:
    """A numeric tick label as plotly writes it (``1.5k``, ``−2``, ``25%``), else None."""
    text = label.replace("\u2212", "-").replace(",", "").rstrip("%").strip()
    scale = SI.get(text[-1:], 1.0) if text else 1.0
    try:
        return float(text[:-1] if scale != 1.0 else text) * scale
    except ValueError:
        return None


def odd_ticks(texts: Sequence[Text]) -> list[str]:
    """Numeric axes whose tick step is not round (``23.3, 46.6, 69.9``)."""
    found = []
    for kind in ("x tick", "y tick", "y2 tick"):
        labels = [t.text for t in texts if t.kind == kind]
        values = [tick_value(t) for t in labels]
        if len(values) < 3 or any(v is None for v in values):
            continue
        steps = np.diff(np.sort(np.asarray(values, dtype=float)))
        step = float(np.median(steps))
        if step <= 0:
            continue
        mantissa = step / 10 ** np.floor(np.log10(step))
        if not any(abs(mantissa - r) < 1e-6 * r for r in (*ROUND_STEPS, 10.0)):
            found.append(f"{kind}s {labels} are not round (step {step:g})")
    return found


@dataclass(frozen=True)
class Section:
    id: str
    title: str | None  # its <h2>
    height: float


@dataclass(frozen=True)
class PageResult:
    """What a page did in Chromium. ``error``: the page's ``dataset.error`` or the harness's
        own line (a time-out); ``console_errors``: console.error messages and uncaught
        exceptions; ``requests``: every URL the page asked for beyond itself and inline data
    (remote ones were aborted); ``failed``: the requests that did not complete;
        ``render_ms``: navigation start to the rendered (or error) flag, the page's clock."""

    path: Path
    size_bytes: int
    rendered: bool
    error: str | None
    console_errors: tuple[str, ...]
    requests: tuple[str, ...]
    failed: tuple[str, ...]
    charts: tuple[Chart, ...]
    sections: tuple[Section, ...]
    screenshot: bytes
    render_ms: float | None
    extra: object = None
    wrapped: tuple[str, ...] = ()  # table cells whose number is shown on several lines
    page_height: int = 0  # CSS px

    @property
    def section_ids(self) -> list[str]:
        return [s.id for s in self.sections]

    def chart(self, chart_id: str) -> Chart:
        found = [c for c in self.charts if c.id == chart_id]
        if not found:
            raise AssertionError(f"no chart {chart_id!r} (charts: {[c.id for c in self.charts]})")
        return found[0]

    def problems(self) -> list[str]:
        """Every way the page failed the contract, one sentence each (empty: it passed)."""
        found = [] if self.rendered else ["the page never set body.dataset.rendered"]
        if self.error:
            found.append(f"page error: {self.error}")
        found += [f"console error: {m}" for m in self.console_errors]
        found += [f"network request: {u}" for u in self.requests]
        for chart in self.charts:
            found += chart.problems()
        found += [f"table cell {w!r} wraps inside its number" for w in self.wrapped]
        found += [f"section {s.id!r} has no <h2>" for s in self.sections if not s.title]
        found += [f"section {s.id!r} is empty (0 px high)" for s in self.sections if s.height <= 0]
        found += [f"screenshot: {r}" for r in blank_reasons(decode_png(self.screenshot))]
        return found


class Chromium:
    """One headless Chromium; each :meth:`open_page` gets a fresh context (no cache, no
    storage shared between pages)."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser

    def open_page(self, path: str | Path, *, timeout_ms: int = RENDER_TIMEOUT_MS,
                  viewport: dict[str, int] | None = None,
                  then: Callable[[Any], object] | None = None) -> PageResult:  # fmt: skip
        """Open ``path`` and read it once done (see the module docstring). ``then``: called
        with the Playwright page after that (clicks, reads); its result is ``extra``."""
        path = Path(path).resolve()
        own = path.as_uri()
        context = self.browser.new_context(viewport=viewport or VIEWPORT,
                                           service_workers="block")  # fmt: skip
        requests: list[str] = []
        console: list[str] = []
        failed: list[str] = []

        def block(route: Any) -> None:
            url = route.request.url
            if url == own or url.startswith(INLINE_SCHEMES):
                route.continue_()
            else:
                requests.append(url)
                route.abort()

        context.route("**/*", block)
        page = context.new_page()
        # Also noted here: a request the route does not see (a file:// one, say).
        page.on("request", lambda r: _note(r.url, own, requests))
        page.on("websocket", lambda ws: _note(ws.url, own, requests))
        page.on("requestfailed", lambda r: failed.append(r.url))
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: console.append(f"uncaught: {e}"))
        page.add_init_script(RENDER_CLOCK)
        try:
            page.goto(path.as_uri(), wait_until="load", timeout=timeout_ms)
            timed_out = _wait_done(page, timeout_ms)
            state = page.evaluate(READ_PAGE)
            shot = page.screenshot(full_page=True, type="png")
            extra = then(page) if then is not None else None
        finally:
            context.close()
        return PageResult(
            path=path,
            size_bytes=path.stat().st_size,
            rendered=bool(state["rendered"]),
            error=timed_out or state["error"],
            console_errors=tuple(console),
            requests=tuple(dict.fromkeys(requests)),
            failed=tuple(dict.fromkeys(failed)),
            charts=tuple(_chart(c) for c in state["charts"]),
            sections=tuple(Section(s["id"], s["title"], s["height"]) for s in state["sections"]),
            screenshot=shot,
            render_ms=state["doneAt"],
            extra=extra,
            wrapped=tuple(state["wrapped"]),
            page_height=int(state["pageHeight"]),
        )


def _note(url: str, own: str, requests: list[str]) -> None:
    if url != own and not url.startswith(INLINE_SCHEMES):
        requests.append(url)


def _wait_done(page: Any, timeout_ms: int) -> str | None:
    """None when the page set its flag in time, else the harness's error line."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start = time.perf_counter()
    try:
        page.wait_for_function(DONE, timeout=timeout_ms, polling=50)
    except PlaywrightTimeout:
        return f"neither rendered nor error after {time.perf_counter() - start:.1f} s"
    return None


def _chart(raw: dict[str, Any]) -> Chart:
    text = raw["points"]
    points = int(text) if isinstance(text, str) and text.strip().isdigit() else None
    texts = tuple(Text(t["text"], t["kind"], tuple(t["box"])) for t in raw["texts"])
    return Chart(raw["id"], points, int(raw["drawn"]), int(raw["traces"]), bool(raw["plotly"]),
                 float(raw["width"]), float(raw["height"]), raw["section"],
                 int(raw["atLoad"]), texts, float(raw["left"]), float(raw["top"]))  # fmt: skip


def chromium_path() -> str | None:
    """``DLPROF_CHROMIUM``, else Debian's ``chromium`` on PATH."""
    named = os.environ.get("DLPROF_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


# The one driver and browser of this pytest process. Each test module imports the fixture,
# so pytest holds one copy per module, but Playwright allows one sync driver per thread:
# every copy shares these, and the first copy set up closes them when the session ends.
_RUNNING: list[Chromium] = []


@pytest.fixture(scope="session", name="chromium")
def chromium_fixture() -> Iterator[Chromium]:
    """The session's headless Chromium (skip, or fail under CI, without one)."""
    if _RUNNING:
        yield _RUNNING[0]
        return
    exe = chromium_path()
    if exe is None:
        missing("no Chromium (Debian: apt-get install chromium; or set DLPROF_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as driver:
        # --no-sandbox: the test may run as root in a container, where the sandbox cannot start.
        browser = driver.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        _RUNNING.append(Chromium(browser))
        try:
            yield _RUNNING[0]
        finally:
            _RUNNING.clear()
            browser.close()


# --- chromium --headless --screenshot: what a user's own screenshot shows ---------------


def cli_screenshot(path: Path, width: int, height: int) -> Image:
    """``chromium --headless --screenshot`` of ``path`` at its default budget (no
    ``--virtual-time-budget``: the picture is taken once the page has loaded), in a window
    ``width`` x ``height`` CSS px, decoded."""
    exe = chromium_path()
    if exe is None:
        missing("no Chromium (Debian: apt-get install chromium; or set DLPROF_CHROMIUM)")
        raise AssertionError("unreachable")
    shot = path.with_name(path.name + ".cli.png")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--screenshot={shot}", f"--window-size={width},{height}",
           path.resolve().as_uri()]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    return decode_png(shot.read_bytes())


CHART_MIN_INK = 0.02  # of a chart's box: a drawn chart has axes, labels and data
CHART_MIN_COLOURS = 16


def blank_charts(image: Image, charts: tuple[Chart, ...]) -> list[str]:
    """The charts whose box in ``image`` (a screenshot of the page at the same width) holds
    too little: white where plotly had not drawn yet."""
    rgb = image.rgb()
    found = []
    for c in charts:
        x0, y0 = int(c.left), int(c.top)
        box = rgb[y0 : y0 + int(c.height), x0 : x0 + int(c.width)]
        if box.size == 0:
            found.append(f"chart {c.id!r}: outside the screenshot")
            continue
        ink = float((box.min(axis=2) < 245).mean())
        wide = box.reshape(-1, 3).astype(np.uint32)
        colours = len(np.unique((wide[:, 0] << 16) | (wide[:, 1] << 8) | wide[:, 2]))
        if ink < CHART_MIN_INK or colours < CHART_MIN_COLOURS:
            found.append(f"chart {c.id!r}: blank in the screenshot ({ink:.1%} ink, "
                         f"{colours} colours)")  # fmt: skip
    return found


def screenshot_problems(chromium: Chromium, page: Path) -> list[str]:
    """Why ``chromium --headless --screenshot`` of ``page`` (the whole page in one window)
    misses a chart: each chart's box, found by the driver at the same width, must be drawn."""
    result = chromium.open_page(page)
    image = cli_screenshot(page, VIEWPORT["width"], result.page_height + 50)
    return blank_charts(image, result.charts)


# --- the pages of issue #15 ---------------------------------------------------------------

# Report page sections in page order, and the chart each one draws (contract, issue #15).
REPORT_SECTIONS = ("header", "steps", "idle", "critical", "layers", "cost", "memory",
                   "iterations", "kernels", "ranks", "advice", "timeline")  # fmt: skip
# Charts a section draws besides its own when it has the data: chart id -> section (the
# ranks section's who-waits-for-whom matrix, with recorded or matched collectives).
OPTIONAL_CHARTS = {"chart-ranks-waits": "ranks"}
REPORT_CHARTS = {"steps": "chart-steps", "idle": "chart-idle", "critical": "chart-critical",
                 "layers": "chart-layers",
                 "cost": "chart-cost", "memory": "chart-memory",
                 "iterations": "chart-iterations", "kernels": "chart-kernels",
                 "ranks": "chart-ranks", "timeline": "chart-timeline"}  # fmt: skip


def dlprof(cwd: Path, *args: str) -> None:
    """The command line, as a user runs it in ``cwd``; it must succeed."""
    cmd = [sys.executable, "-m", "dlprof_lite", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def profile_lenet(nsys: str, out: Path, *script_args: str) -> Path:
    """examples/lenet.py profiled for real by the command line into ``out``."""
    script = Path(__file__).resolve().parents[1] / "examples" / "lenet.py"
    dlprof(out.parent, "--quiet", "--nsys", nsys, "-o", out.name, "--", sys.executable,
           str(script), *script_args)  # fmt: skip
    return out


def written_page(folder: Path, name: str) -> Path:
    """The page the command line wrote into ``folder`` (report.html, compare.html)."""
    page = folder / name
    assert page.is_file(), f"the command line wrote no {name} in {folder}"
    return page


def rows(frame: Any) -> int:
    return 0 if frame is None else len(frame)


def _has_cost(layers: Any) -> bool:
    """A layer below a root with counted FLOPs and time per step (the cost chart's points)."""
    if rows(layers) == 0 or "step_flops" not in layers.columns:
        return False
    import pandas as pd

    time = sum(pd.to_numeric(layers[f"step_{d}_{v}_ns"], errors="coerce").fillna(0)
               for d in ("forward", "backward") for v in ("wall", "gpu"))  # fmt: skip
    flops = pd.to_numeric(layers["step_flops"], errors="coerce")
    return bool(((flops > 0) & (time > 0) & layers["parent"].notna()).any())


def _has_memory(layers: Any) -> bool:
    """A layer holding bytes of its own (the memory chart's bars)."""
    if rows(layers) == 0 or "param_bytes" not in layers.columns:
        return False
    import pandas as pd

    columns = ["param_bytes", "gradient_bytes", "optimizer_bytes", "saved_bytes"]
    own = layers[columns].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)
    return bool((own > 0).any())


def _has_idle(report: Any) -> bool:
    """An analysed step (in the window, not warm-up) with time of some cause: the GPU's idle
    causes (idle_*_ns) on a run with GPU work, the main thread's (host_*_ns) on a CPU run."""
    it, t = report.iterations, report.summary.totals
    if rows(it) == 0 or "in_window" not in it.columns:
        return False
    from dlprof_lite.rules.idle import DEVICE, DEVICE_CAUSES, HOST, HOST_CAUSES, cause_column

    gpu = any((c or 0) > 0 for c in (t.kernel_count, t.memcpy_count, t.memset_count))
    kind, causes = (DEVICE, DEVICE_CAUSES) if gpu else (HOST, HOST_CAUSES)
    columns = [cause_column(kind, c) for c in causes if cause_column(kind, c) in it.columns]
    steps = it[it["in_window"].astype(bool) & ~it["warmup"].astype(bool)]
    return bool(columns) and bool((steps[columns].fillna(0).to_numpy(float) > 0).any())


def expected_sections(report: Any) -> list[str]:
    """The report page's sections for ``report``, from its own tables: a section per table
    with rows (kernels only with GPU work), the step breakdown with analysed steps, the idle
    chart with analysed steps that have time of some cause."""
    s = report.summary
    has = {
        "header": True,
        "steps": (s.window.iterations_analysed or 0) > 0,
        "idle": _has_idle(report),
        "critical": rows(getattr(report, "critical", None)) > 0,
        "layers": rows(report.layers) > 0,
        "cost": _has_cost(report.layers),
        "memory": _has_memory(report.layers),
        "iterations": rows(report.iterations) > 0,
        "kernels": rows(report.kernels) > 0 and (s.totals.kernel_count or 0) > 0,
        "ranks": rows(getattr(report, "ranks", None)) >= 2,  # several ranks only
        "advice": rows(report.advice) > 0,
        "timeline": rows(getattr(report, "timeline", None)) > 0,
    }
    return [name for name in REPORT_SECTIONS if has[name]]


def section_problems(result: PageResult, want: list[str], charts: dict[str, str]) -> list[str]:
    """How the page's sections and charts differ from ``want`` (ids, in order) and the chart
    each of them must draw (``charts``: section id -> chart id)."""
    found = []
    if result.section_ids != want:
        found.append(f"sections {result.section_ids}, want {want}")
    want_charts = {charts[sid]: sid for sid in want if sid in charts}
    got_charts = {c.id: c.section for c in result.charts
                  if OPTIONAL_CHARTS.get(c.id) != c.section}  # fmt: skip
    if got_charts != want_charts:
        found.append(f"charts (chart: section) {got_charts}, want {want_charts}")
    return found


# --- the screenshot ---------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """Decoded pixels, shape (height, width, channels), uint8; channels 1-4 as in the PNG."""

    pixels: np.ndarray

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    def rgb(self) -> np.ndarray:
        p = self.pixels
        return p[..., :3] if p.shape[2] >= 3 else np.repeat(p[..., :1], 3, axis=2)


CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG colour type -> samples per pixel


def decode_png(data: bytes) -> Image:
    """Decode an 8-bit, non-interlaced greyscale/RGB(A) PNG (what Chromium writes)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, header, idat = 8, b"", bytearray()
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, "
                         f"interlace {interlace}")  # fmt: skip
    bpp = CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(bytes(idat)), dtype=np.uint8)
    rows = raw.reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(height):
        prev = out[y] = _unfilter(int(rows[y, 0]), rows[y, 1:], prev, bpp)
    return Image(out.reshape(height, width, bpp))


def _unfilter(kind: int, line: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    """One scanline's PNG filter undone (RFC 2083 §6): None, Sub and Up vectorised; Average
    and Paeth depend on the byte just decoded, so they run per pixel."""
    if kind == 0:
        return line
    if kind == 2:
        up: np.ndarray = line + prev  # uint8 wraps modulo 256, as the filter's arithmetic
        return up
    if kind == 1:  # running sums per channel, modulo 256
        sums = np.cumsum(line.reshape(-1, bpp).astype(np.int64), axis=0)
        return (sums & 0xFF).astype(np.uint8).reshape(-1)
    cur = line.astype(np.int32)
    up = prev.astype(np.int32)
    for i in range(len(cur)):
        left = int(cur[i - bpp]) if i >= bpp else 0
        if kind == 3:
            cur[i] = (cur[i] + (left + int(up[i])) // 2) & 0xFF
            continue
        upleft = int(up[i - bpp]) if i >= bpp else 0
        p = left + int(up[i]) - upleft
        pa, pb, pc = abs(p - left), abs(p - int(up[i])), abs(p - upleft)
        pred = left if pa <= pb and pa <= pc else int(up[i]) if pb <= pc else upleft
        cur[i] = (cur[i] + pred) & 0xFF
    return cur.astype(np.uint8)


BAND_PX = 200  # the page is judged in horizontal bands of this height
MIN_COLOURS = 64  # text anti-aliasing alone gives dozens; charts give hundreds
MIN_INK_SHARE = 0.03  # of all pixels, not (near) white
MIN_INKED_BANDS = 0.8  # share of bands with some ink: no blank stretch down the page


def blank_reasons(image: Image) -> list[str]:
    """Why a screenshot looks blank or partly blank (empty: it does not): too few distinct
    colours, too little that is not white, or too many bands with nothing between the page's
    first and last marks (a section that drew nothing leaves such a stretch)."""
    rgb = image.rgb()
    wide = rgb.astype(np.uint32)
    packed = (wide[..., 0] << 16) | (wide[..., 1] << 8) | wide[..., 2]
    colours = len(np.unique(packed))
    ink = rgb.min(axis=2) < 245
    # Bands between the first and the last inked row: white below a short page is no fault.
    rows = np.flatnonzero(ink.any(axis=1))
    top, bottom = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, image.height)
    bands = [ink[y : min(y + BAND_PX, bottom)].mean() > 0.002 for y in range(top, bottom, BAND_PX)]
    found = []
    if colours < MIN_COLOURS:
        found.append(f"{colours} distinct colours (want >= {MIN_COLOURS})")
    if ink.mean() < MIN_INK_SHARE:
        found.append(f"{ink.mean():.1%} of pixels not white (want >= {MIN_INK_SHARE:.0%})")
    if np.mean(bands) < MIN_INKED_BANDS:
        found.append(f"{sum(bands)} of {len(bands)} {BAND_PX}-px bands hold anything "
                     f"(want >= {MIN_INKED_BANDS:.0%})")  # fmt: skip
    return found
