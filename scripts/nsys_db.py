"""``NsysDb``: a writer of synthetic Nsight Systems 2022.4 SQLite exports.

Test and benchmark tooling, outside the ``annotate → launch → ingest → report`` pipeline.
Hand-built fixtures write a few rows of round numbers with the one-row helpers; ``make_profile.py``
writes millions of rows with the column-wise bulk inserts. The real ``nsys stats`` reads the
result like any export. Behaviours copied from real 2022.4 exports:

- ``globalTid = host << 48 | pid << 24 | tid`` (host 1); a kernel's ``globalPid`` has tid bits 0;
- text pushed through the Python ``nvtx`` package is registered (``textId``); plain
  ``nvtxRangePushA`` text (PyTorch ``emit_nvtx``) is inline (``text``);
- a start/end range has ``endGlobalTid`` only when it was ended on another thread;
- a domain is an ``NvtxDomainCreate`` row (eventType 75, name in ``text``), numbered per
  process, and gets an ``NvtxDomainDestroy`` row (76) when the session ends;
- activity tables with no rows are absent from the file (``close(drop_empty=True)``).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nsys_schema import (
    ENUMS,
    EVENT_TABLES,
    EXPORT_PRODUCT_VERSION,
    EXPORT_SCHEMA_VERSION,
    HOST_ID,
    KERNEL_DEFAULTS,
    MEM_DEVICE,
    MEM_PAGEABLE,
    MEMCPY_DTOH,
    MEMCPY_HTOD,
    NVTX_DOMAIN_CREATE,
    NVTX_DOMAIN_DESTROY,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_START_END,
    SYNC_STREAM,
    ddl,
    global_pid,
    global_tid,
    short_name,
)

CHUNK_ROWS = 100_000
# Where ANALYSIS_DETAILS.startTime lies: another clock than the events' (as in real exports).
CAPTURE_CLOCK_NS = 178_285_347_616_327  # the 2025.5 corpus export's startTime
UTC_EPOCH_NS = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z: fixed, so files are reproducible


def _literal(value: Any) -> str:
    return repr(int(value)) if isinstance(value, bool | np.bool_) else repr(value)


class NsysDb:
    """A synthetic nsys 2022.4 export being written; ``close()`` (or leaving ``with``) finishes it.

    Two levels: one-row helpers with round numbers for hand-built fixtures (``kernel``,
    ``runtime``, ``push`` ...), and column-wise bulk inserts of numpy arrays (``insert``,
    ``kernels``, ``runtimes``) for millions of rows. Times are ns on the session clock.
    """

    def __init__(self, path: str | Path, *, host: int = HOST_ID) -> None:
        self.path = Path(path)
        self.path.unlink(missing_ok=True)
        self.host = host
        self.con = sqlite3.connect(self.path)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE",
                       "temp_store=MEMORY", "cache_size=-131072"):  # fmt: skip
            self.con.execute(f"PRAGMA {pragma}")
        for stmt in ddl():
            self.con.execute(stmt)
        for table, rows in ENUMS.items():
            self.con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)
        self._strings: dict[str, int] = {}
        self._domains: dict[tuple[int, str], tuple[int, int]] = {}  # (pid, name) -> (id, gtid)
        self._range_ids: dict[int, int] = {}
        self._grid_ids = itertools.count(1)
        self._graph_nodes = itertools.count(1)
        self._span: list[int] = []
        self._session: tuple[int, int] | None = None
        self._meta: dict[str, str] = {}

    # -- strings and bulk rows ----------------------------------------------------------------

    def string_id(self, value: str) -> int:
        """The StringIds id of ``value``, added on first use."""
        sid = self._strings.get(value)
        if sid is None:
            sid = self._strings[value] = len(self._strings) + 1
            self.con.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (sid, value))
        return sid

    def string_ids(self, values: Iterable[str]) -> np.ndarray:
        return np.fromiter((self.string_id(v) for v in values), dtype=np.int64)

    def insert(self, table: str, columns: Mapping[str, Any]) -> int:
        """Insert rows column-wise and return how many.

        A column is an array or sequence (one value per row; object arrays may hold None) or a
        scalar (the same for every row; None leaves the column NULL). Scalars become SQL
        literals, arrays are bound in chunks of ``CHUNK_ROWS`` through ``executemany``.
        """
        names, slots, sources, n = [], [], [], None
        for name, value in columns.items():
            if value is None:
                continue
            names.append(name)
            if isinstance(value, str):
                slots.append("?")
                sources.append(value)
            elif np.isscalar(value):
                slots.append(_literal(value))
            else:
                arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
                if n is not None and len(arr) != n:
                    raise ValueError(f"{table}.{name}: {len(arr)} values, expected {n}")
                n = len(arr)
                slots.append("?")
                sources.append(arr)
        n = 1 if n is None else n
        if table in EVENT_TABLES:
            self._track(columns)
        sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(slots)})"
        for lo in range(0, n, CHUNK_ROWS):
            m = min(n, lo + CHUNK_ROWS) - lo
            cols = [itertools.repeat(s, m) if isinstance(s, str) else s[lo : lo + m].tolist()
                    for s in sources]  # fmt: skip
            self.con.executemany(sql, zip(*cols, strict=True) if cols else itertools.repeat((), m))
        return n

    def _track(self, columns: Mapping[str, Any]) -> None:
        """Widen the span of event times, which is the default session window."""
        for key in ("start", "end"):
            value = columns.get(key)
            arr = value if isinstance(value, np.ndarray) else np.asarray([value], dtype=object)
            if arr.dtype == object:
                arr = np.asarray([v for v in arr.ravel() if v is not None], dtype=np.int64)
            if arr.size:
                self._span += [int(arr.min()), int(arr.max())]

    def kernels(self, columns: Mapping[str, Any]) -> int:
        """Bulk CUPTI_ACTIVITY_KIND_KERNEL rows; ``KERNEL_DEFAULTS`` and a ``gridId`` filled in."""
        cols = {**KERNEL_DEFAULTS, **columns}
        if "gridId" not in cols:
            n = np.size(cols["start"])
            cols["gridId"] = np.fromiter(itertools.islice(self._grid_ids, n), dtype=np.int64)
        return self.insert("CUPTI_ACTIVITY_KIND_KERNEL", cols)

    def runtimes(self, columns: Mapping[str, Any]) -> int:
        """Bulk CUPTI_ACTIVITY_KIND_RUNTIME rows (eventClass 0 = CUDA runtime, returnValue 0)."""
        cols = {"eventClass": 0, "returnValue": 0, **columns}
        return self.insert("CUPTI_ACTIVITY_KIND_RUNTIME", cols)

    def _op(self, start: int, end: int, pid: int, correlation_id: int | None, device: int,
            stream: int, context: int) -> dict[str, Any]:  # fmt: skip
        """The columns every GPU activity table shares."""
        gpid = global_pid(pid, self.host)
        return {"start": start, "end": end, "deviceId": device, "contextId": context,
                "streamId": stream, "correlationId": correlation_id, "globalPid": gpid}  # fmt: skip

    # -- one-row helpers ------------------------------------------------------------------------

    def kernel(self, start: int, end: int, name: str, *, pid: int, correlation_id: int | None,
               device: int = 0, stream: int = 7, context: int = 1, short: str | None = None,
               grid: Sequence[int] = (1, 1, 1), block: Sequence[int] = (128, 1, 1),
               registers: int = 32, graph_node_id: int | None = None) -> None:  # fmt: skip
        """One kernel execution; ``name`` is the demangled name, ``short`` defaults from it."""
        self.kernels({
            **self._op(start, end, pid, correlation_id, device, stream, context),
            "demangledName": self.string_id(name),
            "shortName": self.string_id(short or short_name(name)),
            "registersPerThread": registers, "gridX": grid[0], "gridY": grid[1], "gridZ": grid[2],
            "blockX": block[0], "blockY": block[1], "blockZ": block[2],
            "graphNodeId": graph_node_id,
        })  # fmt: skip

    def runtime(self, start: int, end: int, name: str, *, pid: int, tid: int,
                correlation_id: int, return_value: int = 0) -> None:  # fmt: skip
        """One CUDA API call, e.g. ``cudaLaunchKernel_v7000`` (driver ``cu*`` calls: class 1)."""
        driver = name.startswith("cu") and not name.startswith("cuda")
        self.runtimes({
            "start": start, "end": end, "eventClass": int(driver),
            "globalTid": global_tid(pid, tid, self.host), "correlationId": correlation_id,
            "nameId": self.string_id(name), "returnValue": return_value,
        })  # fmt: skip

    def graph_launch(self, start: int, end: int, kernels: Sequence[tuple[int, int, str]], *,
                     pid: int, tid: int, correlation_id: int, device: int = 0, stream: int = 7,
                     name: str = "cudaGraphLaunch_v10000") -> list[int]:  # fmt: skip
        """A graph launch call and its kernels ``(start, end, name)``: they share its
        correlation id and carry a ``graphNodeId``. Returns the node ids."""
        self.runtime(start, end, name, pid=pid, tid=tid, correlation_id=correlation_id)
        nodes = [next(self._graph_nodes) for _ in kernels]
        for (k_start, k_end, k_name), node in zip(kernels, nodes, strict=True):
            self.kernel(k_start, k_end, k_name, pid=pid, correlation_id=correlation_id,
                        device=device, stream=stream, graph_node_id=node)  # fmt: skip
        return nodes

    def memcpy(self, start: int, end: int, *, pid: int, correlation_id: int, bytes: int,
               kind: int = MEMCPY_HTOD, device: int = 0, stream: int = 7,
               context: int = 1) -> None:  # fmt: skip
        """One memcpy; ``kind`` from ENUM_CUDA_MEMCPY_OPER, the memory kinds follow from it."""
        kinds = {MEMCPY_HTOD: (MEM_PAGEABLE, MEM_DEVICE), MEMCPY_DTOH: (MEM_DEVICE, MEM_PAGEABLE)}
        src, dst = kinds.get(kind, (MEM_DEVICE, MEM_DEVICE))
        self.insert("CUPTI_ACTIVITY_KIND_MEMCPY", {
            **self._op(start, end, pid, correlation_id, device, stream, context),
            "bytes": bytes, "copyKind": kind, "srcKind": src, "dstKind": dst,
        })  # fmt: skip

    def memset(self, start: int, end: int, *, pid: int, correlation_id: int, bytes: int,
               value: int = 0, device: int = 0, stream: int = 7,
               context: int = 1) -> None:  # fmt: skip
        """One memset of device memory."""
        self.insert("CUPTI_ACTIVITY_KIND_MEMSET", {
            **self._op(start, end, pid, correlation_id, device, stream, context),
            "value": value, "bytes": bytes, "memKind": MEM_DEVICE,
        })  # fmt: skip

    def sync(self, start: int, end: int, *, pid: int, correlation_id: int, device: int = 0,
             stream: int = 7, context: int = 1, sync_type: int = SYNC_STREAM) -> None:  # fmt: skip
        """The GPU side of a synchronisation call (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)."""
        self.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
            **self._op(start, end, pid, correlation_id, device, stream, context),
            "syncType": sync_type, "eventId": 0xFFFFFFFF,
        })  # fmt: skip

    # -- NVTX -----------------------------------------------------------------------------------

    def domain(self, name: str, *, pid: int, tid: int, start: int = 0) -> int:
        """The id of NVTX domain ``name`` in process ``pid``, created (eventType 75) if new."""
        key = (pid, name)
        if key not in self._domains:
            did = 1 + sum(1 for p, _ in self._domains if p == pid)
            gtid = global_tid(pid, tid, self.host)
            self._domains[key] = (did, gtid)
            row = {"start": start, "eventType": NVTX_DOMAIN_CREATE, "text": name,
                   "globalTid": gtid, "domainId": did}  # fmt: skip
            self.insert("NVTX_EVENTS", row)
        return self._domains[key][0]

    def _nvtx(self, start: int, end: int | None, event_type: int, name: str, pid: int, tid: int,
              domain: str | None, registered: bool, **extra: Any) -> None:  # fmt: skip
        did = 0 if domain is None else self.domain(domain, pid=pid, tid=tid, start=start)
        text = {"textId": self.string_id(name)} if registered else {"text": name}
        self.insert("NVTX_EVENTS", {
            "start": start, "end": end, "eventType": event_type, **text,
            "globalTid": global_tid(pid, tid, self.host), "domainId": did, **extra,
        })  # fmt: skip

    def push(self, start: int, end: int, name: str, pid: int, tid: int, *,
             domain: str | None = None, registered: bool = True) -> None:  # fmt: skip
        """A push/pop range (eventType 59). ``registered=False`` stores the text inline, as
        ``nvtxRangePushA`` (PyTorch ``emit_nvtx``) does; the ``nvtx`` package registers it."""
        self._nvtx(start, end, NVTX_PUSH_POP, name, pid, tid, domain, registered)

    def start_end(self, start: int, end: int, name: str, pid: int, tid: int, *,
                  end_tid: int | None = None, domain: str | None = None,
                  registered: bool = True) -> int:  # fmt: skip
        """A start/end range (eventType 60); returns its per-process ``rangeId``.
        ``endGlobalTid`` is set only when ``end_tid`` differs from ``tid``, as nsys does."""
        rid = self._range_ids[pid] = self._range_ids.get(pid, 0) + 1
        end_gtid = None if end_tid in (None, tid) else global_tid(pid, end_tid, self.host)
        self._nvtx(start, end, NVTX_START_END, name, pid, tid, domain, registered,
                   rangeId=rid, endGlobalTid=end_gtid)  # fmt: skip
        return rid

    def mark(self, ts: int, name: str, pid: int, tid: int, *, domain: str | None = None,
             registered: bool = True) -> None:  # fmt: skip
        """An instantaneous NVTX mark (eventType 34, no end)."""
        self._nvtx(ts, None, NVTX_MARK, name, pid, tid, domain, registered)

    # -- system information and closing --------------------------------------------------------

    def process(self, pid: int, name: str = "python3") -> None:
        row = {"globalPid": global_pid(pid, self.host), "pid": pid, "name": name}
        self.insert("PROCESSES", row)

    def thread(self, pid: int, tid: int, name: str, priority: int = 20) -> None:
        row = {"nameId": self.string_id(name), "priority": priority,
               "globalTid": global_tid(pid, tid, self.host)}  # fmt: skip
        self.insert("ThreadNames", row)

    def stream(self, pid: int, stream: int, *, context: int = 1) -> None:
        row = {"streamId": stream, "hwId": 0, "vmId": self.host, "processId": pid,
               "contextId": context, "priority": 0, "flag": 1}  # fmt: skip
        self.insert("TARGET_INFO_CUDA_STREAM", row)

    def gpu(self, device: int = 0, *, name: str = "NVIDIA H100 80GB HBM3", sm_count: int = 132,
            compute: tuple[int, int] = (9, 0), chip: str = "GH100",
            memory: int = 85_520_809_984) -> None:  # fmt: skip
        """One TARGET_INFO_GPU row: the fields a report shows, a few plausible others, NULLs."""
        self.insert("TARGET_INFO_GPU", {
            "vmId": self.host << 48, "id": device, "name": name,
            "busLocation": f"0000:{0x18 + device:02x}:00.0", "isDiscrete": 1,
            "l2CacheSize": 52_428_800, "totalMemory": memory, "smCount": sm_count,
            "chipName": chip, "cuDevice": device, "threadsPerWarp": 32, "maxThreadsPerBlock": 1024,
            "computeMajor": compute[0], "computeMinor": compute[1],
            "smMajor": compute[0], "smMinor": compute[1],
        })  # fmt: skip

    def session(self, start: int, stop: int) -> None:
        """Set the capture window on the events' clock (ANALYSIS_DETAILS); by default the
        span of all events. As nsys does, the session is written as running from 0 to
        ``stop`` on the events' clock (``duration``), with ``startTime``/``stopTime`` on
        another clock (:data:`CAPTURE_CLOCK_NS` later): ``start`` only says no event is
        earlier."""
        self._session = (start, stop)

    def meta(self, **values: str) -> None:
        """Override EXPORT_META_DATA values, e.g. ``meta(EXPORT_PRODUCT_VERSION="2022.4.1.21")``."""
        self._meta.update(values)

    def _write_meta(self) -> None:
        out = self.path.name
        rows = {
            "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
            "EXPORT_PRODUCT_VERSION": EXPORT_PRODUCT_VERSION, "EXPORT_PRODUCT_DATE": "2022.4",
            "EXPORT_SCHEMA_VERSION": EXPORT_SCHEMA_VERSION, "EXPORT_SCHEMA_VERSION_MAJOR": "3",
            "EXPORT_SCHEMA_VERSION_MINOR": "0", "EXPORT_SCHEMA_VERSION_MICRO": "0",
            "EXPORT_PLATFORM": "linux-desktop", "EXPORT_ARCH": "x64",
            "EXPORT_TIME_UTC": "2024-01-01T00:00:00", "EXPORT_HOST": "dlprof-lite-synthetic",
            "EXPORT_INPUT_FILE": Path(out).stem + ".nsys-rep",
            "EXPORT_OUTUPT_FILE": out,  # sic: nsys 2022.x's spelling
            "EXPORT_OVERWRITE": "true", "EXPORT_LAZY": "true", **self._meta,
        }  # fmt: skip
        self.con.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", rows.items())

    def close(self, *, drop_empty: bool = True) -> None:
        """Write the session window, domain destroys and metadata; drop empty event tables."""
        # The session runs from 0 (nsys's session start) to its stop: the window's start only
        # says no event is earlier.
        stop = self._session[1] if self._session else max(self._span, default=0)
        for did, gtid in self._domains.values():
            row = {"start": stop, "eventType": NVTX_DOMAIN_DESTROY, "globalTid": gtid,
                   "domainId": did}  # fmt: skip
            self.insert("NVTX_EVENTS", row)
        # nsys: events from 0 to duration; startTime/stopTime on another clock, stop - start
        # = duration (every corpus export).
        self.insert("ANALYSIS_DETAILS", {"globalVid": self.host << 48, "duration": stop,
                                         "startTime": CAPTURE_CLOCK_NS,
                                         "stopTime": CAPTURE_CLOCK_NS + stop})  # fmt: skip
        utc = "2024-01-01T00:00:00"
        row = {"utcEpochNs": UTC_EPOCH_NS, "utcTime": utc, "localTime": utc}
        self.insert("TARGET_INFO_SESSION_START_TIME", row)
        self._write_meta()
        if drop_empty:
            for table in EVENT_TABLES:
                if self.con.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None:
                    self.con.execute(f"DROP TABLE {table}")
        self.con.commit()
        self.con.close()

    def __enter__(self) -> NsysDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
