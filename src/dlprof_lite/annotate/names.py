"""The NVTX naming convention, as the annotate stage writes it.

The definitions live in :mod:`dlprof_lite.rules.names` (one place, read by ingest and
report too); this module re-exports them so annotate code keeps importing from its own
stage. Neither module imports torch, nvtx or pandas.
"""

from __future__ import annotations

from dlprof_lite.rules.names import (
    BACKWARD,
    BACKWARD_END_MARK,
    COMPILE,
    DDP_BUCKET,
    DOMAIN,
    FACT_KEYS,
    FACT_PREFIX,
    FOLDED,
    FORWARD,
    ITERATION,
    MANUAL_MARK,
    MODULE_RANGE_RE,
    OPTIMIZER,
    PHASES,
    RECOMPUTE,
    ROOT_MODULE,
    UPDATE_MARK,
    ddp_bucket_range,
    module_range,
)

__all__ = [
    "BACKWARD",
    "BACKWARD_END_MARK",
    "COMPILE",
    "DDP_BUCKET",
    "DOMAIN",
    "FACT_KEYS",
    "FACT_PREFIX",
    "FOLDED",
    "FORWARD",
    "ITERATION",
    "MANUAL_MARK",
    "MODULE_RANGE_RE",
    "OPTIMIZER",
    "PHASES",
    "RECOMPUTE",
    "ROOT_MODULE",
    "UPDATE_MARK",
    "ddp_bucket_range",
    "module_range",
]
