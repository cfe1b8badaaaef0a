"""The screenshots in README.md and docs/screenshots.md, made again from real runs.

Not a test: it writes ``docs/*.png``. Each picture is a page the command line writes for a
real input, opened in Debian's Chromium by the page tests' harness (tests/browser.py:
network blocked), and written only when the page passes every check the browser tests make
(sections drawn, charts drawn at the ``load`` event, no overlapping chart text, round ticks,
no number wrapped in a table cell); otherwise the script stops with the page's problems.

- ``report.png``: examples/lenet.py profiled under nsys (``dlprof-lite -- python lenet.py``);
- ``report-cudf.png``, ``report-dlprof.png``: the cuDF and DLProf exports of the shared
  corpus (``../shared/corpus``, ``DLPROF_SHARED``), analysed;
- ``report-million.png``: the 1M-kernel generated profile of the browser tests;
- ``compare.png``: two LeNet runs, the second with a 5 ms sleep in conv2's forward, compared.

    python scripts/screenshots.py                 # every picture
    python scripts/screenshots.py report compare  # some of them
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

from browser import Chromium, chromium_path  # noqa: E402
from make_profile import make_profile  # noqa: E402

DOCS = ROOT / "docs"
CORPUS = Path(os.environ.get("DLPROF_SHARED", ROOT.parent / "shared")) / "corpus"
LENET = ROOT / "examples" / "lenet.py"
PNG_LIMIT = 1 << 20  # bytes: a picture in the repository stays under 1 MB
MILLION = 1_000_000
KERNELS_PER_ITERATION = 2 * 8 * 12 + 2  # tests/test_html_browser.py's shape


def dlprof(cwd: Path, *args: str) -> None:
    """The command line, as a user runs it in ``cwd``; it must succeed."""
    cmd = [sys.executable, "-m", "dlprof_lite", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"screenshots: {' '.join(args)} failed:\n{done.stderr[-3000:]}")


def lenet(work: Path, name: str, *script: str) -> Path:
    dlprof(work, "--quiet", "-o", name, "--", sys.executable, str(LENET), "--steps", "20", *script)
    return work / name / "report.html"


def report(work: Path) -> Path:
    return lenet(work, "lenet")


def cudf(work: Path) -> Path:
    # cuDF's own null_count range as the steps (the browser test's choice: no guess takes a
    # library's range).
    dlprof(work, "analyze", str(CORPUS / "quasiben__nvtx-examples__cudf.sqlite"), "-o", "cudf",
           "--key-range", "^null_count$", "--quiet")  # fmt: skip
    return work / "cudf" / "report.html"


def dlprof_export(work: Path) -> Path:
    dlprof(work, "analyze", str(CORPUS / "MohanadOdema__DLProf__nsys_profile.sqlite"), "-o",
           "dlprof", "--quiet")  # fmt: skip
    return work / "dlprof" / "report.html"


def million(work: Path) -> Path:
    export = work / "million.sqlite"
    make_profile(export, iterations=-(-MILLION // KERNELS_PER_ITERATION), layers=8,
                 kernels_per_layer=12, seed=5)  # fmt: skip
    dlprof(work, "analyze", str(export), "-o", "million", "--quiet")
    return work / "million" / "report.html"


def compare(work: Path) -> Path:
    lenet(work, "baseline", "--batch-size", "32")
    lenet(work, "conv2-slow", "--batch-size", "32", "--slow-layer", "conv2", "--slow-ms", "5")
    dlprof(work, "compare", "baseline", "conv2-slow", "-o", "compare", "--quiet")
    return work / "compare" / "compare.html"


PICTURES: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "report": ("report.png", report),
    "cudf": ("report-cudf.png", cudf),
    "dlprof": ("report-dlprof.png", dlprof_export),
    "million": ("report-million.png", million),
    "compare": ("compare.png", compare),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"pictures to make: {', '.join(PICTURES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in PICTURES]
    if unknown:
        parser.error(f"no picture named {', '.join(unknown)} (choose from {', '.join(PICTURES)})")
    exe = chromium_path()
    if exe is None:
        raise SystemExit("screenshots: no Chromium (apt-get install chromium, or DLPROF_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        chromium = Chromium(browser)
        for name in args.names or list(PICTURES):
            file, make = PICTURES[name]
            work = Path(tmp) / name
            work.mkdir()
            result = chromium.open_page(make(work))
            problems = result.problems()
            if problems:
                raise SystemExit(f"screenshots: {name}'s page fails its checks:\n  "
                                 + "\n  ".join(problems))  # fmt: skip
            if len(result.screenshot) >= PNG_LIMIT:
                raise SystemExit(f"screenshots: {file} would be {len(result.screenshot)} bytes")
            (DOCS / file).write_bytes(result.screenshot)
            print(f"{DOCS / file}: {len(result.screenshot)} bytes, page "
                  f"{result.size_bytes / 1e6:.2f} MB, drawn in {result.render_ms:.0f} ms")
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
