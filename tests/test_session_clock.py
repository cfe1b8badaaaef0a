"""The session's length on the events' clock (issue 26, item 1), read by our own SQL.

nsys times every event from the session's start: each kernel, copy, CUDA API call and NVTX
range of a real export lies in ``[0, ANALYSIS_DETAILS.duration]`` (an NVTX domain-create event
may lie before 0: it is no activity). ``startTime``/``stopTime`` are on another clock: using
them made ``wall_ns`` 40-85 % short or 39-49 % long on 9 of these exports. The oracle here is
the export itself, through ``sqlite3``, never the reader under test.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import cache
from pathlib import Path

import pytest

import dlprof_lite
from conftest import corpus_files

CORPUS = corpus_files()
IDS = [p.name[:40] for p in CORPUS]
EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS",
)  # fmt: skip
DOMAIN_CREATE = 75  # ENUM_NSYS_EVENT_TYPE NvtxDomainCreate
RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange


def _rows(path: Path, sql: str) -> list[tuple]:
    uri = f"file:{path}?mode=ro&immutable=1"
    with closing(sqlite3.connect(uri, uri=True)) as con:
        return con.execute(sql).fetchall()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def recorded_duration(path: Path) -> int | None:
    """ANALYSIS_DETAILS.duration, None where the export has no such table."""
    if "ANALYSIS_DETAILS" not in _tables(path):
        return None
    [(duration,)] = _rows(path, "SELECT duration FROM ANALYSIS_DETAILS")
    return int(duration)


def event_span(path: Path, *, ranges_only: bool = False) -> tuple[int, int] | None:
    """First start and last end of every activity event (domain creates left out); with
    ``ranges_only``, of the kernels, copies, CUDA runtime calls and NVTX ranges alone."""
    lo, hi = [], []
    tables = EVENT_TABLES[:-2] + EVENT_TABLES[-1:] if ranges_only else EVENT_TABLES
    for table in sorted(_tables(path) & set(tables)):
        where = f" WHERE eventType != {DOMAIN_CREATE}"
        if ranges_only:
            where = f" WHERE eventType IN {RANGES}"
        where = where if table == "NVTX_EVENTS" else ""
        [(a, b, c)] = _rows(path, f"SELECT MIN(start), MAX(start), MAX(end) FROM {table}{where}")
        if a is not None:
            lo.append(int(a))
            hi.append(max(int(b), int(c if c is not None else b)))
    return (min(lo), max(hi)) if lo else None


@cache
def report_of(path: Path) -> dlprof_lite.Report:
    return dlprof_lite.analyze(path)


WITH_TABLE = [p for p in CORPUS if recorded_duration(p) is not None]


@pytest.mark.corpus
def test_most_exports_record_their_duration(corpus_dir: Path) -> None:
    # 14 of the 18: the 2020.3 and 2021.3 exports have no ANALYSIS_DETAILS.
    assert len(WITH_TABLE) == 14


@pytest.mark.corpus
@pytest.mark.parametrize("path", WITH_TABLE, ids=[p.name[:40] for p in WITH_TABLE])
def test_every_event_lies_in_the_recorded_session(corpus_dir: Path, path: Path) -> None:
    duration, span = recorded_duration(path), event_span(path)
    assert duration is not None and duration > 0
    if span is not None:
        assert 0 <= span[0] <= span[1] <= duration, (span, duration)


@pytest.mark.corpus
@pytest.mark.parametrize("path", WITH_TABLE, ids=[p.name[:40] for p in WITH_TABLE])
def test_wall_is_the_recorded_duration(corpus_dir: Path, path: Path) -> None:
    summary = report_of(path).summary
    assert summary["wall_ns"] == recorded_duration(path)
    # Whole-run figures follow it: a window over the session, a utilization over its length
    # (unless the capture is trimmed: test_trimmed_capture.py).
    if summary["window_scope"] == "no-iterations":
        assert (summary["window_start_ns"], summary["window_end_ns"]) == (0, summary["wall_ns"])
    if summary["utilization_scope"] == "session" and summary["devices"]:
        busy, devices = summary["gpu_busy_ns"], summary["devices"]
        assert summary["gpu_utilization"] == pytest.approx(
            busy / (recorded_duration(path) * devices), rel=1e-12
        )


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=IDS)
def test_without_the_table_the_events_span_is_the_session(corpus_dir: Path, path: Path) -> None:
    if recorded_duration(path) is not None:
        pytest.skip("records its duration")
    # The span of what the report reads: kernels, copies, CUDA runtime calls, NVTX ranges.
    span = event_span(path, ranges_only=True)
    want = 0 if span is None else span[1] - span[0]
    assert report_of(path).summary["wall_ns"] == want
