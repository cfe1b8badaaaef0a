"""One named denominator per figure (issue 26, item 3), the same in console, page and JSON.

Every share whose denominator can change names it in the summary (``utilization_scope``,
``launch_overhead_scope``, ``sync_api_scope``, ``exposed_comm_scope``); the console and the
page write it with the same words (report/denominators.py), read here from the written
``summary.json``; the spread beside a step time is p10-p90 everywhere and never a CV.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import dlprof_lite
from conftest import corpus_files
from dlprof_lite.render.console import render
from dlprof_lite.render.page.html import header_rows
from dlprof_lite.report.units import DENOMINATORS, duration, percent

CORPUS = corpus_files()
SCOPES = {
    "utilization_scope": {"session", "event_span"},
    "launch_overhead_scope": {"iterations", "active_span"},
    "sync_api_scope": {"iterations", "session", "event_span"},
    "exposed_comm_scope": {"iterations", "session", "event_span"},
}


def _console(report: dlprof_lite.Report) -> str:
    out = StringIO()
    render(report, None, Console(file=out, width=300))
    return " ".join(out.getvalue().split())


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_each_share_names_its_denominator(corpus_dir: Path, path: Path, tmp_path: Path) -> None:
    report = dlprof_lite.analyze(path)
    doc = json.loads((report.save(tmp_path / "r") / "summary.json").read_text("utf-8"))
    for field, values in SCOPES.items():
        share = {"utilization_scope": "gpu_utilization", "launch_overhead_scope":
                 "launch_overhead_pct", "sync_api_scope": "sync_api_pct",
                 "exposed_comm_scope": "exposed_comm_pct"}[field]  # fmt: skip
        # A share is named wherever it is given (a GPU listed without work: 0 % of the
        # session, in the gpus list only).
        assert doc[share] is None or doc[field] is not None, field
        if field != "utilization_scope":
            assert (doc[share] is None) == (doc[field] is None), field
        assert doc[field] is None or doc[field] in values, (field, doc[field])
    shown = [g for g in doc["gpus"] if g["utilization"] is not None]
    assert not shown or doc["utilization_scope"] is not None
    console, page = _console(report), dict(header_rows(report))
    label = DENOMINATORS.get(doc["utilization_scope"])
    for gpu in doc["gpus"]:
        if gpu["utilization"] is not None:
            assert f"busy {percent(gpu['utilization'])} of {label}" in console
    if doc["gpu_utilization"] is not None and doc["devices"]:
        assert page["GPU busy"] == f"{percent(doc['gpu_utilization'])} of {label}"
    if doc["launch_overhead_pct"] is not None:
        shown = (f"{percent(doc['launch_overhead_pct'], 1.0)} of "
                 f"{DENOMINATORS[doc['launch_overhead_scope']]}")  # fmt: skip
        assert f"launch overhead {shown}" in console
        assert page.get("launch overhead", shown) == shown  # the page: with GPU work only


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name",
    ["hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
     "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite"],
)  # fmt: skip
def test_one_spread_beside_a_step_time(corpus_dir: Path, name: str) -> None:
    report = dlprof_lite.analyze(corpus_dir / name)
    it = report.summary.iterations
    steps = report.iterations
    analysed = steps[steps["in_window"] & ~steps["warmup"]]["wall_ns"].to_numpy(float)
    p10, p50, p90 = np.percentile(analysed, [10, 50, 90])  # the oracle: numpy on the table
    assert (it.iterations_p10_ns, it.iterations_median_ns, it.iterations_p90_ns) == (
        pytest.approx(p10), pytest.approx(p50), pytest.approx(p90))  # fmt: skip
    phrase = f"{duration(p50)} median (p10–p90 {duration(p10)}–{duration(p90)})"
    console, page = _console(report), dict(header_rows(report))
    assert phrase in console and page["steady step time"] == phrase
    header = console.split("Top ")[0]  # the summary lines, before the tables
    assert "cv" not in header.lower() and "CV" not in page["steady step time"]
