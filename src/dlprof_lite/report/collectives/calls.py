"""Each process's collective calls: from its ``collective`` facts and ranges, else its kernels.

The annotation writes a call's fact on the calling thread just before the call's
``coll:<op>`` range opens, so a fact belongs to the first range of its op on the same
``(pid, tid)`` that starts at or after it (``merge_asof`` forward, by pid, tid and op). A
range left open (a killed process) has no end and is left out; so is a fact without a range.

On a GPU a collective's time is its communication kernel's (NCCL's kernels wait on the GPU
for their peers): a call that launched one (the first communication kernel launched from its
thread inside its range) takes that kernel's start and end. An export without our facts
(no annotation, or one from elsewhere) has only the kernels: each process's communication
kernels, per stream in the order its streams first ran one, are its calls, the n-th on a
stream being the stream's n-th instance (every rank runs a communicator's collectives in one
order), where every rank ran as many on that stream (else its order cannot pair them); the
send/receive kernels of a pipeline are left out (a stage's sends and receives interleave in
an order of its own, and a kernel names no peer: only recorded calls pair them);
their group is every rank of the export, their bytes unknown. In an export with our facts,
the communication kernels no recorded call launched (DTensor's functional collectives, a
library's own NCCL calls) are added the same way, their groups marked ``#k<n>`` (the n-th
stream) so that they never pair with a recorded group's sequence numbers.

Each call's **layer** and **pass**: an FSDP unit's collective carries them in its fact (the
unit's layer and the pass that gathered or reduced it; ``fsdp`` true); any other call takes
those of the range it was called in (its ``coll:`` range's, which ingest gives the
enclosing module range's layer and phase; none inside a DDP bucket's range, whose gradients
are many layers', report/layers/buckets.py), a kernel-only call its kernel's. Tensor-parallel
layers' collectives so land on their modules. Its **exposed** time is the part of its
duration no compute kernel of its GPU timeline overlaps; a call that ran no kernel (gloo) is
exposed whole when it blocked its thread, unknown (NaN) when asynchronous.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.numeric import cat_mask
from dlprof_lite.report.intervals import busy_per_device, covered_between
from dlprof_lite.report.ranks.table import collectives as comm_ops
from dlprof_lite.rules.collectives import (
    ALL_TO_ALL_RE,
    P2P_KERNELS,
    POINT_TO_POINT,
    RANGE_PREFIX,
    ranks_text,
)
from dlprof_lite.rules.names import COLLECTIVE, DDP_BUCKET_PREFIX, DOMAIN

CALL_COLUMNS = ("pid", "tid", "rank", "group", "op", "seq", "bytes", "dtype", "async", "peer",
                "start_ns", "end_ns", "from_kernels", "layer", "pass", "fsdp",
                "exposed_ns")  # fmt: skip


def calls_of(profile: Profile) -> pd.DataFrame:
    """:func:`collective_calls` with the ranks the ranks table gives the same processes (the
    annotation's, else the order of every pid that has facts or kernels)."""
    from dlprof_lite.report.ranks.table import ranks_of

    pids = {int(p) for p in profile.facts["pid"]}
    pids |= {int(p) for p in profile.kernels["pid"].unique()}
    return collective_calls(profile, ranks_of(profile, sorted(pids)))


def collective_calls(profile: Profile, rank_of: dict[int, int]) -> pd.DataFrame:
    """One row per call (:data:`CALL_COLUMNS`), in start order: the recorded calls (their
    kernels' times where they launched one), else the communication kernels; ``rank`` from
    ``rank_of`` (pid -> rank), the pid's order where it has none."""
    recorded = _recorded(profile, rank_of)
    kernels = profile.kernels
    if pipelined(profile) and len(kernels):  # sends and receives: never paired by order
        kernels = kernels[~np.isin(comm_ops(kernels["name"]), P2P_KERNELS)]
    busy = compute_busy(profile.kernels)  # once, for every call's exposed time
    if not len(recorded):
        return _from_kernels(kernels, rank_of, busy)
    timed, claimed = _on_the_gpu(recorded, profile.kernels, busy)
    rest = _from_kernels(kernels, rank_of, busy, claimed)
    if rest.empty:
        return timed
    both = pd.concat([timed, rest.astype({"fsdp": bool})], ignore_index=True)
    return both.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _comm_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    op = comm_ops(kernels["name"])
    found: pd.DataFrame = kernels.loc[op != "", ["pid", "tid", "stream_id", "device_id",
                                                 "start_ns", "end_ns", "api_start_ns", "layer",
                                                 "phase"]].copy()  # fmt: skip
    found["op"] = op[op != ""]
    return found


Claimed = set[tuple[int, int, int]]  # (pid, tid, launch start) of the kernels calls launched


def _on_the_gpu(calls: pd.DataFrame, kernels: pd.DataFrame,
                busy: Busy) -> tuple[pd.DataFrame, Claimed]:  # fmt: skip
    """Each call that launched a communication kernel, timed by that kernel; and the kernels
    so claimed."""
    comm = _comm_kernels(kernels)
    comm = comm.dropna(subset=["tid", "api_start_ns"])
    calls = calls.copy()
    calls["exposed_ns"] = _off_the_gpu(calls)
    if comm.empty:
        return calls, set()
    comm = comm.drop(columns=["layer", "phase"]).astype(
        {"pid": "int64", "tid": "int64", "api_start_ns": "int64"}).rename(
        columns={"start_ns": "k_start", "end_ns": "k_end", "op": "k_op"}).sort_values(
        "api_start_ns")  # fmt: skip
    c = calls.reset_index(drop=True)
    c["order"] = np.arange(len(c))
    joined = pd.merge_asof(c.sort_values("start_ns"), comm, left_on="start_ns",
                           right_on="api_start_ns", by=["pid", "tid"],
                           direction="forward").sort_values("order")  # fmt: skip
    inside = (joined["api_start_ns"] <= joined["end_ns"]).fillna(False).to_numpy(dtype=bool)
    out = c.drop(columns="order")
    out.loc[inside, "start_ns"] = joined.loc[inside, "k_start"].to_numpy(dtype=np.int64)
    out.loc[inside, "end_ns"] = joined.loc[inside, "k_end"].to_numpy(dtype=np.int64)
    timed = out.loc[inside]
    out.loc[inside, "exposed_ns"] = exposed(
        busy, timed["pid"].to_numpy(dtype=np.int64),
        joined.loc[inside, "device_id"].to_numpy(dtype=np.float64),
        timed["start_ns"].to_numpy(dtype=np.int64), timed["end_ns"].to_numpy(dtype=np.int64))
    launched = joined.loc[inside, ["pid", "tid", "api_start_ns"]].astype("int64")
    claimed = set(launched.itertuples(index=False, name=None))
    ordered = out.loc[:, list(CALL_COLUMNS)].sort_values("start_ns").reset_index(drop=True)
    return ordered, claimed


def _off_the_gpu(calls: pd.DataFrame) -> np.ndarray:
    """A call that ran no kernel: exposed whole if it blocked its thread, else unknown."""
    duration = (calls["end_ns"] - calls["start_ns"]).to_numpy(dtype=np.float64)
    found: np.ndarray = np.where(calls["async"].to_numpy(dtype=bool), np.nan, duration)
    return found


Busy = dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]  # (pid, device) -> segments


def compute_busy(kernels: pd.DataFrame) -> Busy:
    """The merged busy segments of each GPU timeline's compute kernels (not communication)."""
    if kernels.empty:
        return {}
    return busy_per_device(kernels[comm_ops(kernels["name"]) == ""])


def exposed(busy: Busy, pids: np.ndarray, devices: np.ndarray, starts: np.ndarray,
            ends: np.ndarray) -> np.ndarray:
    """Of each interval on GPU timeline ``(pid, device)``, the time no compute kernel of that
    timeline (``busy``, :func:`compute_busy`) overlaps."""
    out: np.ndarray = (ends - starts).astype(np.float64)
    for (pid, device), segments in busy.items():
        mine = (pids == pid) & (devices == device)
        if mine.any():
            out[mine] -= covered_between(segments, starts[mine], ends[mine])
    return out


def _from_kernels(kernels: pd.DataFrame, rank_of: dict[int, int], busy: Busy,
                  claimed: Claimed | None = None) -> pd.DataFrame:  # fmt: skip
    """The communication kernels as calls (``claimed``: leave those out, and mark the groups
    as the unclaimed rest)."""
    comm = _comm_kernels(kernels)
    if claimed is not None and len(comm):
        keys = zip(comm["pid"].to_numpy(dtype=np.int64),
                   comm["tid"].fillna(-1).to_numpy(dtype=np.int64),
                   comm["api_start_ns"].fillna(-1).to_numpy(dtype=np.int64), strict=True)
        comm = comm[np.fromiter((k not in claimed for k in keys), dtype=bool, count=len(comm))]
    if comm.empty:
        return pd.DataFrame(columns=list(CALL_COLUMNS))
    comm = comm.sort_values("start_ns", kind="stable")
    pids = sorted(set(comm["pid"].astype(int)))
    order = {p: i for i, p in enumerate(pids)}
    ranks = [rank_of.get(p, order[p]) for p in pids]
    everyone = ranks_text(sorted(ranks))
    # a process's streams numbered in the order they first ran a collective
    first = comm.groupby(["pid", "stream_id"], sort=False)["start_ns"].transform("min")
    comm["stream_no"] = comm.assign(first=first).groupby("pid")["first"].rank(method="dense")
    comm["seq"] = comm.groupby(["pid", "stream_no"]).cumcount() + 1
    # the n-th kernel of a stream is one instance only if every rank ran as many there
    counts = comm.groupby(["stream_no", "pid"]).size().groupby(level="stream_no").nunique()
    comm = comm[comm["stream_no"].map(counts).to_numpy() == 1]
    out = pd.DataFrame({
        "pid": comm["pid"].astype("int64"), "tid": comm["tid"],
        "rank": [rank_of.get(int(p), order[int(p)]) for p in comm["pid"]],
        "group": [f"{everyone}#k{int(n)}" if claimed is not None
                  else everyone if n == 1 else f"{everyone}#{int(n)}"
                  for n in comm["stream_no"]],
        "op": comm["op"], "seq": comm["seq"].astype("int64"), "bytes": 0, "dtype": None,
        "async": False, "peer": None, "start_ns": comm["start_ns"].astype("int64"),
        "end_ns": comm["end_ns"].astype("int64"), "from_kernels": True,
        "layer": comm["layer"].astype(object), "pass": comm["phase"].astype(object),
        "fsdp": False,
    })  # fmt: skip
    out["exposed_ns"] = exposed(busy, out["pid"].to_numpy(dtype=np.int64),
                                comm["device_id"].to_numpy(dtype=np.float64),
                                out["start_ns"].to_numpy(dtype=np.int64),
                                out["end_ns"].to_numpy(dtype=np.int64))  # fmt: skip
    return out.loc[:, list(CALL_COLUMNS)].reset_index(drop=True)


def _recorded(profile: Profile, rank_of: dict[int, int]) -> pd.DataFrame:
    """The calls the annotation recorded: facts joined to their ranges."""
    facts = profile.facts
    facts = facts[(facts["key"] == COLLECTIVE).to_numpy(dtype=bool)]
    r = profile.ranges
    if facts.empty or r.empty:
        return pd.DataFrame(columns=list(CALL_COLUMNS))
    names = r["name"]
    ours = cat_mask(r["domain"], lambda s: s == DOMAIN) & cat_mask(
        names, lambda s: s.str.startswith(RANGE_PREFIX))  # fmt: skip
    ranges = r.loc[ours, ["start_ns", "end_ns", "pid", "tid", "layer", "phase",
                          "parent_id"]].copy()  # fmt: skip
    if ranges.empty:
        return pd.DataFrame(columns=list(CALL_COLUMNS))
    ranges["op"] = names[ours].astype(str).str.slice(len(RANGE_PREFIX)).to_numpy()
    ranges = ranges.dropna(subset=["end_ns"]).astype({"pid": "int64", "tid": "int64"})
    values = list(facts["value"])
    wanted = pd.DataFrame({
        "at": facts["start_ns"].to_numpy(dtype=np.int64),
        "pid": facts["pid"].to_numpy(dtype=np.int64),
        "tid": facts["tid"].to_numpy(dtype=np.int64),
        "op": [str(v.get("op", "")) for v in values],
        "group": [str(v.get("group", "")) for v in values],
        "seq": [_int(v.get("seq")) for v in values],
        "bytes": [_int(v.get("bytes")) for v in values],
        "dtype": [v.get("dtype") for v in values],
        "async": [bool(v.get("async", False)) for v in values],
        "peer": [_int(v.get("peer")) for v in values],
        "unit": [_text(v.get("unit")) for v in values],
        "unit_pass": [_text(v.get("pass")) for v in values],
    }).sort_values("at", kind="stable")  # fmt: skip
    ranges["layer"] = ranges["layer"].astype(object)
    ranges["phase"] = ranges["phase"].astype(object)
    name_of = pd.Series(names.astype(object).to_numpy(),
                        index=r["range_id"].to_numpy(dtype=np.int64))  # fmt: skip
    parents = name_of.reindex(ranges["parent_id"].to_numpy(dtype=np.int64))
    in_bucket = parents.astype(str).str.startswith(DDP_BUCKET_PREFIX).to_numpy(dtype=bool)
    ranges.loc[in_bucket, "layer"] = None
    ranges = ranges.drop(columns="parent_id")
    ranges = ranges.sort_values("start_ns", kind="stable")
    joined = pd.merge_asof(wanted, ranges, left_on="at", right_on="start_ns",
                           by=["pid", "tid", "op"], direction="forward")  # fmt: skip
    joined = joined.dropna(subset=["start_ns", "seq"])
    # one range per call: a range two facts point at keeps the later fact (the earlier one's
    # range was never written: the process died inside it)
    joined = joined.drop_duplicates(subset=["pid", "tid", "start_ns"], keep="last")
    pids = sorted(set(joined["pid"].astype(int)))
    order = {p: i for i, p in enumerate(pids)}
    joined["rank"] = [rank_of.get(int(p), order[int(p)]) for p in joined["pid"]]
    joined["bytes"] = joined["bytes"].fillna(0)
    joined["from_kernels"] = False
    joined["fsdp"] = joined["unit"].notna()
    joined["layer"] = joined["unit"].where(joined["fsdp"], joined["layer"])
    joined["pass"] = joined["unit_pass"].where(joined["unit_pass"].notna(), joined["phase"])
    joined["exposed_ns"] = np.nan
    out = joined.astype({"start_ns": "int64", "end_ns": "int64", "seq": "int64",
                         "bytes": "int64"})  # fmt: skip
    return out.loc[:, list(CALL_COLUMNS)].sort_values("start_ns").reset_index(drop=True)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def pipelined(profile: Profile) -> bool:
    """Whether the ranks pass activations point to point (pipeline parallelism): recorded
    sends or receives, else NCCL send/receive kernels in a profile with no all-to-all range
    (NCCL runs an all-to-all as sends and receives)."""
    facts = profile.facts
    ours = facts[(facts["key"] == COLLECTIVE).to_numpy(dtype=bool)]
    if any(str(v.get("op")) in POINT_TO_POINT for v in ours["value"]):
        return True
    if profile.kernels.empty:
        return False
    ops = comm_ops(profile.kernels["name"])
    if not np.isin(ops, P2P_KERNELS).any():
        return False
    names = profile.ranges["name"].astype("category").cat.categories  # each distinct name once
    return not any(re.search(ALL_TO_ALL_RE, str(name)) for name in names)
