"""The NVTX range names the annotation layer writes and the analysis reads.

This module is the single definition of the naming convention (documented in the README):
it imports nothing heavy, so ``dlprof_lite.ingest`` may read it without torch or nvtx.

- domain: ``dlprof-lite`` for every range the annotation layer pushes;
- one ``iteration`` range per training step (one optimizer step), the default key range;
- phase ranges ``data``, ``forward``, ``backward``, ``optimizer``;
- module ranges ``fwd:<qualified name>:<type>`` and ``bwd:<qualified name>:<type>``,
  e.g. ``fwd:layer1.0.conv1:Conv2d``; the root module's qualified name is ``model``.
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
