"""Benchmark: report.html of a 1M-kernel generated profile, its size and its render time in
headless Chromium (issue 15: <= 5 MB, renders in <= 3 s).

Not a test: it prints figures measured in one run. It makes (or reuses, ``--dir``) a
synthetic export with ``make_profile.py``, analyses it, builds the page with
``report_page``, then opens it ``--repeats`` times from ``file://`` in Debian's Chromium
(the page tests' harness, tests/browser.py: network blocked, fresh browser context each
time). Render time is the page's own clock: navigation start to the moment the page sets
``body.dataset.rendered`` (every chart drawn), so it includes reading the file, inflating
plotly.js and drawing every chart.

    python scripts/bench_html.py                    # 1M kernels, 5 opens
    python scripts/bench_html.py --per-kernel-ranges   # 1M kernels, ~1.35M ranges
    python scripts/bench_html.py --kernels 200000 --repeats 3 --dir /tmp/bench-html
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

from browser import Chromium, chromium_path  # noqa: E402
from make_profile import make_profile  # noqa: E402

# scripts/bench.py's shapes: 8 layers x 12 kernels without per-kernel ranges, 32 x 3 with
SHAPES = {False: (8, 12), True: (32, 3)}
TARGET_MB, TARGET_S = 5.0, 3.0


def build_page(folder: Path, kernels: int, ranges: bool) -> tuple[Path, dict[str, float]]:
    """The export (made once per case and kept in ``folder``) and its report.html."""
    from dlprof_lite import analyze
    from dlprof_lite.render.page.html import report_page

    times: dict[str, float] = {}
    layers, per_layer = SHAPES[ranges]
    per_iteration = 2 * layers * per_layer + max(1, layers // 4)  # + optimizer kernels
    name = f"bench-{kernels}{'-ranges' if ranges else ''}"
    export = folder / f"{name}.sqlite"
    if not export.is_file():
        start = time.perf_counter()
        make_profile(export, iterations=max(2, -(-kernels // per_iteration)), layers=layers,
                     kernels_per_layer=per_layer, per_kernel_ranges=ranges, seed=5)  # fmt: skip
        times["generate_s"] = time.perf_counter() - start
    start = time.perf_counter()
    report = analyze(export)
    times["analyze_s"] = time.perf_counter() - start
    start = time.perf_counter()
    html = report_page(report)
    times["page_s"] = time.perf_counter() - start
    page = folder / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    times["kernels"] = report.summary.totals.kernel_count or 0.0
    return page, times


def measure(page: Path, repeats: int) -> tuple[list[float], list[str]]:
    """Render times (ms, the page's clock) of ``repeats`` opens and the first open's problems."""
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise SystemExit("bench_html: no Chromium (apt-get install chromium, or DLPROF_CHROMIUM)")
    renders: list[float] = []
    problems: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            chromium = Chromium(browser)
            for i in range(repeats):
                result = chromium.open_page(page)
                if i == 0:
                    problems = result.problems()
                if result.render_ms is None or not result.rendered:
                    raise SystemExit(f"bench_html: the page did not render: {result.problems()}")
                renders.append(result.render_ms)
        finally:
            browser.close()
    return renders, problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-kernel-ranges", action="store_true",
                        help="one emit_nvtx-style range per kernel (32 layers x 3 kernels)")
    parser.add_argument("--dir", type=Path, help="keep the export and page here (reused)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        page, times = build_page(folder, args.kernels, args.per_kernel_ranges)
        size_mb = page.stat().st_size / 1e6
        renders, problems = measure(page, args.repeats)
    print(f"kernels            {int(times['kernels']):,}")
    for key in ("generate_s", "analyze_s", "page_s"):
        if key in times:
            print(f"{key:<18} {times[key]:.2f}")
    print(f"page size          {size_mb:.2f} MB (target <= {TARGET_MB:g} MB)")
    print(f"render ms          min {min(renders):.0f}  median {statistics.median(renders):.0f}  "
          f"max {max(renders):.0f}  over {len(renders)} opens "
          f"(target <= {TARGET_S * 1000:.0f} ms)")  # fmt: skip
    print("page problems      " + ("none" if not problems else "; ".join(problems)))
    met = size_mb <= TARGET_MB and statistics.median(renders) <= TARGET_S * 1000 and not problems
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
