"""Why a device waits, and where the host's step goes: the causes and their precedence.

Place in the pipeline: data read by the report (:mod:`dlprof_lite.report.idle`), the views
and the docs. Each idle nanosecond of a device in an analysed step, and each nanosecond of
the main thread's step, gets exactly one cause: the first of the list below that holds at
that instant for the thread that explains it (docs/design.md "Why the step takes this
long"). The order is the precedence: a sync call inside a module's forward is ``sync`` with
that layer named beside it, not host work in the layer.

The thread that explains an idle instant of a device is the one that launched the device's
next work (the op that ends the idle stretch). Once that launch call has returned, the
host has done its part: the rest of the stretch is ``queued`` (the work waited for another
stream, an event or the device's own launch latency), not the host's.

HTA (Holistic Trace Analysis, ``get_idle_time_breakdown``) splits idle time into host wait,
kernel wait and other; we name the host's state instead, by the same precedence on the
device and on the host.
"""

from __future__ import annotations

from typing import NamedTuple


class Cause(NamedTuple):
    name: str
    words: str  # what it means in a newcomer's words: the console and the page say these
    doc: str


DEVICE = "device"
HOST = "host"

_CAUSES = (
    Cause("data", "waiting for data",
          "waiting for the next batch: the data phase (DataLoader, transfers it makes)"),
    Cause("sync", "host synchronisation (.item()/.cpu(), synchronize)",
          "host synchronisation: inside a synchronising CUDA call (cudaStreamSynchronize "
          "from .item()/.cpu(), cudaDeviceSynchronize, blocking copies, cudaFree); the layer "
          "or phase that called it beside it"),
    Cause("comm", "collective calls on the host (all-reduce)",
          "inside a collective call on the host (a DDP bucket's all-reduce, NCCL/gloo "
          "ranges)"),
    Cause("compile", "torch.compile compiling",
          "torch.compile (Dynamo/Inductor) compiling: the compile phase"),
    Cause("gc", "Python's garbage collector",
          "Python's garbage collector running (any thread of the process: it holds the "
          "interpreter)"),
    Cause("launch", "launch-bound (the host launching work)",
          "launch-bound: inside a launch call (kernel, graph, copy, memset) while the "
          "device has nothing queued"),
    Cause("layer", "host work in layers",
          "host work in the layer named beside it: inside its module range, in no "
          "call above"),
    Cause("optimizer", "optimizer host work",
          "optimizer host work: in the optimizer phase, in no layer"),
    Cause("other", "other host work (the training loop, the loss, logging)",
          "other host work inside the step (the training loop's own code, logging, "
          "the loss outside every module)"),
    Cause("queued", "queued behind other work (streams, events, launch latency)",
          "the next work was already launched: it waited for another stream, an "
          "event or the device's own launch latency, not for the host"),
    Cause("unknown", "unknown (the launch call is not in the export)",
          "no thread explains it: the next work's launch call is not in the export"),
)
CAUSE_DOCS = {c.name: c.doc for c in _CAUSES}
CAUSE_WORDS = {c.name: c.words for c in _CAUSES}
# The device partition: every cause, in precedence order.
DEVICE_CAUSES = tuple(c.name for c in _CAUSES)
# The main thread's partition: the host's own states (a launch call is its layer's work;
# the host is always known and never queued).
HOST_CAUSES = tuple(c for c in DEVICE_CAUSES if c not in ("launch", "queued", "unknown"))
# Causes that name host work of a layer or phase rather than a wait: what a step spends
# in the framework, not in waiting.
HOST_WORK = ("launch", "layer", "optimizer", "other")


def cause_column(kind: str, cause: str) -> str:
    """The iterations column of one cause: ``idle_data_ns`` (device) or ``host_data_ns``."""
    prefix = "idle" if kind == DEVICE else "host"
    return f"{prefix}_{cause}_ns"
