"""Read one nsys SQLite export, read-only, into the base frames of a :class:`RawExport`.

``sqlite3`` inspects the schema (which tables and columns exist); the rows themselves are
fetched column-wise into numpy through the fastest driver at hand (:mod:`.fetch`). Every
version difference is settled by :mod:`.schema`; this module only decodes and types.
The user's file is opened read-only and immutable and is never written to.

The file is untrusted: whatever either driver raises on it becomes one :class:`InputError`
naming the table and column (:mod:`.bad_input`), and values nsys cannot have written are
refused (a non-integer where it writes integers, duplicated string ids, computed columns)
or, where the rest of the file is still good, dropped with a counted warning
(:mod:`.sanitize`: rows ending before they start, timestamps no capture has, unnamed
kernels; text that is not UTF-8 is decoded with replacement characters).
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.ingest import schema as S
from dlprof_lite.ingest.bad_input import (
    Checked,
    check_sqlite_file,
    refuse_computed,
    translate,
)
from dlprof_lite.ingest.columns import categorical_from_codes, coerce, empty_frame
from dlprof_lite.ingest.fetch import (
    ReadLog,
    SplitFetcher,
    connect_readonly,
    open_fetcher,
)
from dlprof_lite.ingest.profile import Meta
from dlprof_lite.ingest.raw import RawExport
from dlprof_lite.ingest.sanitize import TIME_LIMIT_NS, Repairs, sane_ops, sane_totals
from dlprof_lite.ingest.system_env import SYSTEM_ENV_TABLE, read_system_env

UNNAMED_KERNEL = "<unnamed kernel>"
READ_THREADS = 2  # the machines this was measured on have two cores

def read_export(path: Path) -> RawExport:
    """Read ``path`` into base frames; raise :class:`InputError` on any bad input."""
    check_sqlite_file(path)
    schema = inspect_schema(path)
    if not schema.is_nsys():
        raise InputError(
            f"{path}: SQLite database but not an Nsight Systems export (no StringIds table)"
        )
    refuse_computed(path, schema)
    log = ReadLog()
    try:
        with open_fetcher(path, log=log) as fetch:
            return _read(path, schema, Checked(path, fetch, log), log)
    except InputError as err:
        if str(path) in str(err):
            raise
        raise InputError(f"{path}: {err}") from err  # a value check that knew no file
    except Exception as err:  # what the drivers raise outside one query (open, close)
        raise translate(path, err, None) from err


def inspect_schema(path: Path) -> S.ExportSchema:
    """Which tables and columns exist, which are virtual or computed on read: the catalogue
    through ``sqlite3`` itself (SQLAlchemy's inspector cost 0.1-0.2 s of imports a run)."""
    columns, computed = {}, {}
    try:
        with closing(connect_readonly(path)) as conn:
            tables, virtual = _tables(conn)
            for t in S.READ_TABLES:
                if t in tables and t not in virtual:
                    # table_xinfo's hidden: 0 a column, 1 a virtual table's hidden one,
                    # 2 generated VIRTUAL (computed on every read), 3 generated STORED.
                    rows = conn.execute(f'PRAGMA main.table_xinfo("{t}")').fetchall()
                    cols = [(str(r[1]), int(r[6])) for r in rows if r[6] != 1]
                    columns[t] = frozenset(name for name, _ in cols)
                    computed[t] = frozenset(name for name, hidden in cols if hidden == 2)
    except sqlite3.DatabaseError as err:
        raise translate(path, err, None) from err
    return S.ExportSchema(tables=tables, columns=columns, computed=computed, virtual=virtual)


def _tables(conn: sqlite3.Connection) -> tuple[frozenset[str], frozenset[str]]:
    """The export's tables (SQLite's own ``sqlite_*`` left out) and its virtual ones."""
    rows = conn.execute(
        "SELECT name, sql LIKE 'CREATE VIRTUAL TABLE%' FROM sqlite_master "
        "WHERE type = 'table' AND name NOT LIKE 'sqlite~_%' ESCAPE '~'"
    ).fetchall()
    return frozenset(str(r[0]) for r in rows), frozenset(str(r[0]) for r in rows if r[1])


def _read(path: Path, schema: S.ExportSchema, fetch: Checked, log: ReadLog) -> RawExport:
    strings = _strings(path, schema, fetch)
    repairs = Repairs()
    # The large tables are read in rowid ranges on two threads at once (fetch.SplitFetcher):
    # SQLite's stepping is the floor of ingest time and the drivers release the GIL.
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        split = Checked(path, SplitFetcher(path, pool, parts=READ_THREADS, log=log), log)
        kernels = sane_ops(_kernels(schema, split, strings, repairs), "kernels", repairs)
        api = sane_ops(_api(schema, split, strings), "CUDA API calls", repairs)
        api = _with_syncs(api, schema, fetch)
        nvtx, marks = _nvtx(schema, split, strings)
        nvtx = sane_ops(nvtx, "NVTX ranges", repairs)
    memops = sane_ops(_memops(schema, fetch), "memcpys/memsets", repairs)
    nvtx_ns = nvtx["end_ns"].astype("Int64") - nvtx["start_ns"]
    sane_totals(path, {"kernel": kernels, "memcpy/memset": memops, "CUDA API call": api,
                       "NVTX range": pd.DataFrame({"dur_ns": nvtx_ns})})  # fmt: skip
    frames = (kernels, memops, api, nvtx)
    meta = _meta(path, schema, fetch, frames)
    gpus = _gpus(schema, fetch)
    threads = _threads(schema, fetch, strings)
    warnings = (*repairs.warnings(), *_replaced_warnings(log))  # after the last query
    return RawExport(
        kernels=kernels, memops=memops, api=api, nvtx=nvtx, marks=marks, gpus=gpus,
        meta=replace(meta, warnings=(*meta.warnings, *warnings), threads=threads),
    )  # fmt: skip


def _replaced_warnings(log: ReadLog) -> list[str]:
    replaced = [
        f"{n} value(s) of {table}.{column} are not valid UTF-8: shown with replacement "
        "characters (\ufffd)"
        for (table, column), n in sorted(log.replaced.items())
    ]
    blobs = [
        f"{n} value(s) of {table}.{column} are BLOBs where nsys writes text: decoded as "
        "UTF-8, with replacement characters (\ufffd) where they are not"
        for (table, column), n in sorted(log.blobs.items())
    ]
    return replaced + blobs


def _strings(path: Path, schema: S.ExportSchema, fetch: Checked) -> pd.Series:
    cols = fetch.columns(f"SELECT id, value FROM {S.STRINGS_TABLE}", text=("value",))
    ids = cols["id"]
    if len(ids) and not pd.Index(ids).is_unique:
        dup = pd.Index(ids)[pd.Index(ids).duplicated()][0]
        raise InputError(
            f"{path}: {S.STRINGS_TABLE}.id {dup} appears more than once, so names are "
            "ambiguous (nsys writes each id once): the export is damaged or was edited; "
            "export the report again (nsys export --type sqlite)"
        )
    return pd.Series(cols["value"], index=ids, dtype=object)


def _categorical(ids: np.ndarray, strings: pd.Series, missing: str = "") -> pd.Categorical:
    """Strings for StringIds ids, as a categorical built from the unique ids only; an id
    that is NULL or not in StringIds gets ``missing``."""
    codes, uniq = pd.factorize(ids)  # hashing: no sort of a million ids
    names = strings.reindex(uniq).fillna(missing).astype(str).to_numpy()
    if len(set(names)) == len(names):
        return categorical_from_codes(codes.astype(np.int32), names)
    return pd.Categorical(names[codes])


def _nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, values == S.NULL_INT)


def _id32(values: np.ndarray, name: str) -> np.ndarray:
    """A CUPTI id column as int32 (columns.py), refused where a value would not fit."""
    info = np.iinfo(np.int32)
    if values.size and (values.min() < info.min or values.max() > info.max):
        raise InputError(f"{name}: an id outside 32 bits ({values.min()}..{values.max()})")
    return values.astype(np.int32)


def _gpu_op_base(c: dict[str, np.ndarray]) -> dict[str, object]:
    """The launch columns of fetched GPU ops; the fetched ids they narrow are taken out of
    ``c`` as they are (each wide copy let go at once: 25M ops' are 200 MB a column)."""
    return {
        "start_ns": c["start"], "end_ns": c["end"], "dur_ns": c["end"] - c["start"],
        "device_id": _id32(c.pop("deviceId"), "deviceId"),
        "context_id": _id32(c.pop("contextId"), "contextId"),
        "stream_id": _id32(c.pop("streamId"), "streamId"),
        "pid": S.decode_pid(c.pop("globalPid")).astype(np.int32),
        "correlation_id": c["correlationId"], "graph_node_id": _nullable(c.pop("graphNodeId")),
    }  # fmt: skip


def _without_launch(table: str) -> pd.DataFrame:
    from dlprof_lite.ingest.raw import LAUNCH_COLUMNS

    return empty_frame(table).drop(columns=list(LAUNCH_COLUMNS))


def _kernels(
    schema: S.ExportSchema, fetch: Checked, strings: pd.Series, repairs: Repairs
) -> pd.DataFrame:
    if not schema.has(S.KERNEL_TABLE):
        return _without_launch("kernels")
    c = fetch.columns(schema.kernel_query())
    columns = _gpu_op_base(c)
    columns["name"], columns["short_name"] = _kernel_names(c, strings, repairs)
    # copy=False: the arrays are this function's own; no consolidated copy of 5M-row blocks.
    return coerce(pd.DataFrame(columns, copy=False), "kernels")


def _kernel_names(
    c: dict[str, np.ndarray], strings: pd.Series, repairs: Repairs
) -> tuple[pd.Categorical, pd.Categorical]:
    """Demangled and short names; either stands in for the other where one is missing (a
    NULL id, or one StringIds lacks), and a kernel with neither is named UNNAMED_KERNEL."""
    name = _categorical(c["demangledName"], strings)
    short = _categorical(c["shortName"], strings)
    no_name, no_short = name == "", short == ""
    if not (no_name.any() or no_short.any()):
        return name, short
    both = no_name & no_short
    if both.any():
        repairs.note(f"{int(both.sum())} kernel(s) have no name (a NULL name id or one "
                     f"missing from StringIds): shown as {UNNAMED_KERNEL!r}")  # fmt: skip
    names = np.asarray(name, dtype=object)
    shorts = np.asarray(short, dtype=object)
    names = np.where(both, UNNAMED_KERNEL, np.where(no_name, shorts, names))
    shorts = np.where(no_short, names, shorts)
    return pd.Categorical(names), pd.Categorical(shorts)


def _kind_categorical(codes: np.ndarray, names: dict[int, str]) -> pd.Categorical[str]:
    labels = pd.Series(codes).map(names)
    return pd.Categorical(labels, categories=sorted(set(names.values())))


def _memops(schema: S.ExportSchema, fetch: Checked) -> pd.DataFrame:
    parts = []
    if schema.has(S.MEMCPY_TABLE):
        c = fetch.columns(schema.memcpy_query())
        frame = pd.DataFrame(_gpu_op_base(c))
        frame["kind"] = "memcpy"
        frame["copy_kind"] = _kind_categorical(c["copyKind"], S.COPY_KINDS)
        frame["bytes"] = c["bytes"]
        frame["src_mem"] = _kind_categorical(c["srcKind"], S.MEM_KINDS)
        frame["dst_mem"] = _kind_categorical(c["dstKind"], S.MEM_KINDS)
        parts.append(frame)
    if schema.has(S.MEMSET_TABLE):
        c = fetch.columns(schema.memset_query())
        frame = pd.DataFrame(_gpu_op_base(c))
        frame["kind"] = "memset"
        frame["copy_kind"] = _kind_categorical(np.full(len(frame), -1), {})
        frame["bytes"] = c["bytes"]
        frame["src_mem"] = _kind_categorical(np.full(len(frame), -1), S.MEM_KINDS)
        frame["dst_mem"] = _kind_categorical(c["memKind"], S.MEM_KINDS)
        parts.append(frame)
    if not parts:
        return _without_launch("memops")
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    for col in ("kind", "copy_kind", "src_mem", "dst_mem"):
        frame[col] = frame[col].astype("category")
    return coerce(frame.sort_values("start_ns", kind="stable", ignore_index=True), "memops")


def _api(schema: S.ExportSchema, fetch: Checked, strings: pd.Series) -> pd.DataFrame:
    parts = []
    for table, source in ((S.RUNTIME_TABLE, "runtime"), (S.DRIVER_TABLE, "driver")):
        if not schema.has(table):
            continue
        c = fetch.columns(schema.api_query(table))
        parts.append(pd.DataFrame({
            "start_ns": c["start"], "end_ns": c["end"], "dur_ns": c["end"] - c["start"],
            "pid": S.decode_pid(c["globalTid"]).astype(np.int32),
            "tid": S.decode_tid(c["globalTid"]).astype(np.int32),
            "correlation_id": c["correlationId"], "name": _categorical(c["nameId"], strings),
            "source": source,
        }, copy=False))  # fmt: skip
    if not parts:
        return empty_frame("api")
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame["name"] = frame["name"].astype("category")
    frame["source"] = frame["source"].astype("category")
    return coerce(frame, "api")


def _with_syncs(api: pd.DataFrame, schema: S.ExportSchema, fetch: Checked) -> pd.DataFrame:
    """The stream each call synchronised or made wait (``sync_stream``), from the export's
    synchronisation records; the column is missing where the export has none (the critical
    path then infers a stream's waits from timing alone). The records' ``syncType`` is not
    read: its numbering changed between nsys versions (a 2021 export gives
    cudaStreamWaitEvent and cudaStreamSynchronize one type); the call's name says what it
    did (rules/apis.py)."""
    query = schema.sync_query()
    if query is None or api.empty:
        return api
    c = fetch.columns(query)
    corr, pid, stream = c["correlationId"], S.decode_pid(c["globalPid"]), c["streamId"]
    found = np.full(len(api), -1, dtype=np.int64)
    if len(corr):
        calls = api["correlation_id"].to_numpy(dtype=np.int64)
        # Few records, a million calls: the calls with a recorded correlation id first.
        span = int(corr.max()) - int(corr.min()) if corr.size else 0
        # a lookup table when the ids span little (CUPTI's are counters): no sort at all
        maybe = np.flatnonzero(np.isin(calls, corr, kind="table" if span < 1 << 26 else None))
        key = (pid.astype(np.int64) << 40) | (corr & ((1 << 40) - 1))
        mine = ((api["pid"].to_numpy(dtype=np.int64)[maybe] << 40)
                | (calls[maybe] & ((1 << 40) - 1)))  # fmt: skip
        uniq, first = np.unique(key, return_index=True)  # a call's first record
        pos = np.minimum(np.searchsorted(uniq, mine), uniq.size - 1)
        ok = uniq[pos] == mine
        found[maybe[ok]] = first[pos[ok]]
    hit = found >= 0
    streams = np.zeros(len(api), dtype=np.int64)
    streams[hit] = stream[found[hit]]
    known = hit & (streams >= 0) & (streams < NO_STREAM)  # 2^32 - 1: the record has none
    out = api.copy(deep=False)
    out["sync_stream"] = pd.arrays.IntegerArray(np.where(known, streams, 0).astype(np.int32),
                                                ~known)  # fmt: skip
    return out


NO_STREAM = (1 << 31) - 1  # stream ids are small counters; CUPTI's "none" is 2^32 - 1


def _domains(c: dict[str, Any], created: np.ndarray) -> dict[tuple[int, int], str]:
    """Domain names by (pid, domain id) from the domain-create events of the NVTX scan."""
    pids = S.decode_pid(c["globalTid"][created])
    texts = np.asarray(c["text"][created], dtype=object)
    return {(int(p), int(d)): str(t) for p, d, t in zip(pids, c["domainId"][created], texts)}


def _nvtx(
    schema: S.ExportSchema, fetch: Checked, strings: pd.Series
) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not schema.has(S.NVTX_TABLE):
        return empty_frame("nvtx_events"), empty_frame("marks")
    c = fetch.columns(schema.nvtx_query(), text=("text",))
    created = c["eventType"] == S.EVENT_NVTX_DOMAIN_CREATE
    names = _domains(c, created)
    if created.any():  # a handful of rows: copy the columns only when there are some
        c = {k: v[~created] for k, v in c.items()}
    pid = S.decode_pid(c["globalTid"])
    domains = _domain_names(pid, c["domainId"], names)
    event = c["eventType"]
    frame = pd.DataFrame({
        "start_ns": c["start"], "end_ns": _nullable(c["end"]),
        "name": _nvtx_text(c["text"], c["textId"], strings), "domain": domains,
        "style": categorical_from_codes((event == S.EVENT_NVTX_START_END).astype(np.int8),
                                        ["push_pop", "start_end"]),
        "pid": pid, "tid": S.decode_tid(c["globalTid"]),
    }, copy=False)  # fmt: skip
    is_mark = event == S.EVENT_NVTX_MARK
    if not is_mark.any():
        return coerce(frame, "nvtx_events"), empty_frame("marks")
    # Row selection by position, column by column: one copy, no index alignment.
    marks, ranges = np.flatnonzero(is_mark), np.flatnonzero(~is_mark)
    return (
        coerce(_rows(frame, ranges), "nvtx_events"),
        coerce(_rows(frame[["start_ns", "name", "domain", "pid", "tid"]], marks), "marks"),
    )


def _rows(frame: pd.DataFrame, at: np.ndarray) -> pd.DataFrame:
    """The rows of ``frame`` at positions ``at``, renumbered from 0."""
    return pd.DataFrame({c: frame[c].array.take(at) for c in frame.columns}, copy=False)


def _nvtx_text(
    text: np.ndarray | pd.Categorical, text_id: np.ndarray, strings: pd.Series
) -> pd.Categorical:
    """Each event's text: inline, else its registered string (nsys stores one or the other).

    Combined through category codes, so no Python string is touched per event.
    """
    inline = text if isinstance(text, pd.Categorical) else pd.Categorical(text)
    registered = text_id != S.NULL_INT
    if not registered.any():
        return inline
    resolved = _categorical(text_id[registered], strings)
    categories = pd.Index(inline.categories).append(pd.Index(resolved.categories)).unique()
    codes = categories.get_indexer(inline.categories)[inline.codes]
    codes[registered] = categories.get_indexer(resolved.categories)[resolved.codes]
    return pd.Categorical.from_codes(codes, categories=categories)


def _domain_names(
    pid: np.ndarray, domain_id: np.ndarray, names: dict[tuple[int, int], str]
) -> pd.Categorical:
    """Domain name per event; domain ids are per process, 0 is the default domain ('').

    A domain whose create event is missing (sliced exports) has no name; like nsys, we then
    show its ranges without a domain.
    """
    key = (np.asarray(pid, dtype=np.int64) << 32) | np.asarray(domain_id, dtype=np.int64)
    codes, uniq = pd.factorize(key)  # hashing: no sort of millions of events
    labels = [names.get((int(k >> 32), int(k & 0xFFFFFFFF)), "") for k in uniq]
    cats = pd.Index(labels, dtype=object)
    if cats.is_unique:
        return pd.Categorical.from_codes(codes.astype(np.int32), categories=cats)
    return pd.Categorical(np.asarray(labels, dtype=object)[codes])


def _gpus(schema: S.ExportSchema, fetch: Checked) -> pd.DataFrame:
    query = schema.gpu_query()
    if query is None:
        return empty_frame("gpus")
    c = fetch.columns(query, text=("name",), nullable=True)
    frame = pd.DataFrame({k: c[k] for k in ("device_id", "name", "sm_count", "cc_major",
                                           "cc_minor")})  # fmt: skip
    frame["name"] = frame["name"].astype(object).where(frame["name"].notna(), "")
    for col in ("sm_count", "cc_major", "cc_minor"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    frame = frame.drop_duplicates("device_id").sort_values("device_id", ignore_index=True)
    return coerce(frame, "gpus")


def _threads(
    schema: S.ExportSchema, fetch: Checked, strings: pd.Series
) -> tuple[tuple[int, int, str], ...]:
    """(pid, tid, name) of every thread ThreadNames names (the first name of a thread named
    twice), in (pid, tid) order."""
    query = schema.thread_names_query()
    if query is None:
        return ()
    c = fetch.columns(query, nullable=True)
    gtid = pd.to_numeric(pd.Series(c["globalTid"]), errors="coerce").dropna().astype("int64")
    names = strings.reindex(pd.Series(c["nameId"]).loc[gtid.index].to_numpy())
    found: dict[tuple[int, int], str] = {}
    for g, name in zip(gtid.tolist(), names.tolist(), strict=True):
        if isinstance(name, str) and name:
            found.setdefault((int(S.decode_pid(g)), int(S.decode_tid(g))), name)
    return tuple((pid, tid, name) for (pid, tid), name in sorted(found.items()))


def _meta(
    path: Path, schema: S.ExportSchema, fetch: Checked, frames: tuple[pd.DataFrame, ...]
) -> Meta:
    values: dict[str, str] = {}
    table = schema.meta_table()
    if table:
        c = fetch.columns(f"SELECT name, value FROM {table}", text=("name", "value"))
        values = {str(k): str(v) for k, v in zip(c["name"], c["value"])}
    (start, end), warnings = _session_bounds(schema, fetch, frames)
    system: dict[str, str] = {}
    # A virtual table is refused like the others (refuse_computed): never queried.
    if schema.has(SYSTEM_ENV_TABLE) and SYSTEM_ENV_TABLE not in schema.virtual:
        system, env_warnings = read_system_env(path)
        warnings += env_warnings
    return Meta(
        source=str(path),
        nsys_version=values.get("EXPORT_PRODUCT_VERSION"),
        schema_version=values.get("EXPORT_SCHEMA_VERSION"),
        session_start_ns=start,
        session_end_ns=end,
        tables=tuple(sorted(schema.tables)),
        host=system.get("host"),
        os=system.get("os"),
        driver_version=system.get("driver_version"),
        cuda_driver_version=system.get("cuda_driver_version"),
        warnings=tuple(warnings),
    )


def _session_bounds(
    schema: S.ExportSchema, fetch: Checked, frames: tuple[pd.DataFrame, ...]
) -> tuple[tuple[int, int], list[str]]:
    """The session ``[0, duration]`` the export records (schema.session_query); the events'
    own span where it records none (2020.3 and 2021.3 exports have no ANALYSIS_DETAILS).

    Every event of every corpus export with the table lies in ``[0, duration]`` (an NVTX
    domain-create event may lie before 0: it is no activity, and the reader drops it). Events
    outside it (an edited export) widen the session, with a warning."""
    lo = [int(f["start_ns"].min()) for f in frames if len(f)]
    hi = [int(f["end_ns"].max()) for f in frames if len(f) and f["end_ns"].notna().any()]
    query = schema.session_query()
    duration = None
    if query is not None:
        values = next(iter(fetch.columns(query, nullable=True).values()))
        recorded = values[0] if len(values) else None
        if not (recorded is None or pd.isna(recorded) or _extreme(recorded)):
            duration = int(recorded)
    if duration is None or duration < 0:
        return ((min(lo), max(hi)) if lo and hi else (0, 0)), []
    if not (lo and hi) or (min(lo) >= 0 and max(hi) <= duration):
        return (0, duration), []
    start, end = min(0, *lo), max(duration, *hi)
    return (start, end), [
        f"events lie outside the session the export records ([0, {duration}] ns, "
        f"ANALYSIS_DETAILS.duration): the session is taken as [{start}, {end}] ns to hold them"
    ]


def _extreme(t: object) -> bool:
    """A recorded session time no capture has (then the events' own span is used)."""
    return not -TIME_LIMIT_NS <= int(t) <= TIME_LIMIT_NS  # type: ignore[call-overload]
