"""Fixture builders shared by the tests: hand-built frames and Profiles with round numbers.

Two levels, both shaped like the product's output (phases and ``iteration`` are NVTX
start/end ranges, top-level; module ranges push/pop):

- :func:`ranges`: a contract ``ranges`` table from compact rows, for the ingest-step tests
  (iterations, key ranges, layers) that call one function on it;
- :func:`make_profile`: a whole :class:`Profile`. A test names only what it cares about: a
  few kernels, memops and NVTX range specs :class:`R` (:func:`phase` for start/end ones).
  The factory fills every other contract column (base and derived) the way the ingest
  stage defines them, so the result passes the Profile's column checks; the ranges'
  derived columns (chain ids, module direction, GPU work per range) come from ingest's own
  functions (``paths.with_path_ids``, ``range_columns.enrich_ranges``), not a copy:

  - ranges get ids in start order, depth, parent and path from the nesting given;
  - an op's ``range_id`` is the innermost push/pop range on its thread whose span holds its
    launch call's start, else the latest-started start/end range holding it;
    ``layer``/``layer_type``/``direction`` come from the innermost ``fwd:``/``bwd:`` range,
    ``phase`` from the innermost phase range (else ``other``), ``iteration`` from the window
    ``(start, end]`` holding the launch;
  - ``host_gap_ns`` is stated by the test.

:func:`example_profiles.training_profile` is the shared example built with them.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dlprof_lite.ingest.columns import base_columns, check_frame, coerce
from dlprof_lite.ingest.paths import with_path_ids
from dlprof_lite.ingest.profile import Meta, Profile
from dlprof_lite.ingest.range_columns import enrich_ranges
from dlprof_lite.rules.names import DDP_BUCKET_RE, DOMAIN, MODULE_RANGE_RE, PHASES

PID, TID = 1, 10
PUSH_POP, START_END = "push_pop", "start_end"


@dataclass
class R:
    """A range spec: ``R(name, start, end, [children])`` (push/pop on PID/TID by default).

    A start/end range (``style=START_END``, see :func:`phase`) takes no children: the ingest
    stage puts such ranges at depth 0 with no parent and never under or over a push/pop one.
    """

    name: str
    start: int
    end: int
    children: list[R] = field(default_factory=list)
    domain: str = DOMAIN
    style: str = PUSH_POP
    tid: int = TID


def phase(name: str, start: int, end: int, tid: int = TID) -> R:
    """``iteration`` or a phase range as the annotation writes them: NVTX start/end
    (``range_start``/``range_end``), not push/pop (annotate/phases.py)."""
    return R(name, start, end, style=START_END, tid=tid)


def _flatten(specs: Sequence[R]) -> pd.DataFrame:
    rows: list[dict] = []

    def walk(spec: R, depth: int, parent: int, path: str) -> None:
        me = len(rows)
        full = f"{path}/{spec.name}" if path else spec.name
        start_end = spec.style == START_END
        if start_end and (spec.children or depth):
            raise ValueError(f"start/end range {spec.name!r} nested: ingest keeps them top-level")
        rows.append(
            dict(name=spec.name, domain=spec.domain, style=spec.style, pid=PID, tid=spec.tid,
                 start_ns=spec.start,
                 end_ns=spec.end, closed=True, depth=depth, parent=parent, path=full)
        )  # fmt: skip
        for child in spec.children:
            walk(child, depth + 1, me, full)

    for spec in specs:
        walk(spec, 0, -1, "")
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    order = np.argsort(frame["start_ns"].to_numpy(), kind="stable")
    new_id = np.empty(len(frame), dtype=np.int64)
    new_id[order] = np.arange(len(frame))
    frame["range_id"] = new_id
    frame["parent_id"] = [new_id[p] if p >= 0 else -1 for p in frame["parent"]]
    return frame.drop(columns="parent").sort_values("range_id").reset_index(drop=True)


def build_ranges(specs: Sequence[R]) -> pd.DataFrame:
    frame = _flatten(specs)
    if frame.empty:
        from dlprof_lite.ingest.columns import empty_frame

        return with_path_ids(empty_frame("ranges"))
    for col in ("name", "domain", "style", "path"):
        frame[col] = frame[col].astype("category")
    return with_path_ids(coerce(frame, "ranges"))


def query(path: Path, sql: str, params: Sequence[object] = ()) -> list[tuple]:
    """Rows of ``sql`` on an export opened read-only: the tests read what nsys wrote straight
    from its tables (an oracle independent of our reader) and never change the file."""
    with closing(sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)) as db:
        return db.execute(sql, tuple(params)).fetchall()


def foreign_sqlite(path: Path) -> Path:
    """A valid SQLite database that is no nsys export (one unrelated table), at ``path``."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE fruit (name TEXT)")
        db.execute("INSERT INTO fruit VALUES ('apple')")
        db.commit()
    return path


def query_frame(path: Path, sql: str) -> pd.DataFrame:
    """:func:`query` as a DataFrame with the query's column names."""
    with closing(sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)) as db:
        return pd.read_sql_query(sql, db)


def ops(table: str, rows: Sequence[Mapping[str, object]], **defaults: object) -> pd.DataFrame:
    """A contract-shaped ``kernels`` or ``memops`` frame of base columns (no derived ones but
    ``range_id``/``range_path`` when given): each row's own keys, then ``defaults``, then
    zero for every other integer column, pid 1, device 0, stream 7, correlation id = row
    index and ``dur_ns = end_ns - start_ns``. Checked against the contract."""
    full = []
    for i, row in enumerate(rows):
        rec: dict[str, object] = {
            c.name: 0 for c in base_columns(table) if c.dtype in ("int64", "int32")
        }
        rec.update(name="k", short_name="k", kind="memcpy", copy_kind="HtoD")
        rec.update(src_mem="pageable", dst_mem="device", graph_node_id=pd.NA, tid=pd.NA)
        rec.update(api_name=pd.NA, api_start_ns=pd.NA, api_end_ns=pd.NA)
        rec.update(pid=1, device_id=0, stream_id=7, correlation_id=i)
        rec.update(defaults)
        rec.update(row)
        rec["dur_ns"] = int(rec["end_ns"]) - int(rec["start_ns"])  # type: ignore[call-overload]
        full.append(rec)
    names = [c.name for c in base_columns(table)]
    extra = [c for c in ("range_id", "range_path") if c in defaults or any(c in r for r in rows)]
    frame = coerce(pd.DataFrame(full, columns=names + extra), table)
    check_frame(frame, table, derived=False)
    return frame


def nvtx_events(rows: Sequence[tuple]) -> pd.DataFrame:
    """A contract ``nvtx_events`` frame (the reader's output, before nesting) from rows
    ``(name, start, end|None, style, pid, tid[, end_tid|None[, domain]])``; domain "" unless
    given; the closing thread (``end_tid``) is not read from exports, nor kept here. Times
    and ids go in as Python ints: no float ever rounds a 2**62-scale value."""

    def column(i: int, dtype: str, default: object = None) -> pd.api.extensions.ExtensionArray:
        return pd.array([r[i] if len(r) > i else default for r in rows], dtype=dtype)

    frame = pd.DataFrame(
        {
            "start_ns": column(1, "int64"),
            "end_ns": column(2, "Int64"),
            "name": [r[0] for r in rows],
            "domain": [r[7] if len(r) > 7 else "" for r in rows],
            "style": [r[3] for r in rows],
            "pid": column(4, "int64"),
            "tid": column(5, "int64"),
        }
    )
    frame = coerce(frame, "nvtx_events")
    check_frame(frame, "nvtx_events", derived=False)
    return frame


def ranges(rows: Sequence[tuple]) -> pd.DataFrame:
    """A contract ``ranges`` table from rows ``(name, start, end, parent_index[, extras])``
    in start order.

    Depth and path follow the parent chain; pid 1, tid 1, push/pop, default domain, closed,
    unless the ``extras`` dict says otherwise. A start/end range (``extras`` style
    ``START_END``) must have parent -1 and parent nothing, as ingest builds them.
    """
    out: list[dict] = []
    for i, (name, start, end, parent, *more) in enumerate(rows):
        depth = 0 if parent < 0 else out[parent]["depth"] + 1
        path = name if parent < 0 else f"{out[parent]['path']}/{name}"
        rec = {
            "range_id": i, "name": name, "domain": "", "style": PUSH_POP, "pid": 1,
            "tid": 1, "start_ns": start, "end_ns": end, "closed": True,
            "depth": depth, "parent_id": parent, "path": path,
        }  # fmt: skip
        rec.update(more[0] if more else {})
        if parent >= 0 and START_END in (rec["style"], out[parent]["style"]):
            raise ValueError(f"start/end nesting at {name!r}: ingest keeps them top-level")
        out.append(rec)
    frame = coerce(pd.DataFrame(out, columns=[c.name for c in base_columns("ranges")]), "ranges")
    check_frame(frame, "ranges", derived=False)
    return frame


def _innermost(ranges: pd.DataFrame, tid: int, t: int, pick=None) -> dict | None:
    """The range holding time ``t`` (and matching ``pick``) as the ingest stage picks it, as a
    dict: the deepest push/pop range on ``tid``, else the latest-started start/end range (those
    are process-wide: one may begin and end on different threads). No thread (an op without
    a launch call): no range."""
    if tid is pd.NA:
        return None
    pushed = started = None
    for r in ranges.itertuples(index=False):
        if not (r.start_ns <= t < r.end_ns) or (pick is not None and not pick(r)):
            continue
        if r.style == START_END:
            if started is None or r.range_id > started.range_id:
                started = r
        elif r.tid == tid and (pushed is None or r.depth > pushed.depth):
            pushed = r
    best = pushed if pushed is not None else started
    return None if best is None else best._asdict()


_OP_DEFAULTS = dict(
    device_id=0, context_id=1, stream_id=7, pid=PID, tid=TID, correlation_id=0,
    graph_node_id=pd.NA, host_gap_ns=0,
)  # fmt: skip


def _derive(op: dict, ranges: pd.DataFrame, iterations: pd.DataFrame) -> dict:
    """Fill derived columns of one op spec (explicit keys win)."""
    out = {**_OP_DEFAULTS, **op}
    out["end_ns"] = out["start_ns"] + out["dur_ns"]
    launch = out.get("api_start_ns")
    has_api = launch is not None and launch is not pd.NA
    t = launch if has_api else out["start_ns"]
    inner = _innermost(ranges, out["tid"], t) if len(ranges) else None
    module = _innermost(ranges, out["tid"], t, lambda r: MODULE_RANGE_RE.match(r.name) is not None)
    phase = _innermost(ranges, out["tid"], t, lambda r: r.name in PHASES)
    bucket = _innermost(ranges, out["tid"], t, lambda r: DDP_BUCKET_RE.match(r.name) is not None)
    if bucket is not None and (module is None or bucket["depth"] > module["depth"]):
        module = None  # a DDP bucket's all-reduce belongs to no layer
    bucket_id = None
    if bucket is not None and module is None:
        bucket_id = int(DDP_BUCKET_RE.match(bucket["name"])["id"])
    m = MODULE_RANGE_RE.match(module["name"]) if module else None
    derived = dict(
        range_id=inner["range_id"] if inner else pd.NA,
        range_path=inner["path"] if inner else pd.NA,
        layer=m["layer"] if m else pd.NA,
        layer_type=m["type"] if m else pd.NA,
        direction=_direction(m, ranges, out["tid"], t),
        phase=phase["name"] if phase else ("backward" if bucket_id is not None else "other"),
        ddp_bucket=pd.NA if bucket_id is None else bucket_id,
        iteration=_iteration_of(t, iterations),
    )
    if not has_api:
        out.update(api_start_ns=pd.NA, api_end_ns=pd.NA, api_name=pd.NA)
    return {**derived, **out}


def _direction(m: re.Match | None, ranges: pd.DataFrame, tid: int, t: int) -> object:
    """forward/backward from the innermost module range; recompute for a ``rec:`` range, or
    a ``fwd:`` one while a ``bwd:``/``rec:`` range on the same thread also holds ``t``."""
    if m is None:
        return pd.NA
    if m["dir"] == "fwd":
        outer = _innermost(ranges, tid, t, lambda r: r.name.startswith(("bwd:", "rec:")))
        return "recompute" if outer is not None else "forward"
    return {"bwd": "backward", "rec": "recompute"}[m["dir"]]


def _iteration_of(t: int, iterations: pd.DataFrame) -> object:
    for it in iterations.itertuples(index=False):
        if it.start_ns < t <= it.end_ns or (it.iteration == 0 and t == it.start_ns):
            return it.iteration
    return pd.NA


def build_kernels(specs: Sequence[dict], ranges: pd.DataFrame, iterations: pd.DataFrame):
    rows = []
    for i, spec in enumerate(specs):
        row = {"correlation_id": 1000 + i, **spec}
        row.setdefault("short_name", row["name"])
        tc = row.pop("tc", False)
        row.setdefault("tc_class", "tc" if tc else "no_tc")
        row.setdefault("uses_tensor_cores", row["tc_class"] == "tc")
        row.setdefault("tc_rule", "test-tc" if tc else "test-no-tc")
        rows.append(_derive(row, ranges, iterations))
    return _frame(rows, "kernels")


def build_memops(specs: Sequence[dict], ranges: pd.DataFrame, iterations: pd.DataFrame):
    rows = []
    for i, spec in enumerate(specs):
        row = {"kind": "memcpy", "copy_kind": pd.NA, "bytes": 0, "src_mem": pd.NA,
               "dst_mem": pd.NA, "correlation_id": 2000 + i, **spec}  # fmt: skip
        rows.append(_derive(row, ranges, iterations))
    return _frame(rows, "memops")


def _frame(rows: list[dict], table: str) -> pd.DataFrame:
    from dlprof_lite.ingest.columns import TABLES, empty_frame

    if not rows:
        return empty_frame(table, derived=True)
    frame = pd.DataFrame(rows)
    names = [c.name for c in TABLES[table]]
    extra = [c for c in frame.columns if c not in names]
    return coerce(frame.loc[:, names + extra], table)


def build_api(kernels: pd.DataFrame, memops: pd.DataFrame, extra: Sequence[dict]) -> pd.DataFrame:
    """Launch calls of every op with an API row, plus ``extra`` calls (e.g. syncs)."""
    rows = []
    for frame in (kernels, memops):
        for op in frame.itertuples(index=False):
            if op.api_start_ns is not pd.NA:
                rows.append(dict(start_ns=op.api_start_ns, end_ns=op.api_end_ns, pid=op.pid,
                                 tid=op.tid, correlation_id=op.correlation_id,
                                 name=op.api_name))  # fmt: skip
    for call in extra:
        rows.append({"pid": PID, "tid": TID, "correlation_id": 0, **call})
    frame = pd.DataFrame(rows, columns=["start_ns", "end_ns", "pid", "tid", "correlation_id",
                                        "name"])  # fmt: skip
    frame["dur_ns"] = frame["end_ns"] - frame["start_ns"]
    frame["source"] = "runtime"
    return coerce(frame.astype({"start_ns": "int64", "end_ns": "int64", "dur_ns": "int64"}), "api")


def build_iterations(windows: Sequence[tuple[int, int, bool, bool]]) -> pd.DataFrame:
    """``[(start, end, warmup, in_window), ...]`` -> the iterations table."""
    frame = pd.DataFrame(windows, columns=["start_ns", "end_ns", "warmup", "in_window"])
    frame.insert(0, "iteration", np.arange(len(frame), dtype=np.int64))
    frame.insert(3, "wall_ns", frame["end_ns"] - frame["start_ns"])
    gaps = (frame["start_ns"] - frame["end_ns"].shift(1)).fillna(0)
    frame.insert(4, "between_before_ns", gaps.astype("int64"))
    return coerce(frame.astype({"start_ns": "int64", "end_ns": "int64", "wall_ns": "int64"}),
                  "iterations")  # fmt: skip


def build_gpus(rows: Sequence[tuple[int, str, int, int, int]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["device_id", "name", "sm_count", "cc_major", "cc_minor"])
    return coerce(frame.astype({"device_id": "int64", "name": object}), "gpus")


def fact_mark(key: str, value: dict, t: int, pid: int = PID) -> dict:
    """A run-fact mark as the annotation layer writes it (its own ``fact_text``)."""
    from dlprof_lite.rules.facts import fact_text

    return dict(start_ns=t, name=fact_text(key, value), domain=DOMAIN, pid=pid, tid=TID)


def build_marks(specs: Sequence[dict]) -> pd.DataFrame:
    """NVTX marks (start_ns, name, domain, pid, tid); e.g. :func:`fact_mark` rows."""
    from dlprof_lite.ingest.columns import empty_frame

    if not specs:
        return empty_frame("marks")
    frame = pd.DataFrame(list(specs), columns=["start_ns", "name", "domain", "pid", "tid"])
    frame = frame.astype({"start_ns": "int64", "pid": "int64", "tid": "int64"})
    return coerce(frame.astype({"name": "category", "domain": "category"}), "marks")


def make_profile(
    *,
    ranges: Sequence[R] = (),
    kernels: Sequence[dict] = (),
    memops: Sequence[dict] = (),
    api: Sequence[dict] = (),
    marks: Sequence[dict] = (),
    iterations: Sequence[tuple[int, int, bool, bool]] = (),
    gpus: Sequence[tuple[int, str, int, int, int]] = ((0, "NVIDIA H100 80GB HBM3", 132, 9, 0),),
    session: tuple[int, int] = (0, 10_000),
    source: str = "test.sqlite",
    warnings: tuple[str, ...] = (),
) -> Profile:
    r = build_ranges(ranges)
    it = build_iterations(iterations)
    k = build_kernels(kernels, r, it)
    m = build_memops(memops, r, it)
    r = enrich_ranges(r, k, m)  # the product's per-range columns, from these ops
    meta = Meta(
        source=source, nsys_version="2024.5.1", schema_version="3.13.2",
        session_start_ns=session[0], session_end_ns=session[1],
        key_range="iteration" if len(it) else None,
        key_range_source="annotation" if len(it) else "none", warnings=warnings,
    )  # fmt: skip
    return Profile(
        kernels=k, memops=m, api=build_api(k, m, api), ranges=r,
        marks=build_marks(marks), gpus=build_gpus(gpus), iterations=it, meta=meta,
    )  # fmt: skip
