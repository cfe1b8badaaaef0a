"""What the timeline and trace.json call each CPU thread and each CUDA stream.

Place in the pipeline: rules (cited data; report/timeline.py names every event's track with
it, the page's timeline and trace.json show those names). A thread is named from the OS name
nsys recorded for it (``ThreadNames``) by the first rule that matches, else by its role:

- ``main``: the thread whose id is its process id (the thread that ran the script);
- the rules below: names PyTorch gives its own threads;
- else ``thread <tid>``, with its OS name when that says more than the interpreter's.

A stream is ``stream <id>``, ``stream <id> · NCCL`` when it runs communication kernels
(rules/comm.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# (OS thread name pattern, label; {0}: the pattern's first group), each with its source.
THREAD_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # torch/csrc/autograd/engine.cpp: each device's backward thread calls
    # c10::setThreadName("pt_autograd_" + device index).
    (re.compile(r"^pt_autograd_(\d+)$"), "autograd {0}"),
    # torch/utils/data/_utils/worker.py _worker_loop: _set_thread_name("pt_data_worker"),
    # the worker process's main thread; numbered by process id (report/timeline.py).
    (re.compile(r"^pt_data_worker$"), "DataLoader worker"),
    # torch/utils/data/_utils/pin_memory.py _pin_memory_loop: _set_thread_name("pt_data_pin").
    (re.compile(r"^pt_data_pin$"), "DataLoader pin memory"),
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: "pt_nccl_watchdg", "pt_nccl_heartbt".
    (re.compile(r"^pt_nccl_watchdg"), "NCCL watchdog"),
    (re.compile(r"^pt_nccl_heartbt"), "NCCL heartbeat"),
    # NCCL's own proxy and service threads ("NCCL Progress", "NCCL Service").
    (re.compile(r"nccl", re.IGNORECASE), "NCCL"),
)
DATALOADER_WORKER = "DataLoader worker"
# OS names that say nothing beyond "a thread of this interpreter".
PLAIN_NAMES = re.compile(r"^(python[\d.]*|)$")


def thread_label(pid: int, tid: int, os_name: str | None) -> str:
    """The label of one thread (a DataLoader worker without its number: see
    :func:`thread_labels`)."""
    name = os_name or ""
    for pattern, label in THREAD_RULES:
        found = pattern.search(name)
        if found:
            return label.format(*found.groups())
    if tid == pid:
        return "main"
    return f"thread {tid}" if PLAIN_NAMES.match(name) else f"thread {tid} ({name})"


def thread_labels(
    pairs: Iterable[tuple[int, int]], threads: Iterable[tuple[int, int, str]]
) -> dict[tuple[int, int], str]:
    """``{(pid, tid): label}`` for every pair; ``threads`` are the capture's (pid, tid, OS
    name). DataLoader workers are numbered 0, 1, ... in process-id order."""
    names = {(p, t): n for p, t, n in threads}
    labels = {(p, t): thread_label(p, t, names.get((p, t))) for p, t in pairs}
    workers = sorted({p for p, t, n in threads if thread_label(p, t, n) == DATALOADER_WORKER})
    number = {pid: k for k, pid in enumerate(workers)}
    return {key: f"{DATALOADER_WORKER} {number[key[0]]}" if label == DATALOADER_WORKER else label
            for key, label in labels.items()}  # fmt: skip


def stream_label(stream_id: int, communicates: bool) -> str:
    return f"stream {stream_id} · NCCL" if communicates else f"stream {stream_id}"
