"""Communication vs compute per rank, exposed communication and the straggler.

Place in the pipeline: report. :func:`ranks_table` gives one row per GPU timeline,
``(pid, device)``, with the rank of its process (the annotation's ``process`` fact; without
it, the processes' order by pid), over the tables' window (report/steps/window.py):

- ``compute_ns``: the union of its non-communication kernels (streams overlapping count once);
- ``comm_ns``: the union of its communication kernels (rules/comm.py: NCCL/RCCL by name);
- ``exposed_comm_ns``: communication time no compute kernel of the *same* timeline overlaps,
  ``comm - |comm ∩ compute|`` (HTA's "communication/computation overlap", per device);
- per-step means over that process's own analysed steps: its annotated ``iteration`` ranges
  (consecutive ends, the key-node rule of ingest/iterations.py) whose end lies in the window,
  else the shared analysed iterations;
- ``step_data_ns``: host time of that process's ``data`` phase ranges in the window per step.

A process that ran annotated steps but no kernel (a CPU run on gloo) is one row without a
device. The straggler rule is rules/ranks.py. All interval work is per timeline, vectorised
over its kernels (report/intervals.py).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.numeric import cat_mask, sum_by
from dlprof_lite.report.frames import groups
from dlprof_lite.report.intervals import Segments, covered_between, merge, total
from dlprof_lite.report.model import empty_ranks, typed_ranks
from dlprof_lite.report.run_facts import read_run_facts
from dlprof_lite.report.steps.window import StepWindow, cut_ops
from dlprof_lite.rules.comm import comm_kernel
from dlprof_lite.rules.names import DOMAIN, ITERATION
from dlprof_lite.rules.ranks import STRAGGLER_MIN_EXCESS, STRAGGLER_WAIT_SHARE

DATA_PHASE = "data"


def collectives(names: pd.Series) -> np.ndarray:
    """The collective each kernel name runs (``AllReduce``), '' for other kernels; each
    distinct name is parsed once."""
    cat = names.astype("category")
    lookup = [comm_kernel(str(n)) or "" for n in cat.cat.categories]
    table = np.asarray([*lookup, ""], dtype=object)  # code -1 (a missing name) -> ''
    out: np.ndarray = table[cat.cat.codes.to_numpy()]
    return out


def ranks_of(profile: Profile, pids: list[int]) -> dict[int, int]:
    """pid -> rank: the annotation's ``process`` facts when every process has one, else the
    processes' order by pid."""
    facts = dict(read_run_facts(profile.facts).ranks)
    if pids and all(p in facts for p in pids):
        return {p: int(facts[p]) for p in pids}
    return {p: i for i, p in enumerate(sorted(pids))}


def process_spans(profile: Profile, window: StepWindow) -> dict[int, Segments]:
    """Each process's analysed steps, from its own annotated ``iteration`` ranges (an
    iteration ends where its range ends and starts where the previous one ended; the first,
    at its own start); those whose end lies in the window when the window cuts."""
    it = profile.iterations
    if "pid" in it.columns:  # iterations found per process already
        chosen = it[np.isin(it["iteration"].to_numpy(), np.asarray(window.steps, dtype=np.int64))]
        return {int(cast(int, p)): (g["start_ns"].to_numpy(dtype=np.int64),
                                    g["end_ns"].to_numpy(dtype=np.int64))
                for p, g in chosen.groupby("pid")}  # fmt: skip
    r = profile.ranges
    ours = cat_mask(r["name"], lambda s: s == ITERATION) & cat_mask(
        r["domain"], lambda s: s == DOMAIN
    )
    out: dict[int, Segments] = {}
    for pid, group in r[ours].groupby("pid"):
        g = group.sort_values("end_ns")
        ends = g["end_ns"].to_numpy(dtype=np.int64)
        starts = np.concatenate([g["start_ns"].to_numpy(dtype=np.int64)[:1], ends[:-1]])
        if window.cuts:
            keep = _analysed(ends, len(profile.iterations), window)
            starts, ends = starts[keep], ends[keep]
        out[int(cast(int, pid))] = (starts, ends)
    return out


def _analysed(ends: np.ndarray, shared: int, window: StepWindow) -> np.ndarray:
    """Which of a process's steps (in order) are analysed: the window's step numbers when it
    ran as many steps as the shared iterations (synchronous ranks: step i is iteration i, so
    a slow rank's warm-up is left out too); else those ending inside the window."""
    if len(ends) == shared:
        keep: np.ndarray = np.isin(np.arange(len(ends)), np.asarray(window.steps, dtype=np.int64))
        return keep
    lo, hi = window.start_ns, window.end_ns
    if lo is None or hi is None:
        return np.zeros(len(ends), dtype=bool)
    inside: np.ndarray = (ends > lo) & (ends <= hi)
    return inside


def _shared_steps(profile: Profile, window: StepWindow) -> np.ndarray:
    it = profile.iterations
    keep = np.isin(it["iteration"].to_numpy(), np.asarray(window.steps, dtype=np.int64))
    walls: np.ndarray = it.loc[keep, "wall_ns"].to_numpy(dtype=np.int64)
    return walls


def data_time(profile: Profile, window: StepWindow) -> dict[int, int]:
    """Host time of each process's ``data`` phase ranges inside the window (their union)."""
    r = profile.ranges
    mine = r[cat_mask(r["name"], lambda s: s == DATA_PHASE)
             & cat_mask(r["domain"], lambda s: s == DOMAIN)]  # fmt: skip
    out: dict[int, int] = {}
    for pid, g in mine.groupby("pid"):
        segments = merge(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
        if window.cuts:
            t0 = np.asarray(window.starts, dtype=np.int64)
            t1 = np.asarray(window.ends, dtype=np.int64)
            out[int(cast(int, pid))] = int(covered_between(segments, t0, t1).sum())
        else:
            out[int(cast(int, pid))] = total(segments)
    return out


def comm_time(kernels: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by`` (which must split kernels by timeline: ``pid`` and ``device_id``
    first): ``kernels``, ``kernel_ns``, ``compute_ns`` (union of non-communication kernels),
    ``comm_ns`` (union of communication kernels), ``exposed_comm_ns`` (communication no
    compute kernel of the group overlaps), ``comm_kernels``. Indexed by ``by``.

    Every group is laid on its own stretch of one time line (shifted by its earliest start
    and the spans of the groups before it, one ns apart so neighbours never touch), so one
    merge and one overlap query answer all groups: no loop over groups or kernels.
    """
    columns = ["kernels", "kernel_ns", "compute_ns", "comm_ns", "exposed_comm_ns",
               "comm_kernels"]  # fmt: skip
    # A kernel without a device (or a key) has no group.
    has = np.logical_and.reduce([kernels[key].notna().to_numpy(dtype=bool) for key in by])
    if not has.any():
        return pd.DataFrame(columns=columns, index=pd.MultiIndex.from_tuples([], names=by))
    # Groups numbered on the keys' codes, and arrays of the rows kept, never a frame of
    # them: a pandas groupby of the keys held 80 MB of codes at 1M kernels.
    group, first = groups(kernels, by, has)
    s = kernels["start_ns"].to_numpy(dtype=np.int64)[has]
    e = kernels["end_ns"].to_numpy(dtype=np.int64)[has]
    n = int(group.max()) + 1
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, group, s)
    np.maximum.at(hi, group, e)
    offset = np.concatenate(([0], np.cumsum(hi - lo + 1)[:-1]))
    kernel_ns = sum_by(group, e - s, n)
    shift = offset[group]
    shift -= lo[group]
    s += shift  # in place: s and e are this function's copies (no 8 MB array per step)
    e += shift
    del shift
    talks = (collectives(kernels["name"]) != "")[has]
    if talks.any():
        compute, talk = merge(s[~talks], e[~talks]), merge(s[talks], e[talks])
    else:  # no communication kernel: no copies of every kernel's bounds
        compute, talk = merge(s, e), merge(s[:0], e[:0])
    hidden = covered_between(compute, talk[0], talk[1])
    out = pd.DataFrame({
        "kernels": np.bincount(group, minlength=n),
        "kernel_ns": kernel_ns,
        "compute_ns": _per_group(compute, compute[1] - compute[0], offset),
        "comm_ns": _per_group(talk, talk[1] - talk[0], offset),
        "exposed_comm_ns": _per_group(talk, talk[1] - talk[0] - hidden, offset),
        "comm_kernels": sum_by(group, talks.astype(np.int64), n),
    }, index=pd.MultiIndex.from_frame(kernels[by].take(first).reset_index(drop=True)))  # fmt: skip
    return out.sort_index()  # in key order, as a sorted groupby gives them


def _per_group(segments: Segments, values: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Sum of ``values`` (one per segment) per group, a segment's group by where it starts."""
    out = np.zeros(len(offset), dtype=np.int64)
    np.add.at(out, np.searchsorted(offset, segments[0], side="right") - 1, values)
    return out


def _timeline_rows(kernels: pd.DataFrame) -> list[dict[str, object]]:
    """Compute, communication and exposed communication of each ``(pid, device)``."""
    per = comm_time(kernels, ["pid", "device_id"]).reset_index()
    rows: list[dict[str, object]] = [
        {str(c): int(v) for c, v in row.items()} for row in per.to_dict("records")
    ]
    return rows


def ranks_table(
    profile: Profile, window: StepWindow, waits: pd.DataFrame | None = None,
    spans: dict[int, Segments] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """One row per GPU timeline (and per annotated process without one), by rank; ``waits``
    (report/collectives/instances.py rank_waits, by rank) when collectives were recorded;
    ``spans``: :func:`process_spans` of ``profile`` and ``window``, when already found."""
    rows = _timeline_rows(cut_ops(profile.kernels, window))
    spans = process_spans(profile, window) if spans is None else spans
    own_steps = {pid: ends - starts for pid, (starts, ends) in spans.items()}  # step walls
    seen = {int(cast(int, r["pid"])) for r in rows}
    rows += [{"pid": p, "device_id": pd.NA, "kernels": 0, "kernel_ns": 0, "compute_ns": 0,
              "comm_ns": 0,
              "exposed_comm_ns": 0, "comm_kernels": 0}
             for p in sorted(own_steps) if p not in seen]  # fmt: skip
    if not rows:
        return empty_ranks()
    frame = pd.DataFrame(rows)
    pids = sorted({int(p) for p in frame["pid"]})
    rank = ranks_of(profile, pids)
    shared = _shared_steps(profile, window)
    data = data_time(profile, window)
    frame.insert(0, "rank", frame["pid"].map(rank))
    walls = [own_steps.get(int(p), shared) for p in frame["pid"]]
    frame["steps"] = [len(w) for w in walls]
    frame["step_median_ns"] = [float(np.median(w)) if len(w) else np.nan for w in walls]
    frame["step_mean_ns"] = [float(np.mean(w)) if len(w) else np.nan for w in walls]
    frame["data_ns"] = frame["pid"].map(lambda p: data.get(int(p), 0))
    steps = frame["steps"].where(frame["steps"] > 0).astype("float64")
    for col in ("compute_ns", "comm_ns", "exposed_comm_ns", "data_ns"):
        frame[f"step_{col}"] = frame[col] / steps
    frame["overlap_pct"] = (
        (frame["comm_ns"] - frame["exposed_comm_ns"])
        / frame["comm_ns"].where(frame["comm_ns"] > 0)
        * 100.0
    )
    # the step's time its GPU computed nothing (a pipeline's bubble); GPU timelines only
    mean = frame["step_mean_ns"].where(frame["device_id"].notna() & (frame["step_mean_ns"] > 0))
    frame["bubble_pct"] = ((mean - frame["step_compute_ns"]) / mean * 100.0).clip(lower=0.0)
    for col in ("step_coll_wait_ns", "step_waited_for_ns"):
        known = waits is not None and col in waits.columns and len(waits)
        frame[col] = frame["rank"].map(waits[col]) if known else np.nan  # type: ignore[index]
    found = straggler(frame)
    frame["straggler"] = frame["rank"] == (found if found is not None else -1)
    frame = frame.sort_values(["rank", "device_id"], kind="stable").reset_index(drop=True)
    return typed_ranks(frame)


def straggler(frame: pd.DataFrame) -> int | None:
    """The rank the others wait for (rules/ranks.py), None with fewer than two ranks or
    none that stands out."""
    per = _per_rank(frame)
    if len(per) >= 2 and per["waited_for"].notna().any():
        return _waited_for_most(per)
    if len(per) < 2 or per["work"].isna().all():
        return None
    work = per["work"].to_numpy(dtype=np.float64)
    at = int(np.nanargmax(work))
    most, step = _excess(work, at), float(per["step_median_ns"].median())
    if not (most > 0 and step > 0 and most >= STRAGGLER_MIN_EXCESS * step):
        return None
    others = np.arange(len(per)) != at
    if per["comm_ns"].sum() > 0:
        waited = float(per["step_exposed_comm_ns"].to_numpy(dtype=np.float64)[others].mean())
        if waited < STRAGGLER_WAIT_SHARE * most:
            return None
    return int(per.index[at])


def _waited_for_most(per: pd.DataFrame) -> int | None:
    """With recorded collectives: the rank the others waited for most per step, when that
    wait is at least STRAGGLER_MIN_EXCESS of the median step (rules/ranks.py)."""
    caused = per["waited_for"].fillna(0.0).to_numpy(dtype=np.float64)
    step = float(per["step_median_ns"].median())
    at = int(np.argmax(caused))
    if not (step > 0 and caused[at] >= STRAGGLER_MIN_EXCESS * step):
        return None
    return int(cast(int, per.index[at]))


def _excess(values: np.ndarray, at: int) -> float:
    """``values[at]`` above the median of the other ranks' values (NaN when none of the
    others has one: a rank without steps in the window)."""
    others = np.delete(values, at)
    others = others[~np.isnan(others)]
    return float(values[at] - np.median(others)) if len(others) else float("nan")


def _per_rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Per rank: its work per step (its busiest device's compute plus its data time), the
    exposed communication of its busiest device, and its median step time."""
    by = frame.groupby("rank")
    per = pd.DataFrame({
        "compute": by["step_compute_ns"].max(), "data": by["step_data_ns"].max(),
        "step_exposed_comm_ns": by["step_exposed_comm_ns"].max(),
        "comm_ns": by["comm_ns"].sum(), "step_median_ns": by["step_median_ns"].max(),
        "waited_for": by["step_waited_for_ns"].max() if "step_waited_for_ns" in frame
        else np.nan,
    })  # fmt: skip
    per["work"] = per["compute"] + per["data"]
    return per


def communication_summary(
    frame: pd.DataFrame, wall_ns: int, scope: str = "session", pipeline: bool = False
) -> dict[str, object]:
    """The summary's ``Communication`` fields from the ranks table (metrics.py); without
    steps, exposed communication is a share of ``wall_ns``, the span ``scope`` names (the
    session, or the events' span of a trimmed capture: report/denominators.py); ``pipeline``:
    the ranks pass activations point to point, so their time without compute is a bubble."""
    out: dict[str, object] = {}  # Communication.from_values: the fields not set are None
    gpu = frame[frame["device_id"].notna()]
    if frame.empty:
        return out
    if pipeline and "bubble_pct" in gpu and gpu["bubble_pct"].notna().any():
        out["pipeline_bubble_pct"] = float(gpu["bubble_pct"].mean())
    comm, compute = int(gpu["comm_ns"].sum()), int(gpu["compute_ns"].sum())
    out.update(comm_ns=comm, comm_share=comm / (comm + compute) if comm + compute else None,
               ranks=int(frame["rank"].nunique()))  # fmt: skip
    if len(gpu):
        per_step = gpu["step_exposed_comm_ns"].astype("float64")
        mean = gpu["step_mean_ns"].astype("float64")
        if per_step.notna().any():
            out["exposed_comm_ns"] = float(per_step.mean())
            out["exposed_comm_pct"] = float((per_step / mean * 100.0).mean())
            out["exposed_comm_scope"] = "iterations"
        elif wall_ns:  # no steps: over the whole window
            out["exposed_comm_ns"] = float(gpu["exposed_comm_ns"].sum())
            exposed = float(gpu["exposed_comm_ns"].sum())
            out["exposed_comm_pct"] = exposed / (wall_ns * len(gpu)) * 100.0
            out["exposed_comm_scope"] = scope
    per = _per_rank(frame)
    medians = per["step_median_ns"].dropna()
    if len(medians) >= 2 and float(medians.median()) > 0:
        out["rank_imbalance"] = float(medians.max() / medians.median())
    hit = frame.loc[frame["straggler"].astype(bool), "rank"]
    if len(hit):
        top = int(hit.iloc[0])
        at = int(np.flatnonzero(per.index.to_numpy() == top)[0])
        data, work = per["data"].to_numpy(dtype=np.float64), per["work"].to_numpy(np.float64)
        out["straggler_rank"] = top
        out["straggler_data_ns"] = _excess(data, at)
        out["straggler_excess_ns"] = _excess(work, at)
        waited = float(per["waited_for"].to_numpy(dtype=np.float64)[at])
        if waited == waited:  # measured in the recorded collectives
            out["straggler_waited_ns"] = waited
    return out


def straggler_layer(kernels: pd.DataFrame, frame: pd.DataFrame) -> dict[str, object]:
    """The layer whose kernels hold most of the straggler's extra compute: per analysed step,
    its GPU time in each layer above the median of the other ranks' (``kernels``: the
    window's); the summary's ``straggler_layer`` and ``straggler_layer_ns``, empty without a
    straggler, kernels or a layer it spends longer in."""
    hit = frame[frame["straggler"].astype(bool)]
    if hit.empty or kernels.empty or "layer" not in kernels:
        return {}
    steps = frame.groupby("pid")["steps"].max().astype("float64")
    known = kernels[kernels["layer"].notna().to_numpy(dtype=bool)]
    if known.empty:
        return {}
    per = known.groupby(["pid", "layer"], observed=True)["dur_ns"].sum().unstack(fill_value=0)
    per = per.div(steps.reindex(per.index).where(lambda s: s > 0), axis=0).dropna(how="all")
    mine = int(cast(int, hit["pid"].iloc[0]))
    if mine not in per.index or len(per) < 2:
        return {}
    excess = (per.loc[mine] - per.drop(index=mine).median()).to_numpy(dtype=np.float64)
    at = int(np.argmax(excess))
    if not excess[at] > 0:
        return {}
    return {"straggler_layer": str(per.columns[at]), "straggler_layer_ns": float(excess[at])}
