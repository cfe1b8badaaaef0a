"""The critical path's views: the report's ``critical`` and ``critical_path`` tables, the
console's lines, the page's section and timeline lane, trace.json's track and flow arrows,
and a report folder written and read back.

Oracle: the serial GPU-bound step of tests/test_critical_graph.py, whose path is worked out
by hand there (host 100 + 3700, device 6000, latency 200 of a 10 000 ns step).
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from rich.console import Console

from builders import R, make_profile, phase
from dlprof_lite.render.console import render
from dlprof_lite.render.trace import CRITICAL_PID, GPU_PID_BASE, trace_document
from dlprof_lite.report.build import build_report
from dlprof_lite.report.model import Report
from test_critical_graph import SYNC, _k
from test_html_page import read

STEP = 10_000


@pytest.fixture(scope="module")
def report() -> Report:
    kernels = [_k(200, 3_000, (100, 150)), _k(3_200, 2_000, (400, 450), name="kb"),
               _k(5_200, 1_000, (500, 550), name="kb")]  # fmt: skip
    ranges = [phase("iteration", 0, STEP), phase("forward", 0, STEP),
              R("fwd:model:Net", 0, STEP, [R("fwd:a:Linear", 0, 300),
                                           R("fwd:b:Linear", 300, 600)])]  # fmt: skip
    p = make_profile(ranges=ranges, kernels=kernels, iterations=[(0, STEP, False, True)],
                     api=[{"name": SYNC, "start_ns": 600, "end_ns": 6_300}])  # fmt: skip
    return build_report(p)


def test_the_critical_table_adds_up_to_the_step(report: Report) -> None:
    table = report.critical
    assert int(table["total_ns"].sum()) == STEP
    assert table["share_pct"].sum() == pytest.approx(100.0)
    parts = table.groupby("part")["total_ns"].sum().to_dict()
    assert parts == {"host": 3_800, "device": 6_000, "latency": 200}
    by_layer = table.groupby("layer")["total_ns"].sum().to_dict()
    # a's kernel 3000 (and its latency 100), b's kernels 3000 with the sync's return 100
    assert by_layer["a"] == 3_000 + 100 + 100  # host [0, 100) is a's too
    assert by_layer["b"] == 3_000


def test_the_path_of_the_shown_iteration_piece_by_piece(report: Report) -> None:
    path = report.critical_path
    assert report.summary.window.timeline_iteration == 0
    assert path["start_ns"].tolist() == sorted(path["start_ns"].tolist())
    assert int((path["end_ns"] - path["start_ns"]).sum()) == STEP
    devices = path[path["part"] == "device"]
    assert devices["name"].tolist() == ["k", "kb", "kb"]
    assert set(devices["track"]) == {"GPU 0 stream 7"}
    assert path["start_ns"].iloc[0] == 0 and path["end_ns"].iloc[-1] == STEP


def test_console_names_the_path_and_the_whatif_command(report: Report) -> None:
    out = io.StringIO()
    render(report, None, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "Critical path (what sets the step's time): host 38.0% · device 60.0% · latency 2.0%" \
        in text
    # the model's own host time (the rest of the step after the sync is in its range)
    assert "on it most: model 38.0%, a 32.0%, b 30.0%" in text
    assert "dlprof-lite whatif REPORT --scale layer=model:0.5" in text


def test_page_has_the_critical_section_and_the_path_on_the_timeline(report: Report) -> None:
    page = read(report)
    assert page.sections.index("critical") == page.sections.index("idle") + 1
    assert "chart-critical" in page.charts
    bars = page.figure("critical")
    assert {t["name"] for t in bars["data"]} == {"host", "device", "latency"}
    timeline = page.figure("timeline")
    lanes = {t["name"]: t for t in timeline["data"] if t["name"].startswith("path: ")}
    assert set(lanes) == {"path: host", "path: device", "path: latency"}
    assert timeline["layout"]["yaxis"]["categoryarray"][0] == "critical path"
    width = sum(sum(t["x"]) for t in lanes.values()) * timeline["layout"]["meta"]["ns"]
    assert width == pytest.approx(STEP)


def test_trace_has_the_path_track_and_arrows_where_it_changes_track(report: Report) -> None:
    doc = trace_document(report.timeline, origin_ns=0, critical=report.critical_path)
    events = doc["traceEvents"]
    path = [e for e in events if e.get("pid") == CRITICAL_PID and e["ph"] == "X"]
    assert len(path) == len(report.critical_path)
    flows = [e for e in events if e.get("cat") == "critical"]
    starts = [e for e in flows if e["ph"] == "s"]
    ends = [e for e in flows if e["ph"] == "f"]
    assert len(starts) == len(ends) >= 2
    # host -> GPU (the launch of a) and GPU -> host (the sync's return after the last kernel)
    assert {e["pid"] for e in ends} == {1, GPU_PID_BASE}
    ids = [e["id"] for e in flows]
    launches = [e["id"] for e in events if e.get("cat") == "launch"]
    assert not set(ids) & set(launches)  # flow ids never collide


def test_folder_round_trip_and_a_folder_from_before(report: Report, tmp_path) -> None:
    folder = tmp_path / "r"
    report.save(folder)
    back = Report.open(folder)
    pd.testing.assert_frame_equal(back.critical, report.critical)
    pd.testing.assert_frame_equal(back.critical_path, report.critical_path)
    trace = json.loads((folder / "trace.json").read_text())
    assert any(e.get("pid") == CRITICAL_PID for e in trace["traceEvents"])
    for name in ("critical", "critical_path"):
        for suffix in ("csv", "json"):
            (folder / f"{name}.{suffix}").unlink()
    older = Report.open(folder)
    assert older.critical.empty and older.critical_path.empty
