"""Several nodes' clocks made one, on the ends of the collectives they share.

Each node's export is on its own clock. A collective ends on every rank at the same moment, to
within its completion skew (the ranks leave the last step of its algorithm together), so for
an instance both nodes hold, the difference of its median end on each is one estimate of the
clock offset between them. Per node (against the node holding the lowest rank): the offset
is the median of those estimates over the shared instances, its **error** their median
absolute deviation (the estimates' spread: the completion skew plus each clock's drift over
the run), and the node's calls are moved onto the reference clock. A node sharing no
instance with the reference keeps its clock and says so (offset and error empty).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dlprof_lite.rules.collectives import POINT_TO_POINT

OFFSET_COLUMNS = ("node", "node_ranks", "offset_ns", "error_ns", "instances")


def align(nodes: Sequence[tuple[str, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(node name, its calls)`` per node -> (every node's calls on the reference node's
    clock, one row of :data:`OFFSET_COLUMNS` per node: its offset ahead of the reference)."""
    held = [(name, calls) for name, calls in nodes if len(calls)]
    if not held:
        return pd.DataFrame(), pd.DataFrame(columns=list(OFFSET_COLUMNS))
    held.sort(key=lambda nc: int(nc[1]["rank"].min()))
    _, ref = held[0]
    ref_end = _ends(ref)
    out, rows = [], []
    for index, (name, calls) in enumerate(held):
        ranks = ",".join(map(str, sorted(set(calls["rank"].astype(int)))))
        if index == 0:
            out.append(calls)
            rows.append({"node": name, "node_ranks": ranks, "offset_ns": 0.0, "error_ns": 0.0,
                         "instances": len(ref_end)})  # fmt: skip
            continue
        shared = _ends(calls).to_frame("mine").join(ref_end.to_frame("ref"), how="inner")
        if shared.empty:
            out.append(calls)
            rows.append({"node": name, "node_ranks": ranks, "offset_ns": np.nan,
                         "error_ns": np.nan, "instances": 0})  # fmt: skip
            continue
        estimates = (shared["mine"] - shared["ref"]).to_numpy(dtype=np.float64)
        offset = float(np.median(estimates))
        error = float(np.median(np.abs(estimates - offset)))
        moved = calls.copy()
        shift = round(offset)
        moved["start_ns"] = moved["start_ns"] - shift
        moved["end_ns"] = moved["end_ns"] - shift
        out.append(moved)
        rows.append({"node": name, "node_ranks": ranks, "offset_ns": offset, "error_ns": error,
                     "instances": len(shared)})  # fmt: skip
    return pd.concat(out, ignore_index=True), pd.DataFrame(rows, columns=list(OFFSET_COLUMNS))


def _ends(calls: pd.DataFrame) -> pd.Series:
    """The median end of each collective instance (group, seq) on this node's ranks (not
    sends and receives: their ends are not simultaneous, rules/collectives.py)."""
    collective = ~calls["op"].isin(POINT_TO_POINT).to_numpy(dtype=bool)
    ends: pd.Series = calls[collective].groupby(["group", "seq"])["end_ns"].median()
    return ends
