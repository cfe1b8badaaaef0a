"""Ingest analysis step: per-range derived columns of ``ranges`` (module direction, GPU work).

Pipeline (:mod:`dlprof_lite.ingest.load`): ``read_export`` → ``nvtx.build_ranges`` (which
already wrote ``path_id``/``parent_path_id``) → correlation → ``classify_kernels`` → ... →
**``enrich_ranges``** → ``Profile``. It runs after the Tensor Core flags are set, as
``tc_gpu_ns`` reads them.

Each range instance gets, in its own row (no aggregation across instances: that is the
report's ranges table):

* ``module_direction``: the direction of a module range ``fwd:``/``bwd:``/``rec:``, a
  ``fwd:`` range nested in a backward being a recompute
  (:func:`dlprof_lite.ingest.layers.label_ranges`);
* ``layer`` and ``phase``: what an op launched directly inside it gets
  (:func:`dlprof_lite.ingest.layers.range_layers`): the report's idle partition names the
  layer and phase of each stretch of host time by them;
* the GPU work launched inside it by nsys' ``nvtx_kern_sum`` rule
  (:func:`dlprof_lite.ingest.correlate.range_gpu_totals`): inclusive and self kernel time,
  kernel and memop counts, memop time, projected span (last GPU end - first GPU start)
  and inclusive Tensor Core kernel time.

Work and memory stay linear in the number of ranges whatever the nesting depth: totals
are passed up one level at a time, never listed per (op, enclosing range) pair.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.ingest.columns import categorical_from_codes, coerce
from dlprof_lite.ingest.correlate import range_gpu_totals
from dlprof_lite.ingest.layers import RangeLabels, label_ranges, range_layers
from dlprof_lite.ingest.paths import with_path_ids
from dlprof_lite.rules.names import DIRECTIONS

# Columns of range_gpu_totals copied onto ranges, by the same name (columns.py documents them).
GPU_WORK_COLUMNS = (
    "gpu_ns", "self_gpu_ns", "kernels", "memops", "memop_ns", "projected_ns", "tc_gpu_ns",
)  # fmt: skip


def enrich_ranges(
    ranges: pd.DataFrame,
    kernels: pd.DataFrame,
    memops: pd.DataFrame,
    labels: RangeLabels | None = None,
) -> pd.DataFrame:
    """``ranges`` with every derived column of the contract, replaced where present.

    ``kernels``/``memops`` are the correlated ops (``attach_launches``, and
    ``attribute_ranges`` to skip a second range search; ``uses_tensor_cores`` for
    ``tc_gpu_ns``, counted 0 where absent); ``labels``: ``label_ranges(ranges)``, the one
    ``assign_layers`` used (computed here when not given). The input frames are not modified.
    """
    out = ranges if "path_id" in ranges.columns else with_path_ids(ranges)
    out = out.copy(deep=False)
    labels = label_ranges(ranges) if labels is None else labels
    out["module_direction"] = categorical_from_codes(labels.module_direction, list(DIRECTIONS))
    out["layer"], out["phase"] = range_layers(labels)
    totals = range_gpu_totals(kernels, memops, ranges)  # one row per range, in its order
    for column in GPU_WORK_COLUMNS:
        out[column] = totals[column].array
    return coerce(out, "ranges")
