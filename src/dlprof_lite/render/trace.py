"""``trace.json``: a timeline frame as a Chrome trace-event document (Perfetto, chrome://tracing).

Place in the pipeline: report, a renderer of the ``timeline`` table (report/timeline.py).
:func:`trace_document` turns its rows into the trace-event "JSON Object Format"
(``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``):

- every event is a complete event (``ph: "X"``) with ``ts``/``dur`` in microseconds from
  ``origin_ns``, as floats that keep every nanosecond (``ts * 1000`` rounds back to the ns);
- tracks: one process per profiled process (its NVTX ranges and CUDA API calls on their
  thread), one process per GPU (``GPU <device>``, process id :data:`GPU_PID_BASE` + device,
  above any Linux pid) with one thread per stream (thread id = stream id); each thread
  named by the frame's ``track`` (``main``, ``autograd 0``, ``stream 7``: the names the
  page's timeline shows, rules/threads.py);
- trace viewers draw a track as a stack of properly nested slices, and Perfetto drops a
  slice that overlaps another without nesting. Events that do (concurrent kernels on one
  stream, start/end ranges crossing other ranges) move to a sub-track of their own beside
  their thread or stream (:func:`track_lanes`), so no two slices on a track overlap unless
  one holds the other;
- a flow arrow (``ph: "s"`` at the launch call, ``ph: "f"``, ``bp: "e"`` at the GPU op) for
  each launch call and GPU op of the frame that share a process and correlation id;
- ``args`` hold the layer, phase and iteration, and the ids a reader needs (correlation id,
  device, stream, the real thread of a sub-track). Names are data: ``json.dumps`` escapes them;
- given the iteration's critical path (the report's ``critical_path``), a process of its own
  on top (``critical path``, process id :data:`CRITICAL_PID`) holds its pieces in time
  order, and a flow arrow (``cat: "critical"``) goes wherever the path passes from one
  thread or stream to another: from the middle of the piece it leaves to the start of the
  piece it reaches, on their own tracks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

GPU_KINDS = ("kernel", "memcpy", "memset")
# A GPU's process id in the trace: above any Linux pid (pid_max is at most 2^22).
GPU_PID_BASE = 1 << 30
# Sub-track thread ids are numbered from here (above any Linux tid and any stream id).
LANE_TID_BASE = 1 << 29
# The critical path's process in the trace: below the GPUs', above any Linux pid.
CRITICAL_PID = GPU_PID_BASE - 1
Event = dict[str, Any]


def track_lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The sub-track (0 = the track itself) of each event so that, on every (track, lane),
    any two events are disjoint or one holds the other: a first-fit over each lane's stack
    of open slices, in start order (longest first among equal starts)."""
    lanes = np.zeros(len(track), dtype=np.int64)
    order = np.lexsort((-end, start, track))
    ends, starts = end.tolist(), start.tolist()
    tracks = track.tolist()
    current: object = None
    stacks: list[list[int]] = []
    for i in order.tolist():
        if tracks[i] != current:
            current, stacks = tracks[i], []
        s, e = starts[i], ends[i]
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= s:  # slices ended by now close
                stack.pop()
            if not stack or stack[-1] >= e:  # disjoint from or inside the open slice
                stack.append(e)
                lanes[i] = k
                break
        else:
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


def _values(series: pd.Series) -> list[Any]:
    """Plain Python values, None where missing."""
    values: list[Any] = series.astype(object).where(series.notna(), None).tolist()
    return values


def _tracks(events: pd.DataFrame) -> pd.DataFrame:
    """Each event's trace process (``tpid``), thread (``ttid``) and the thread it stands for
    (``lane`` 0: the thread or stream itself)."""
    gpu = events["kind"].isin(GPU_KINDS).to_numpy(dtype=bool)
    device = events["device_id"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    stream = events["stream_id"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    pid = events["pid"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    tid = events["tid"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    tpid = np.where(gpu, GPU_PID_BASE + device, pid)
    base = np.where(gpu, stream, tid)
    key, _ = pd.factorize(pd.MultiIndex.from_arrays([tpid, base]))
    start = events["start_ns"].to_numpy(dtype=np.int64)
    lane = track_lanes(key, start, events["end_ns"].to_numpy(dtype=np.int64))
    out = pd.DataFrame({"tpid": tpid, "base": base, "lane": lane, "gpu": gpu,
                        "label": _labels(events, gpu, base)})  # fmt: skip
    # Sub-tracks get fresh thread ids, numbered in (process, thread, lane) order.
    extra = out.loc[lane > 0, ["tpid", "base", "lane"]].drop_duplicates()
    extra = extra.sort_values(["tpid", "base", "lane"])
    extra["ttid"] = LANE_TID_BASE + np.arange(len(extra), dtype=np.int64)
    merged = out.merge(extra, how="left", on=["tpid", "base", "lane"], validate="many_to_one")
    out["ttid"] = merged["ttid"].fillna(out["base"]).to_numpy(dtype=np.int64)
    return out


def _labels(events: pd.DataFrame, gpu: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Each event's thread name: its ``track`` (the page's row name, rules/threads.py), else
    (a frame without one) ``thread <tid>`` / ``stream <id>``."""
    plain: np.ndarray = np.where(gpu, "stream ", "thread ").astype(object) + base.astype(str)
    if "track" not in events:
        return plain
    track = events["track"].astype(object)
    named = track.where(track.notna(), pd.Series(plain, index=events.index))
    return np.asarray(named.to_numpy(), dtype=object)


def _metadata(tracks: pd.DataFrame) -> list[Event]:
    """Process and thread names, CPU processes above GPUs, each sub-track below its thread."""
    out: list[Event] = []
    procs = tracks.drop_duplicates("tpid").sort_values(["gpu", "tpid"])
    for rank, (tpid, gpu) in enumerate(zip(procs["tpid"].tolist(), procs["gpu"].tolist())):
        name = f"GPU {tpid - GPU_PID_BASE}" if gpu else f"process {tpid}"
        out.append(_meta("process_name", tpid, 0, {"name": name}))
        out.append(_meta("process_sort_index", tpid, 0, {"sort_index": rank}))
    threads = tracks.drop_duplicates(["tpid", "ttid"]).sort_values(["tpid", "base", "lane"])
    rows = zip(*(threads[c].tolist() for c in ("tpid", "ttid", "label", "lane", "gpu")))
    for rank, (tpid, ttid, label, lane, gpu) in enumerate(rows):
        name = str(label)
        if lane:
            name += f" ({'concurrent' if gpu else 'overlapping'} {lane})"
        out.append(_meta("thread_name", tpid, ttid, {"name": name}))
        out.append(_meta("thread_sort_index", tpid, ttid, {"sort_index": rank}))
    return out


def _meta(name: str, pid: int, tid: int, args: Event) -> Event:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args}


_ARG_COLUMNS = ("layer", "phase", "iteration", "correlation_id", "full_name", "domain",
                "depth", "device_id", "stream_id", "tid")  # fmt: skip


def _slices(events: pd.DataFrame, tracks: pd.DataFrame, origin_ns: int) -> list[Event]:
    """One complete event per row, in start order, the longer first among equal starts (a
    viewer meets a parent before its children)."""
    start = events["start_ns"].to_numpy(dtype=np.int64)
    end = events["end_ns"].to_numpy(dtype=np.int64)
    # int64 differences below 2^53 are exact doubles; one IEEE division rounds correctly,
    # so ts * 1000 gives the nanosecond back.
    ts = ((start - origin_ns).astype(np.float64) / 1000.0).tolist()
    dur = ((end - start).astype(np.float64) / 1000.0).tolist()
    names, kinds = _values(events["name"].astype(object)), _values(events["kind"].astype(object))
    tpid, ttid = tracks["tpid"].tolist(), tracks["ttid"].tolist()
    columns = {c: _values(events[c].astype(object)) for c in _ARG_COLUMNS}
    keep_full = [f != n for f, n in zip(columns["full_name"], names)]
    out: list[Event] = []
    for i in np.lexsort((start - end, start)).tolist():
        args = {c: v[i] for c, v in columns.items() if v[i] is not None}
        if not keep_full[i]:
            args.pop("full_name", None)
        out.append({"ph": "X", "cat": kinds[i], "name": names[i], "ts": ts[i], "dur": dur[i],
                    "pid": tpid[i], "tid": ttid[i], "args": args})  # fmt: skip
    return out


def _flows(events: pd.DataFrame, tracks: pd.DataFrame, origin_ns: int) -> list[Event]:
    """A flow from each launch call to each GPU op of its (process, correlation id)."""
    frame = pd.DataFrame({
        "kind": events["kind"].astype(object).to_numpy(),
        "pid": events["pid"].astype("Int64").to_numpy(),
        "correlation_id": events["correlation_id"].astype("Int64").to_numpy(),
        "start_ns": events["start_ns"].to_numpy(dtype=np.int64),
        "tpid": tracks["tpid"].to_numpy(), "ttid": tracks["ttid"].to_numpy(),
    }).dropna(subset=["pid", "correlation_id"])  # fmt: skip
    calls = frame[frame["kind"] == "api"]
    ops = frame[frame["kind"].isin(GPU_KINDS)]
    pairs = calls.merge(ops, on=["pid", "correlation_id"], suffixes=("_call", "_op"))
    pairs = pairs.sort_values(["start_ns_op", "start_ns_call"], kind="stable")
    out: list[Event] = []
    cols = ("start_ns_call", "tpid_call", "ttid_call", "start_ns_op", "tpid_op", "ttid_op")
    rows = zip(*(pairs[c].tolist() for c in cols))
    for flow_id, (t_call, p_call, d_call, t_op, p_op, d_op) in enumerate(rows, start=1):
        common = {"cat": "launch", "name": "launch", "id": flow_id}
        out.append({"ph": "s", **common, "ts": (t_call - origin_ns) / 1000,
                    "pid": p_call, "tid": d_call})  # fmt: skip
        out.append({"ph": "f", "bp": "e", **common, "ts": (t_op - origin_ns) / 1000,
                    "pid": p_op, "tid": d_op})  # fmt: skip
    return out


def trace_document(
    events: pd.DataFrame, *, origin_ns: int, metadata: Mapping[str, object] | None = None,
    critical: pd.DataFrame | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The Chrome trace-event document of a timeline-shaped frame (report/timeline.py),
    times relative to ``origin_ns`` (session clock); ``metadata`` joins the document's own
    (where the events came from, say); ``critical``: the frame's iteration's critical path."""
    frame = events.reset_index(drop=True)
    meta: dict[str, Any] = {"origin_ns": int(origin_ns), "clock": "nsys session clock, ns",
                            "events": len(frame), **(metadata or {})}  # fmt: skip
    if frame.empty:
        return {"traceEvents": [], "displayTimeUnit": "ms", "metadata": meta}
    tracks = _tracks(frame)
    flows = _flows(frame, tracks, origin_ns)
    trace = [
        *_metadata(tracks),
        *_slices(frame, tracks, origin_ns),
        *flows,
    ]
    if critical is not None and not critical.empty:
        trace += _critical_path(critical.reset_index(drop=True), frame, origin_ns,
                                first_id=len(flows) // 2 + 1)  # fmt: skip
    return {"traceEvents": trace, "displayTimeUnit": "ms", "metadata": meta}


def _critical_path(path: pd.DataFrame, events: pd.DataFrame, origin_ns: int, first_id: int
                   ) -> list[Event]:  # fmt: skip
    """The critical path's own track, and a flow wherever it changes thread or stream."""
    out = [_meta("process_name", CRITICAL_PID, 0, {"name": "critical path"}),
           _meta("process_sort_index", CRITICAL_PID, 0, {"sort_index": -1}),
           _meta("thread_name", CRITICAL_PID, 1, {"name": "critical path"})]  # fmt: skip
    start = path["start_ns"].to_numpy(dtype=np.int64)
    end = path["end_ns"].to_numpy(dtype=np.int64)
    texts = {c: _values(path[c].astype(object)) for c in ("part", "layer", "phase", "track",
                                                          "name")}  # fmt: skip
    for i in range(len(path)):
        args = {c: v[i] for c, v in texts.items() if v[i] not in (None, "")}
        name = texts["name"][i] or texts["layer"][i] or texts["part"][i]
        out.append({"ph": "X", "cat": f"critical:{texts['part'][i]}", "name": name,
                    "ts": (start[i] - origin_ns) / 1000, "dur": (end[i] - start[i]) / 1000,
                    "pid": CRITICAL_PID, "tid": 1, "args": args})  # fmt: skip
    found = {str(t): _track_of(str(t), events) for t in set(texts["track"])}  # a few tracks
    where = [found[str(t)] for t in texts["track"]]
    flow_id = first_id
    for i in range(len(path) - 1):
        here, there = where[i], where[i + 1]
        if here is None or there is None or here == there:
            continue
        common = {"cat": "critical", "name": "critical path", "id": flow_id}
        out.append({"ph": "s", **common, "ts": ((start[i] + end[i]) / 2 - origin_ns) / 1000,
                    "pid": here[0], "tid": here[1]})  # fmt: skip
        out.append({"ph": "f", "bp": "e", **common, "ts": (start[i + 1] - origin_ns) / 1000,
                    "pid": there[0], "tid": there[1]})  # fmt: skip
        flow_id += 1
    return out


def _track_of(track: str, events: pd.DataFrame) -> tuple[int, int] | None:
    """The trace (process, thread) of a critical path piece's track: ``thread <tid>`` on its
    process (the one the frame's events of that thread have), ``GPU <d> stream <s>``."""
    words = track.split()
    if len(words) == 4 and words[0] == "GPU" and words[2] == "stream":
        return GPU_PID_BASE + int(words[1]), int(words[3])
    if len(words) == 2 and words[0] == "thread":
        tid = int(words[1])
        mine = events[(events["tid"].astype("Int64") == tid).fillna(False).to_numpy(bool)
                      & ~events["kind"].isin(GPU_KINDS).to_numpy(bool)]  # fmt: skip
        if len(mine):
            return int(mine["pid"].iloc[0]), tid
    return None


def trace_origin(events: pd.DataFrame) -> int:
    """A natural ``origin_ns``: the first event's start (0 without events)."""
    return int(events["start_ns"].min()) if len(events) else 0


def trace_text(
    events: pd.DataFrame,
    *,
    origin_ns: int | None = None,
    metadata: Mapping[str, object] | None = None,
    critical: pd.DataFrame | None = None,
) -> str:
    """``trace.json``'s text: :func:`trace_document` as ASCII JSON (a name's odd characters,
    lone surrogates included, escaped), origin the first event's start unless given."""
    origin = trace_origin(events) if origin_ns is None else origin_ns
    doc = trace_document(events, origin_ns=origin, metadata=metadata, critical=critical)
    return json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
