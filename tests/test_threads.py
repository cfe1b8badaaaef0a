"""Thread and stream names of the timeline and trace.json (rules/threads.py), on the names
PyTorch and nsys really write, and on a real two-GPU torchrun export."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dlprof_lite.rules.threads import stream_label, thread_label, thread_labels

TORCHRUN = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"


@pytest.mark.parametrize(("pid", "tid", "name", "label"), [
    (144, 144, "python3", "main"),  # the thread whose id is its process's
    (144, 152, "python3", "thread 152"),
    (9, 30, "pt_autograd_0", "autograd 0"),  # torch autograd engine, device 0
    (9, 31, "pt_autograd_1", "autograd 1"),
    (70, 70, "pt_data_worker", "DataLoader worker"),  # numbered by thread_labels
    (9, 33, "pt_data_pin", "DataLoader pin memory"),
    (144, 188, "pt_nccl_watchdg", "NCCL watchdog"),  # names from the torchrun export
    (144, 190, "pt_nccl_heartbt", "NCCL heartbeat"),
    (9, 40, "NCCL Progress  2", "NCCL"),
    (144, 155, "CUPTI worker th", "thread 155 (CUPTI worker th)"),
    (9, 41, None, "thread 41"),
])  # fmt: skip
def test_thread_labels(pid: int, tid: int, name: str | None, label: str) -> None:
    assert thread_label(pid, tid, name) == label


def test_dataloader_workers_are_numbered_by_process() -> None:
    threads = [(50, 50, "python"), (71, 71, "pt_data_worker"), (70, 70, "pt_data_worker")]
    pairs = [(50, 50), (70, 70), (71, 71), (50, 52)]
    assert thread_labels(pairs, threads) == {
        (50, 50): "main", (70, 70): "DataLoader worker 0", (71, 71): "DataLoader worker 1",
        (50, 52): "thread 52"}  # fmt: skip
    assert stream_label(7, False) == "stream 7" and stream_label(13, True) == "stream 13 · NCCL"


@pytest.mark.corpus
def test_torchrun_export_names_its_threads_and_streams(corpus_dir: Path) -> None:
    """The export's ThreadNames, read with sqlite3 here (the oracle), are the Profile's; the
    timeline names the watchdog and main threads and the NCCL streams, and trace.json calls
    its threads what the page's lanes are called."""
    import dlprof_lite
    from dlprof_lite.render.page.timeline_chart import lanes
    from dlprof_lite.render.trace import trace_document
    from dlprof_lite.report.timeline import report_timeline

    path = corpus_dir / TORCHRUN
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT t.globalTid, s.value FROM ThreadNames t "
                            "JOIN StringIds s ON s.id = t.nameId").fetchall()  # fmt: skip
    # An empty name (one thread here) names nothing.
    want = {((g >> 24) & 0xFFFFFF, g & 0xFFFFFF): name for g, name in rows if name}
    profile = dlprof_lite.load(path)
    assert {(p, t): n for p, t, n in profile.meta.threads} == want
    frame, _, _ = report_timeline(profile)
    tracks = set(frame["track"].astype(str))
    assert {"main", "NCCL watchdog", "stream 7 · NCCL", "stream 15 · NCCL"} <= tracks, tracks
    doc = trace_document(frame, origin_ns=0)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {n for n in names if "(overlapping" not in n and "(concurrent" not in n} == tracks
    lane_names = set(lanes(frame)[1])
    assert {"pid 144 · main", "pid 144 · NCCL watchdog · CUDA API",
            "GPU 0 · stream 7 · NCCL"} <= lane_names, lane_names  # fmt: skip
