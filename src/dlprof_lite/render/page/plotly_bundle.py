"""The frame of every HTML page: plotly.js inlined once, compressed, and each chart's figure.

Place in the pipeline: report (rendering; render/page/html.py and compare/page.py build the
pages). A page must open from disk with no network, so plotly.js (from the ``plotly``
package, ``plotly.offline.get_plotlyjs()``, 4.8 MB) is inlined gzip-compressed and
base64-encoded (about 2 MB; packed once per plotly release and cached on disk:
render/page/plotly_cache.py) and decompressed in the browser synchronously, while the page loads
(render/page/inflate_js.py), so every chart is drawn before the ``load`` event: screenshots,
printing and PDF export taken then show the charts. Each chart is a ``<div class="chart"
id="chart-NAME" data-points="N">`` with its figure, built in Python as plotly's figure JSON
(render/page/figures.py), in a ``<script type="application/json">`` block beside it; the loader
draws them with ``Plotly.newPlot`` and then sets ``document.body.dataset.rendered`` (any
failure: ``dataset.error`` and ``console.error``). No chart code is written by hand.

Names from a profile are hostile input: HTML text goes through ``html.escape`` and figure
JSON has every ``<`` written as ``\\u003c``, so no name can close a ``<script>`` element.
"""

from __future__ import annotations

import functools
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlprof_lite.render.page.figures import Figure
from dlprof_lite.render.page.inflate_js import GUNZIP

# The browser-side loader (not chart code), run while the page loads: unpack plotly.js with
# ``gunzip`` (render/page/inflate_js.py, synchronous), run it, draw every figure. Plotly draws SVG
# charts synchronously inside ``newPlot``, so they are on screen before the ``load`` event;
# the rendered flag waits for newPlot's promises (anything plotly still finishes later).
_LOADER = """
(() => {
  const fail = (err) => {
    document.body.dataset.error = String((err && err.message) || err);
    console.error(err);
  };
  try {
    const raw = atob(document.getElementById("plotly-gz").textContent.trim());
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const tag = document.createElement("script");
    tag.textContent = new TextDecoder().decode(gunzip(bytes));
    document.head.appendChild(tag);  // an inline script runs as it is inserted
    if (typeof Plotly === "undefined") throw new Error("plotly.js did not load");
    const drawn = [...document.querySelectorAll("div.chart")].map((div) => {
      const fig = JSON.parse(document.getElementById(div.id + "-figure").textContent);
      return Plotly.newPlot(div, fig.data, fig.layout, {displaylogo: false, responsive: true});
    });
    Promise.all(drawn).then(() => { document.body.dataset.rendered = "true"; }, fail);
  } catch (err) {
    fail(err);
  }
})();
"""

# Sorting a table by a header click (not chart code): numbers by data-sort, else text.
_SORTER = """
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("th").forEach((th, col) => th.addEventListener("click", () => {
    const body = table.tBodies[0];
    const up = th.dataset.dir !== "asc";
    th.dataset.dir = up ? "asc" : "desc";
    const key = (row) => {
      const cell = row.cells[col];
      const num = cell.dataset.sort;
      return num === undefined ? cell.textContent : parseFloat(num);
    };
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = key(a), y = key(b);
      const numbers = typeof x === "number" && typeof y === "number";
      const c = numbers ? x - y : String(x).localeCompare(String(y));
      return up ? c : -c;
    });
    rows.forEach((row) => body.appendChild(row));
  }));
}
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
section { margin-bottom: 2em; }
table { border-collapse: collapse; font-size: .85em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: right; vertical-align: top; }
td { white-space: nowrap; }  /* a number never breaks from its unit ("51.8 µs") */
td.name, table.facts td, td.wrap { white-space: normal; }
th { background: #f4f4f4; cursor: pointer; }
td.name, th.name { text-align: left; min-width: 8em; max-width: 40em; overflow-wrap: anywhere; }
table.facts th { text-align: left; cursor: default; }
table.facts td { text-align: left; }
.chart { width: 100%; min-height: 380px; }
.note { color: #666; font-size: .85em; }
.advice { border-left: 4px solid #999; padding: .3em .8em; margin: .6em 0; }
.advice.high { border-color: #c62828; } .advice.warn { border-color: #ef6c00; }
.advice.info { border-color: #1565c0; }
.verdict.slower { color: #c62828; } .verdict.faster { color: #2e7d32; }
details summary { cursor: pointer; }
"""


@functools.cache
def plotly_payload() -> str:
    """plotly.js, gzip level 9 then base64: packed once per plotly.js release and kept in the
    user's cache folder (render/page/plotly_cache.py), read once per process."""
    from dlprof_lite.render.page.plotly_cache import payload

    return payload()


def esc(value: object) -> str:
    """Any value as HTML text (quotes too: the result may sit in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(data: object) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``: no ``<`` left, so
    neither ``</script>`` nor ``<!--`` can appear; JSON.parse reads ``\\u003c`` back as ``<``."""
    return json.dumps(data, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


def count_points(figure: dict[str, object]) -> int:
    """Data points a figure holds: the values of every trace (x, y or box samples)."""
    total = 0
    for trace in figure.get("data", []):  # type: ignore[attr-defined]
        for axis in ("y", "x"):
            values = trace.get(axis)
            if isinstance(values, list):
                total += len(values)
                break
    return total


@dataclass(frozen=True)
class Chart:
    """One chart of a page: its id suffix and its figure."""

    name: str
    figure: Figure

    def html(self) -> str:
        points = count_points(self.figure)
        try:
            text = script_json(self.figure)
        except ValueError:  # NaN or infinity: null, as plotly's own serialiser writes them
            text = script_json(finite(self.figure))
        cid = f"chart-{self.name}"
        return (
            f'<div class="chart" id="{esc(cid)}" data-points="{points}"></div>\n'
            f'<script type="application/json" id="{esc(cid)}-figure">{text}</script>'
        )


def finite(data: object) -> object:
    """``data`` with every float that is not finite replaced by None (JSON has no NaN)."""
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def section(sid: str, title: str, body: Sequence[str]) -> str:
    """``<section id=sid><h2>title</h2>body</section>``; ``body`` is HTML already escaped."""
    return f'<section id="{esc(sid)}">\n<h2>{esc(title)}</h2>\n' + "\n".join(body) + "\n</section>"


def document(title: str, heading: str, sections: Sequence[str]) -> str:
    """A whole self-contained page: style, sections, plotly.js (compressed) and the loader."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            f"<h1>{esc(heading)}</h1>",
            *sections,
            f'<script type="application/octet-stream" id="plotly-gz">{plotly_payload()}</script>',
            f"<script>{_SORTER}</script>",
            f"<script>{GUNZIP}{_LOADER}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )
