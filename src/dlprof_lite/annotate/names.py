"""The NVTX range names the annotation layer writes and the analysis reads.

This module is the single definition of the naming convention (documented in the README):
it imports nothing heavy, so ``dlprof_lite.ingest`` may read it without torch or nvtx.

- domain: ``dlprof-lite`` for every range the annotation layer pushes;
- one ``iteration`` range per training step (one optimizer step), the default key range;
- phase ranges ``data``, ``forward``, ``backward``, ``optimizer``;
- module ranges ``fwd:<qualified name>:<type>`` and ``bwd:<qualified name>:<type>``,
  e.g. ``fwd:layer1.0.conv1:Conv2d``; the root module's qualified name is ``model``.

How they are written (:mod:`dlprof_lite.annotate`):

- ``iteration`` and the phases are NVTX *start/end* ranges (process-wide: the backward may
  start on an autograd device thread); the iteration's int64 payload is its 0-based index.
  The phases tile their iteration in the order data, forward, backward, optimizer (the
  first iteration has no data phase); an iteration with no ``optimizer`` phase inside is
  incomplete: the program left its loop after fetching a batch, or stopped mid-step;
- module ranges are *push/pop* ranges on the thread that runs them: ``fwd:`` on the
  calling thread, ``bwd:`` on the thread autograd runs the module's backward on;
- a ``:`` in a qualified name (a ``ModuleDict`` key) is written as ``_``; modules without a
  known qualified name get their parent's name plus their class; roots other than the model
  (a loss module) are named by their class: ``fwd:CrossEntropyLoss:CrossEntropyLoss``.
"""

from __future__ import annotations

import re

DOMAIN = "dlprof-lite"
ITERATION = "iteration"
PHASES = ("data", "forward", "backward", "optimizer")
ROOT_MODULE = "model"
FORWARD = "fwd"
BACKWARD = "bwd"

MODULE_RANGE_RE = re.compile(r"^(?P<dir>fwd|bwd):(?P<layer>[^:]+):(?P<type>[^:]+)$")


def module_range(direction: str, qualname: str, type_name: str) -> str:
    """The range name of one module call in one direction (``fwd`` or ``bwd``)."""
    if direction not in (FORWARD, BACKWARD):
        raise ValueError(f"direction must be {FORWARD!r} or {BACKWARD!r}, not {direction!r}")
    return f"{direction}:{qualname or ROOT_MODULE}:{type_name}"
