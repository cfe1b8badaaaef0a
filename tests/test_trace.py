"""trace.json (render/trace.py): a valid Chrome trace-event document whose times are the report's.

Every document made here passes :func:`check_trace`, the trace-event format's rules as Perfetto
and chrome://tracing apply them: every event has ph/ts/pid/tid and a name; complete events on
one track are disjoint or nested (a viewer drops the others); every flow start has its finish
and both sit on a slice of their track. Times are checked against the hand-built profile's
round numbers and the real exports' own rows, to the nanosecond.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import dlprof_lite
from builders import R
from dlprof_lite.render.trace import GPU_PID_BASE, trace_document, trace_text, track_lanes
from dlprof_lite.report.build import build_report
from dlprof_lite.report.timeline import steady_iteration, timeline_for
from example_profiles import _step, training_profile
from make_profile import make_profile
from test_timeline import CORPUS_CASES, corpus_profile

FLOW_ID_LIMIT = 2**53


def ns(us: float) -> int:
    """A trace time (µs, float) back in ns: exact when the writer kept every ns."""
    return round(us * 1000)


def check_trace(doc: dict) -> None:
    """The trace-event format's rules (see the module docstring); raises AssertionError."""
    assert set(doc) >= {"traceEvents", "displayTimeUnit", "metadata"}
    events = doc["traceEvents"]
    tracks: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    flows: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= set(e), e
        assert e["ph"] in ("X", "M", "s", "f"), e  # no B/E: nothing to balance
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            tracks[e["pid"], e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
        elif e["ph"] in "sf":
            assert 0 < e["id"] < FLOW_ID_LIMIT, e
            flows[e["id"]].append(e)
    for key, slices in tracks.items():
        open_ends: list[int] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"overlap on track {key}"
            open_ends.append(end)
    for flow_id, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], (flow_id, pair)
        for e in pair:
            assert e["ph"] == "s" or e.get("bp") == "e", e
            t = ns(e["ts"])
            assert any(a <= t <= b for a, b in tracks[e["pid"], e["tid"]]), e


def slices(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def kernel_ns_by_name(doc: dict) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for e in slices(doc, "kernel"):
        out[e["name"]] += ns(e["dur"])
    return dict(out)


# -- hand-built -------------------------------------------------------------------------------


def test_the_report_timeline_as_a_trace() -> None:
    profile = training_profile()
    report = build_report(profile)
    doc = trace_document(report.timeline, origin_ns=2000)
    check_trace(doc)
    # Iteration 1 in the trace == the kernels table of a report analysing only iteration 1.
    alone = training_profile(iterations=[(1000, 3000, True, True), (3000, 5000, False, True),
                                         (5000, 8000, False, False)])  # fmt: skip
    table = build_report(alone).kernels
    want = dict(zip(table["short_name"].astype(str), table["total_ns"].astype(int), strict=True))
    assert kernel_ns_by_name(doc) == want == {"sm90_xmma_gemm_bf16bf16_tn": 100,
                                              "relu_kernel": 20, "sgemm_128x64_nt": 200,
                                              "adam_kernel": 50}  # fmt: skip
    # Times to the ns: ts = (start - origin) / 1000, dur = (end - start) / 1000.
    gemm = next(e for e in slices(doc, "kernel") if e["name"].startswith("sm90"))
    assert (gemm["ts"], gemm["dur"]) == (1.33, 0.1)
    assert gemm["pid"] == GPU_PID_BASE and gemm["tid"] == 7
    assert gemm["args"] == {"layer": "fc1", "phase": "forward", "iteration": 1, "tid": 10,
                            "correlation_id": 1004, "device_id": 0, "stream_id": 7}  # fmt: skip
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and "name" in
             e["args"]}  # fmt: skip
    assert {"process 1", "GPU 0", "thread 10", "stream 7"} <= names


def test_flows_join_each_launch_to_its_op() -> None:
    doc = trace_document(timeline_for(training_profile()), origin_ns=0)
    check_trace(doc)
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    # five launches (copy, gemm, relu, sgemm, adam): call start -> GPU start, in ns
    pairs = sorted((ns(starts[i]["ts"]), ns(ends[i]["ts"])) for i in starts)
    assert pairs == [(3100, 3120), (3310, 3330), (3490, 3530), (3920, 3940), (4610, 4630)]
    assert all(ends[i]["pid"] == GPU_PID_BASE and starts[i]["pid"] == 1 for i in starts)


def test_nanoseconds_survive_a_large_clock() -> None:
    base = 1_234_567_890_123  # 20 minutes into a session, odd nanoseconds
    k = dict(name="k", start_ns=base + 7, dur_ns=3, api_name="cudaLaunchKernel",
             api_start_ns=base + 1, api_end_ns=base + 2)  # fmt: skip
    profile = training_profile(ranges=[R("step", base, base + 11)], kernels=[k], memops=[],
                               api=[], iterations=[(base, base + 11, False, True)],
                               session=(0, base + 20))  # fmt: skip
    frame = timeline_for(profile)
    doc = json.loads(trace_text(frame, origin_ns=1))
    check_trace(doc)
    got = sorted((ns(e["ts"]) + 1, ns(e["ts"]) + ns(e["dur"]) + 1) for e in doc["traceEvents"]
                 if e["ph"] == "X")  # fmt: skip
    assert got == sorted(zip(frame["start_ns"], frame["end_ns"], strict=True))


def test_overlapping_events_move_to_sub_tracks() -> None:
    # Two kernels at once on stream 7, and two start/end ranges crossing each other (and a
    # push/pop range) on thread 10.
    kernels = [dict(name="a", start_ns=3100, dur_ns=500, api_name="cudaLaunchKernel",
                    api_start_ns=3010, api_end_ns=3020),
               dict(name="b", start_ns=3300, dur_ns=500, api_name="cudaLaunchKernel",
                    api_start_ns=3030, api_end_ns=3040)]  # fmt: skip
    ranges = [*_step(3000, 2000), R("x", 3050, 3700, style="start_end"),
              R("y", 3400, 4200, style="start_end")]  # fmt: skip
    profile = training_profile(ranges=ranges, kernels=kernels, memops=[], api=[],
                               iterations=[(3000, 5000, False, True)])  # fmt: skip
    doc = trace_document(timeline_for(profile), origin_ns=0)
    check_trace(doc)
    a, b = (next(e for e in slices(doc, "kernel") if e["name"] == n) for n in "ab")
    assert a["pid"] == b["pid"] and a["tid"] != b["tid"]
    x, y = (next(e for e in slices(doc, "range") if e["name"] == n) for n in "xy")
    assert x["tid"] != y["tid"] and y["args"]["tid"] == x["args"]["tid"] == 10
    thread_names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "stream 7 (concurrent 1)" in thread_names and "thread 10 (overlapping 1)" in thread_names


def test_lanes_first_fit() -> None:
    import numpy as np

    track = np.zeros(5, dtype=np.int64)
    start = np.array([0, 10, 20, 5, 100])
    end = np.array([50, 30, 25, 60, 110])
    # [0,50] holds [10,30] holds [20,25]; [5,60] crosses [0,50]: lane 1; [100,110]: lane 0.
    assert track_lanes(track, start, end).tolist() == [0, 0, 0, 1, 0]
    # Equal bounds nest; a slice ending where the next starts is disjoint.
    assert track_lanes(np.zeros(3, np.int64), np.array([0, 0, 5]),
                       np.array([5, 5, 9])).tolist() == [0, 0, 0]  # fmt: skip


def test_hostile_names_are_data(tmp_path: Path) -> None:
    hostile = ['"}]},{"ph":"X', "</script><script>alert(1)</script>", "tab\there\nnewline",
               "\\u0000 ünïcödé 名前 \u202e"]  # fmt: skip
    ranges = [*_step(3000, 2000), *(R(n, 3001 + i, 3002 + i) for i, n in enumerate(hostile))]
    profile = training_profile(ranges=ranges, iterations=[(3000, 5000, False, True)])
    text = trace_text(timeline_for(profile))
    text.encode("ascii")  # every odd character escaped
    doc = json.loads(text)
    check_trace(doc)
    assert set(hostile) <= {e["name"] for e in slices(doc, "range")}


def test_empty_timeline() -> None:
    doc = trace_document(timeline_for(training_profile(iterations=[])), origin_ns=0)
    assert doc["traceEvents"] == [] and doc["displayTimeUnit"] == "ms"


def test_a_saved_report_renders_the_same_trace(tmp_path: Path) -> None:
    report = build_report(training_profile())
    back = dlprof_lite.open_report(report.save(tmp_path / "r"))
    assert trace_text(back.timeline) == trace_text(report.timeline)


# -- real and generated exports ---------------------------------------------------------------


@pytest.mark.parametrize("case", list(CORPUS_CASES))
def test_corpus_trace(case: str) -> None:
    profile = corpus_profile(case)
    step = steady_iteration(profile.iterations)
    frame = timeline_for(profile)
    doc = json.loads(trace_text(frame))  # the round trip of the written text
    check_trace(doc)
    k = profile.kernels
    mine = k[k["iteration"].astype("Int64").fillna(-1).to_numpy() == step]
    assert sum(kernel_ns_by_name(doc).values()) == int(mine["dur_ns"].sum()) > 0
    origin = doc["metadata"]["origin_ns"]
    got = sorted(ns(e["ts"]) + origin for e in slices(doc, "kernel"))
    assert got == sorted(mine["start_ns"].tolist())
    launches = frame[frame["kind"] == "api"].merge(
        frame[frame["kind"] == "kernel"], on=["pid", "correlation_id"])
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) >= len(launches) > 0
    if case == "torchrun":
        gpus = {e["pid"] for e in slices(doc, "kernel")}
        cpus = {e["pid"] for e in slices(doc, "range")}
        assert len(gpus) == 2 and len(cpus) == 2


def test_generated_two_processes_over_all_iterations(tmp_path: Path) -> None:
    path = tmp_path / "two.sqlite"
    truth = make_profile(path, iterations=5, layers=3, kernels_per_layer=2, processes=2,
                         per_kernel_ranges=True, seed=7)  # fmt: skip
    profile = dlprof_lite.load(path)
    frame = timeline_for(profile, (0, len(profile.iterations)))
    doc = json.loads(trace_text(frame))
    check_trace(doc)
    in_steps = profile.kernels["iteration"].notna().to_numpy()
    assert sum(kernel_ns_by_name(doc).values()) == int(profile.kernels["dur_ns"][in_steps].sum())
    assert len({e["pid"] for e in slices(doc, "kernel")}) == truth.params["processes"]
    epoch = [e for e in slices(doc, "range") if e["name"] == "epoch"]
    assert len(epoch) == 2  # one per process, kept whole


# -- no iterations: the busiest stretch (issue 26, item 8) -------------------------------------

NO_ITERATIONS = (
    "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite",  # 31,900 events: a stretch
    "NVIDIA__Fuser__report1.sqlite",  # 14,527 events: all of them
    "quasiben__nvtx-examples__cudf.sqlite",
    "sangyun802__instant-ngp__report1.qdrep.sqlite",  # no NVTX at all
    "wenscarl__cutlass_benchmark__report1.sqlite",
)


def _sql_events(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Start and weight (GPU op duration; 0 for a range or call) of every event the
    timeline draws, read with our own SQL: NVTX ranges, runtime calls, kernels, copies."""
    import sqlite3
    from contextlib import closing

    queries = {
        "NVTX_EVENTS": "SELECT start, 0 FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                       "AND end IS NOT NULL",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "SELECT start, 0 FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_KERNEL": "SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY": "SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET": "SELECT start, end - start FROM CUPTI_ACTIVITY_KIND_MEMSET",
    }  # fmt: skip
    rows: list[tuple[int, int]] = []
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        for table, sql in queries.items():
            if table in tables:
                rows += con.execute(sql).fetchall()
    frame = np.array(sorted(rows, key=lambda r: r[0]), dtype=np.int64).reshape(-1, 2)
    return frame[:, 0], frame[:, 1]


@pytest.mark.corpus
@pytest.mark.parametrize("name", NO_ITERATIONS)
def test_without_iterations_the_trace_is_the_busiest_stretch(
    corpus_dir: Path, tmp_path: Path, name: str
) -> None:
    from dlprof_lite.report.timeline import TIMELINE_MAX_EVENTS

    report = dlprof_lite.analyze(corpus_dir / name)
    assert report.iterations.empty
    folder = report.save(tmp_path / "r")
    doc = json.loads((folder / "trace.json").read_text(encoding="utf-8"))
    check_trace(doc)
    shown = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert 0 < len(shown) <= TIMELINE_MAX_EVENTS
    assert doc["metadata"]["iterations"] == []
    assert all("iteration" not in e["args"] for e in shown)
    w = report.summary.window
    assert w.timeline_iteration is None
    assert doc["metadata"]["stretch_ns"] == [w.timeline_start_ns, w.timeline_end_ns]
    starts, _ = _sql_events(corpus_dir / name)
    kernels = sum(1 for e in shown if e["cat"] == "kernel")
    if len(starts) <= TIMELINE_MAX_EVENTS:  # every event fits: every kernel is shown
        assert kernels == len(dlprof_lite.load(corpus_dir / name).kernels)
        assert w.timeline_start_ns == int(starts.min())


@pytest.mark.corpus
def test_the_busiest_stretch_holds_the_most_gpu_time(corpus_dir: Path) -> None:
    """Oracle: every run of ``cap`` consecutive events (by start, our own SQL), summed by a
    convolution; the stretch found holds the most GPU op time there is."""
    from dlprof_lite.report.timeline import busiest_stretch

    path = corpus_dir / NO_ITERATIONS[0]
    profile = dlprof_lite.load(path)
    starts, weights = _sql_events(path)
    for cap in (500, 5000, 20_000):
        best = int(np.convolve(weights, np.ones(cap, dtype=np.int64), "valid").max())
        found = busiest_stretch(profile, cap)
        assert found is not None
        t0, t1 = found
        inside = (starts >= t0) & (starts <= t1)
        assert int(weights[inside].sum()) >= best > 0
        assert inside.sum() >= cap  # ties at the edges may add events, never drop them
