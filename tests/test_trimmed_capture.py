"""Trimmed captures (issue 26, item 5): where the events cover less than 10 % of the session,
session-based shares are taken over the events' span, and the report says so.

Real cases: the nsys-ai two-GPU fixture (0.3 s of events in a 119 s session: a time-window
slice) and the CUTLASS benchmark (0.57 s of events after 11.8 s of start-up). Derived case:
a copy of the DLProf export (events over 80 % of its 3 s session) whose recorded session is
made 50 times longer, in ``tmp_path``. Oracles: the exports' own rows through SQL.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.render.console import render
from dlprof_lite.render.page.html import header_rows

TWO_GPUS = CORPUS / "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"
CUTLASS = CORPUS / "wenscarl__cutlass_benchmark__report1.sqlite"
DLPROF = CORPUS / "MohanadOdema__DLProf__nsys_profile.sqlite"
EVENTS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "", "CUPTI_ACTIVITY_KIND_MEMCPY": "",
    "CUPTI_ACTIVITY_KIND_MEMSET": "", "CUPTI_ACTIVITY_KIND_RUNTIME": "",
    "NVTX_EVENTS": " WHERE eventType IN (59, 60) AND end IS NOT NULL",
}  # fmt: skip


def rows(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return con.execute(sql).fetchall()


def event_span(path: Path) -> tuple[int, int]:
    tables = {r[0] for r in rows(path, "SELECT name FROM sqlite_master")}
    lo, hi = [], []
    for table, where in EVENTS.items():
        if table in tables:
            [(a, b)] = rows(path, f"SELECT MIN(start), MAX(end) FROM {table}{where}")
            if a is not None:
                lo.append(a)
                hi.append(b)
    return min(lo), max(hi)


def duration(path: Path) -> int:
    return int(rows(path, "SELECT duration FROM ANALYSIS_DETAILS")[0][0])


@pytest.mark.corpus
@pytest.mark.parametrize("path", [TWO_GPUS, CUTLASS], ids=["two-gpus", "cutlass"])
def test_shares_of_a_trimmed_capture_are_of_the_events_span(corpus_dir: Path, path: Path) -> None:
    t0, t1 = event_span(path)
    assert (t1 - t0) < 0.1 * duration(path)
    report = dlprof_lite.analyze(path)
    s = report.summary
    assert s["wall_ns"] == duration(path) and s["event_span_ns"] == t1 - t0
    assert s["utilization_scope"] == "event_span"
    busy, devices = s["gpu_busy_ns"], s["devices"]
    assert s["gpu_utilization"] == pytest.approx(busy / ((t1 - t0) * devices), rel=1e-12)
    for gpu in s.gpus:
        assert gpu.utilization == pytest.approx(gpu.busy_ns / (t1 - t0), rel=1e-12)
    # No steps: synchronization is a share of the same span, and says so.
    assert s["sync_api_scope"] == "event_span" and 0 <= s["sync_api_pct"] <= 100
    [line] = [w for w in s.warnings if "a trimmed capture" in w]
    assert line.startswith(f"the events cover {(t1 - t0) / duration(path):.2%} of the session")
    out = StringIO()
    render(report, None, Console(file=out, width=200))
    text = out.getvalue()
    for gpu in s.gpus:
        assert f"busy {gpu.utilization:.1%} of the events' span" in text
    assert f"{s['gpu_utilization']:.1%} of the events' span" == dict(header_rows(report))[
        "GPU busy"
    ]


@pytest.mark.corpus
def test_exposed_communication_of_a_trimmed_capture(corpus_dir: Path) -> None:
    report = dlprof_lite.analyze(TWO_GPUS)
    c, ranks = report.summary.communication, report.ranks
    t0, t1 = event_span(TWO_GPUS)
    timelines = int(ranks["device_id"].notna().sum())
    exposed = float(ranks["exposed_comm_ns"].sum())
    assert c.exposed_comm_scope == "event_span" and exposed > 0
    assert c.exposed_comm_pct == pytest.approx(exposed / ((t1 - t0) * timelines) * 100, rel=1e-12)


@pytest.mark.corpus
def test_a_long_empty_session(corpus_dir: Path, tmp_path: Path) -> None:
    """The same events in a session 50 times longer: the shares stay those of the events'
    span, where the session-based ones would fall 50-fold."""
    path = tmp_path / "long.sqlite"
    shutil.copyfile(DLPROF, path)
    with closing(sqlite3.connect(path)) as con:
        con.execute("UPDATE ANALYSIS_DETAILS SET duration = duration * 50, "
                    "stopTime = startTime + duration * 50")  # fmt: skip
        con.commit()
    before = dlprof_lite.analyze(DLPROF).summary
    after = dlprof_lite.analyze(path).summary
    assert before["utilization_scope"] == "session" and before["wall_ns"] == duration(DLPROF)
    assert after["utilization_scope"] == "event_span" and after["wall_ns"] == duration(path)
    t0, t1 = event_span(DLPROF)
    assert after["event_span_ns"] == before["event_span_ns"] == t1 - t0
    assert after["gpu_utilization"] == pytest.approx(
        before["gpu_busy_ns"] / ((t1 - t0) * before["devices"]), rel=1e-12
    )
    assert before["gpu_utilization"] == pytest.approx(
        before["gpu_busy_ns"] / (duration(DLPROF) * before["devices"]), rel=1e-12
    )
    assert any("a trimmed capture" in w for w in after.warnings)
    assert not any("a trimmed capture" in w for w in before.warnings)
