"""The critical path's views: the ``critical`` table (parts of the analysed steps' paths by
layer and phase) and ``critical_path`` (the timeline iteration's path, piece by piece).

Place in the pipeline: report, from :mod:`~dlprof_lite.report.critical.path`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.critical.graph import Graph
from dlprof_lite.report.critical.path import Path
from dlprof_lite.report.frames import share
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.report.model import typed_critical
from dlprof_lite.rules.critical import PARTS
from dlprof_lite.rules.idle import DEVICE_CAUSES


def critical_table(g: Graph, path: Path) -> pd.DataFrame:
    """Nanoseconds of the paths per (part, layer, phase), over the analysed steps."""
    steps = g.step_start.size
    if steps == 0 or (path.blocks.size == 0 and path.singles.size == 0):
        return typed_critical(pd.DataFrame(), "critical")
    n_layer, n_phase = g.layers.size + 1, len(PHASE_COLUMNS) + 1
    sums = np.zeros(len(PARTS) * n_layer * n_phase, dtype=np.int64)
    for p in path.chunks(g):
        key = (p.part * n_layer + g.layer[p.node] + 1) * n_phase + g.phase[p.node] + 1
        sums += np.bincount(key, weights=(p.t1 - p.t0), minlength=sums.size).astype(np.int64)
    uniq = np.flatnonzero(sums)
    total = sums[uniq]
    phase_of, rest = uniq % n_phase - 1, uniq // n_phase
    layer_of, part_of = rest % n_layer - 1, rest // n_layer
    layers = _with_none(g.layers)  # -1: none
    phases = np.array([*PHASE_COLUMNS, None], dtype=object)
    out = pd.DataFrame({
        "part": np.array(PARTS, dtype=object)[part_of],
        "layer": layers[layer_of], "phase": phases[phase_of],
        "total_ns": total, "step_mean_ns": total / steps,
        "share_pct": share(total.astype(float), np.full(total.size, float(path.length.sum())))
        * 100.0,
    })  # fmt: skip
    out = out.sort_values(["total_ns", "part", "layer", "phase"],
                          ascending=[False, True, True, True])  # fmt: skip
    return typed_critical(out, "critical")


def path_pieces(g: Graph, path: Path, iteration: int | None) -> pd.DataFrame:
    """The path of iteration ``iteration`` (its number), piece by piece in time order."""
    where = (np.flatnonzero(g.step_number == iteration) if iteration is not None
             else np.empty(0, dtype=np.int64))  # fmt: skip
    if len(where) == 0:
        return typed_critical(pd.DataFrame(), "critical_path")
    p = path.pieces(g, int(where[0]))
    order = np.lexsort((p.t1, p.t0))
    node = p.node[order]
    device = g.on_device(node)
    kernel = _with_none(g.names)  # -1: none
    causes = np.array([*DEVICE_CAUSES, None], dtype=object)
    name = np.where(device, kernel[g.name[node]], causes[g.cause[node]])
    layers = _with_none(g.layers)
    phases = np.array([*PHASE_COLUMNS, None], dtype=object)
    out = pd.DataFrame({
        "start_ns": p.t0[order], "end_ns": p.t1[order],
        "part": np.array(PARTS, dtype=object)[p.part[order]],
        "track": np.array(g.tracks, dtype=object)[g.track[node]],
        "layer": layers[g.layer[node]], "phase": phases[g.phase[node]], "name": name,
    })  # fmt: skip
    return typed_critical(out, "critical_path")


def _with_none(names: pd.Index) -> np.ndarray:
    """``names`` as an object array with None after the last (code -1: none)."""
    return np.array([*names.astype(str), None], dtype=object)
