"""Calls matched into instances, each rank's wait, and the summary per op and size.

Rows of the ``collectives`` table are (instance, rank): a group's collective with one
sequence number, on each rank that recorded it. A send and its receive are an instance of
their directed pair (``0>1``, rules/collectives.py): the n-th transfer from the sender to the
receiver on each side, numbered here in start order; one without its peer is left out. With
the window cutting, an instance counts when its last rank's call ends inside it.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from dlprof_lite.report.intervals import Segments
from dlprof_lite.report.steps.window import StepWindow
from dlprof_lite.rules.collectives import (
    PAIR_SEP,
    POINT_TO_POINT,
    SENDS,
    bus_factor,
    pair_text,
    ranks_count,
)

INSTANCE_COLUMNS = ("group", "op", "seq", "rank", "start_ns", "end_ns", "duration_ns",
                    "transfer_ns", "wait_ns", "last_rank", "ranks", "complete", "bytes",
                    "dtype", "async", "layer", "pass", "fsdp", "exposed_ns")  # fmt: skip
OP_COLUMNS = ("group", "op", "size_bytes", "ranks", "instances", "bytes_mean",
              "transfer_median_ns", "wait_mean_ns", "wait_share", "algbw_gbps",
              "busbw_gbps")  # fmt: skip


Spans = dict[int, Segments]  # pid -> its analysed steps' (start, end] bounds


def match(calls: pd.DataFrame, window: StepWindow | None = None,
          spans: Spans | None = None) -> pd.DataFrame:  # fmt: skip
    """The (instance, rank) rows of :data:`INSTANCE_COLUMNS` from :func:`.calls.collective_calls`:
    instances two or more ranks recorded, with one op on all of them; when ``window`` cuts,
    each rank's calls in its own analysed steps (``spans``: pid -> (start, end] bounds)."""
    p2p = calls["op"].isin(POINT_TO_POINT).to_numpy(dtype=bool)
    c = pd.concat([calls[~p2p], _pairs(calls[p2p])], ignore_index=True)
    if c.empty:
        return pd.DataFrame(columns=list(INSTANCE_COLUMNS))
    c["duration_ns"] = c["end_ns"] - c["start_ns"]
    # one kind per instance: the op of a collective; a send and a receive pair as one
    c["kind"] = c["op"].where(~c["op"].isin(POINT_TO_POINT), PAIR_SEP)
    by = c.groupby(["group", "seq"], sort=False)
    c["ranks"] = by["rank"].transform("nunique")
    c = c[(c["ranks"] >= 2).to_numpy(dtype=bool)
          & (by["kind"].transform("nunique") == 1).to_numpy(dtype=bool)]  # fmt: skip
    if c.empty:
        return pd.DataFrame(columns=list(INSTANCE_COLUMNS))
    by = c.groupby(["group", "seq"], sort=False)
    c["transfer_ns"] = by["duration_ns"].transform("min")
    c["wait_ns"] = c["duration_ns"] - c["transfer_ns"]
    last = c.loc[by["start_ns"].idxmax(), ["group", "seq", "rank"]]
    c = c.merge(last.rename(columns={"rank": "last_rank"}), on=["group", "seq"])
    size = {g: ranks_count(str(g)) for g in c["group"].unique()}
    c["complete"] = c["ranks"] == c["group"].map(size)
    if window is not None and window.cuts and window.start_ns is not None:
        c = c[_in_steps(c, window, spans or {})]
    out = c.loc[:, list(INSTANCE_COLUMNS)].sort_values(["start_ns", "rank"], kind="stable")
    return out.reset_index(drop=True)


def _in_steps(c: pd.DataFrame, window: StepWindow, spans: Spans) -> np.ndarray:
    """Which calls count in the window: a call of a process with analysed steps of its own
    when it ends in one of them (each rank's steps hold exactly its calls, wherever the ranks'
    steps begin: the window is the key process's); else when its instance's last call ends
    inside the window."""
    last = c.groupby(["group", "seq"])["end_ns"].transform("max").to_numpy(dtype=np.int64)
    keep: np.ndarray = (last > (window.start_ns or 0)) & (last <= (window.end_ns or 0))
    pid = c["pid"].to_numpy(dtype=np.int64)
    end = c["end_ns"].to_numpy(dtype=np.int64)
    for p, (starts, ends) in spans.items():
        mine = pid == p
        if not mine.any():
            continue
        at = np.searchsorted(ends, end[mine], side="left")  # first step ending at or after
        found = at < ends.size
        inside = np.zeros(at.size, dtype=bool)
        inside[found] = end[mine][found] > starts[at[found]]
        keep[mine] = inside
    return keep


def _pairs(calls: pd.DataFrame) -> pd.DataFrame:
    """Sends and receives with a known peer, each in its directed pair's group, numbered per
    rank in start order (the recorded numbers of an older annotation counted the group)."""
    c = calls[calls["peer"].notna().to_numpy(dtype=bool)].copy()
    if c.empty:
        return c
    rank = c["rank"].to_numpy(dtype=np.int64)
    peer = c["peer"].to_numpy(dtype=np.float64).astype(np.int64)
    sending = c["op"].isin(SENDS).to_numpy(dtype=bool)
    c["group"] = [pair_text(int(a), int(b)) for a, b in zip(np.where(sending, rank, peer),
                                                            np.where(sending, peer, rank),
                                                            strict=True)]  # fmt: skip
    c = c.sort_values("start_ns", kind="stable")
    c["seq"] = c.groupby(["rank", "group"]).cumcount() + 1
    return c


def op_summary(instances: pd.DataFrame) -> pd.DataFrame:
    """Per (group, op, size bucket: bytes rounded down to a power of two): instances, mean
    bytes, median transfer, mean wait per rank and call, the share of the calls' time spent
    waiting, and the bandwidths from the median transfer (GB/s = bytes per ns)."""
    if instances.empty:
        return pd.DataFrame(columns=list(OP_COLUMNS))
    i = instances.copy()
    b = i["bytes"].to_numpy(dtype=np.int64)
    i["size_bytes"] = np.where(b > 0, 2 ** np.floor(np.log2(np.maximum(b, 1))), 0).astype(
        np.int64)  # fmt: skip
    rows = []
    for (group, op, size), g in i.groupby(["group", "op", "size_bytes"], sort=True):
        one = g.drop_duplicates(["seq"])  # one row per instance for its bytes and transfer
        transfer = float(one["transfer_ns"].median())
        mean_bytes = float(one["bytes"].mean())
        ranks = ranks_count(str(group))
        algbw = mean_bytes / transfer if transfer > 0 and mean_bytes > 0 else float("nan")
        duration = float(g["duration_ns"].sum())
        rows.append({
            "group": group, "op": op, "size_bytes": int(cast(int, size)), "ranks": ranks,
            "instances": len(one), "bytes_mean": mean_bytes, "transfer_median_ns": transfer,
            "wait_mean_ns": float(g["wait_ns"].mean()),
            "wait_share": float(g["wait_ns"].sum()) / duration if duration > 0 else float("nan"),
            "algbw_gbps": algbw, "busbw_gbps": algbw * bus_factor(str(op), ranks),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(OP_COLUMNS))


def rank_waits(instances: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Per rank, per analysed step: ``step_coll_wait_ns`` (its own wait in collectives) and
    ``step_waited_for_ns`` (the other ranks' mean wait in the instances it arrived last at)."""
    if instances.empty:
        return pd.DataFrame(columns=["step_coll_wait_ns", "step_waited_for_ns"])
    per = max(steps, 1)
    own = instances.groupby("rank")["wait_ns"].sum() / per
    others = instances[(instances["rank"] != instances["last_rank"]).to_numpy(dtype=bool)]
    caused = others.groupby("last_rank")["wait_ns"].sum()
    n = instances.groupby("rank").size().index.size
    waited_for = caused / max(n - 1, 1) / per
    out = pd.DataFrame({"step_coll_wait_ns": own})
    out["step_waited_for_ns"] = waited_for.reindex(out.index).fillna(0.0)
    return out
