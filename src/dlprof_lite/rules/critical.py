"""The critical path's rules: which dependencies the graph of a step has, the tolerances that
infer those nsys does not record, and what a what-if may scale.

Place in the pipeline: data read by the report (:mod:`dlprof_lite.report.critical`), the
``whatif`` command and the docs (docs/critical-path.md). A step's graph has a node per piece
of host time (a thread's time cut where its state changes, as the idle partition cuts it)
and per GPU op; an edge says "cannot start (or end) before that one started or ended".
"""

from __future__ import annotations

from typing import NamedTuple


class EdgeKind(NamedTuple):
    name: str
    doc: str


# In the order the path prefers when two dependencies bind at the same instant.
EDGE_KINDS = (
    EdgeKind("thread", "a thread runs its pieces of time one after another"),
    EdgeKind("stream", "a stream runs its ops one after another"),
    EdgeKind("launch", "an op starts after its launch call started, plus the launch latency"),
    EdgeKind("event", "an op waited for another stream's op (an event record -> wait: "
                      "inferred, it started when that op ended)"),
    EdgeKind("sync", "a synchronising call returns after the GPU work it waits for"),
    EdgeKind("wake", "another thread's work starts where the main thread handed it over"),
    EdgeKind("join", "the main thread resumes after another thread's work it waited for"),
)
EDGE_NAMES = tuple(k.name for k in EDGE_KINDS)
EDGE = {name: i for i, name in enumerate(EDGE_NAMES)}

# An op that started more than EVENT_SLACK_NS after everything it is known to wait for,
# within EVENT_GAP_NS of another stream's op's end on its device, waited for that op (nsys
# records an event's wait, not the stream its record was on).
EVENT_SLACK_NS = 5_000
EVENT_GAP_NS = 10_000
# The launch latency of a process: this percentile of the delays, launch call start to op
# start, of its ops launched onto an idle stream (a higher one would count an op that waited
# for an event on an idle stream as launch latency).
LAUNCH_LATENCY_PERCENTILE = 10
# A piece of the main thread that another thread's work ran inside, ending within
# JOIN_GAP_NS of that work's end and at least half covered by it, waited for it (the
# backward that autograd runs on its own thread; a thread's wake-up latency is tens of
# microseconds, and under the GIL up to its switch interval).
JOIN_GAP_NS = 1_000_000

# The parts of a path: a node's own work (host or device), a dependency's latency (a launch,
# a sync's return, a wake-up) and time the path waited beyond every known dependency.
PARTS = ("host", "device", "latency", "wait")
PART_DOCS = {
    "host": "a host thread's own time (its layer's Python, launch calls, data wait)",
    "device": "GPU ops running",
    "latency": "a dependency's own delay: launch latency, a sync's return, a thread's wake-up",
    "wait": "waiting beyond every dependency the export shows (another process, an unseen "
            "event, the GPU full)",
}

# What a what-if may scale: --scale KIND=WHAT:FACTOR.
SCALE_KINDS = {
    "layer": "a layer's work, host and GPU, forward and backward (exact layer name)",
    "phase": "a phase's work, host and GPU (data, forward, backward, optimizer, compile, other)",
    "kernel": "GPU kernels whose name matches a regular expression",
}
