"""Every nsys schema difference, resolved in one place (ingest, before any analysis).

The reader asks this module which tables and columns an export has and gets back one
SELECT per table whose result columns are the same for every nsys version, 2020.3 to
2026.2 (../shared/corpus/SCHEMA_NOTES.md). Nothing else in dlprof-lite checks a version.

Queries are built from named fragments with only the columns the analysis needs. Nullable
integer columns are selected as ``COALESCE(col, -1)`` so that every integer result column
is a plain int64 array; ``NULL_INT`` marks "absent" and the reader turns it into ``<NA>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

import numpy as np
import numpy.typing as npt

NULL_INT = -1

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
# CUPTI's record of each synchronisation a CUDA call made, with the stream it synchronised
# or made wait (its syncType's numbering changed between versions: not read).
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
GPU_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU")
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
THREADS_TABLE = "ThreadNames"
# Every table the reader queries (the only ones whose columns it inspects).
READ_TABLES = (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE, DRIVER_TABLE,
               NVTX_TABLE, STRINGS_TABLE, *GPU_TABLES, *META_TABLES,
               "ANALYSIS_DETAILS", THREADS_TABLE, SYNC_TABLE)  # fmt: skip

# Tables whose presence marks a file as an nsys export: every export has StringIds, and
# every export with any data has at least one of the others.
NSYS_MARKER_TABLES = (STRINGS_TABLE, "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME")

# ENUM_NSYS_EVENT_TYPE ids. Stable in every version; the ENUM table only exists from 2022.4.
EVENT_NVTX_MARK = 34
EVENT_NVTX_PUSH_POP = 59
EVENT_NVTX_START_END = 60
EVENT_NVTX_DOMAIN_CREATE = 75

# ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND, for exports older than 2022.4 that lack them.
COPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
    7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "uvm_HtoD", 12: "uvm_DtoH",
    13: "uvm_DtoD",
}  # fmt: skip
MEM_KINDS = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed",
    5: "device_static", 6: "managed_static", 7: "unknown",
}  # fmt: skip


@dataclass(frozen=True)
class ExportSchema:
    """The tables of one export and the columns of the ones the reader queries."""

    tables: frozenset[str]
    columns: dict[str, frozenset[str]]
    # Columns SQLite computes on read (VIRTUAL generated), and virtual tables: nsys writes
    # neither, and the reader refuses to read them from an untrusted file.
    computed: dict[str, frozenset[str]] = field(default_factory=dict)
    virtual: frozenset[str] = frozenset()

    def has(self, table: str) -> bool:
        return table in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, frozenset())

    def is_nsys(self) -> bool:
        return STRINGS_TABLE in self.tables and any(t in self.tables for t in NSYS_MARKER_TABLES)

    def meta_table(self) -> str | None:
        """The export metadata table: renamed in 2024.2, absent before 2021.5."""
        for name in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if name in self.tables:
                return name
        return None

    def _opt(self, table: str, column: str, alias: str) -> str:
        if self.has_column(table, column):
            return f"COALESCE({column}, {NULL_INT}) AS {alias}"
        return f"{NULL_INT} AS {alias}"

    def kernel_query(self) -> str:
        t = KERNEL_TABLE
        return (
            "SELECT start, end, deviceId, contextId, streamId, "
            f"COALESCE(correlationId, {NULL_INT}) AS correlationId, "
            f"COALESCE(globalPid, {NULL_INT}) AS globalPid, "
            # A NULL name id is read as an id StringIds lacks: the reader names the kernel.
            f"COALESCE(demangledName, {NULL_INT}) AS demangledName, "
            f"COALESCE(shortName, {NULL_INT}) AS shortName, "
            f"{self._opt(t, 'graphNodeId', 'graphNodeId')} "
            f"FROM {t}"
        )

    def memcpy_query(self) -> str:
        t = MEMCPY_TABLE
        return (
            "SELECT start, end, deviceId, contextId, streamId, "
            f"COALESCE(correlationId, {NULL_INT}) AS correlationId, "
            f"COALESCE(globalPid, {NULL_INT}) AS globalPid, "
            f"bytes, copyKind, {self._opt(t, 'srcKind', 'srcKind')}, "
            f"{self._opt(t, 'dstKind', 'dstKind')}, {self._opt(t, 'graphNodeId', 'graphNodeId')} "
            f"FROM {t}"
        )

    def memset_query(self) -> str:
        t = MEMSET_TABLE
        return (
            "SELECT start, end, deviceId, contextId, streamId, "
            f"COALESCE(correlationId, {NULL_INT}) AS correlationId, "
            f"COALESCE(globalPid, {NULL_INT}) AS globalPid, "
            f"bytes, {self._opt(t, 'memKind', 'memKind')}, "
            f"{self._opt(t, 'graphNodeId', 'graphNodeId')} "
            f"FROM {t}"
        )

    def api_query(self, table: str) -> str:
        # Only calls that can own GPU work or show a sync carry a correlation id; keep all
        # (advice reads synchronisation and memcpy calls too).
        return (
            "SELECT start, end, COALESCE(globalTid, 0) AS globalTid, "
            f"COALESCE(correlationId, {NULL_INT}) AS correlationId, nameId "
            f"FROM {table}"
        )

    def sync_query(self) -> str | None:
        """Each synchronisation record's call (process, correlation id) and stream; None
        where the table or a column the records need is missing."""
        t = SYNC_TABLE
        if not all(self.has_column(t, c) for c in ("correlationId", "globalPid", "streamId")):
            return None
        return (f"SELECT COALESCE(correlationId, {NULL_INT}) AS correlationId, "
                f"COALESCE(globalPid, {NULL_INT}) AS globalPid, "
                f"COALESCE(streamId, {NULL_INT}) AS streamId FROM {t}")

    def nvtx_query(self) -> str:
        """Ranges, marks and domain names; the text is inline (``text``) or a StringIds id
        (``textId``). Domain-create events come in the same scan: the reader splits them off.

        The id is returned as it is and resolved by the reader against the StringIds it
        already holds: a per-row subquery here costs more than the rest of the read.
        """
        text_id = self._opt(NVTX_TABLE, "textId", "textId")
        return (
            f"SELECT start, COALESCE(end, {NULL_INT}) AS end, eventType, "
            f"COALESCE(globalTid, 0) AS globalTid, "
            f"COALESCE(domainId, 0) AS domainId, {text_id}, COALESCE(text, '') AS text "
            f"FROM {NVTX_TABLE} WHERE eventType IN "
            f"({EVENT_NVTX_PUSH_POP}, {EVENT_NVTX_START_END}, {EVENT_NVTX_MARK}, "
            f"{EVENT_NVTX_DOMAIN_CREATE})"
        )

    def gpu_query(self) -> str | None:
        """GPU name, SM count and compute capability under a fixed set of column names."""
        if self.has_column("TARGET_INFO_GPU", "smCount"):
            return (
                "SELECT id AS device_id, name, smCount AS sm_count, "
                "computeMajor AS cc_major, computeMinor AS cc_minor FROM TARGET_INFO_GPU"
            )
        if self.has("TARGET_INFO_CUDA_GPU"):  # 2020.3: details in a separate table
            return (
                "SELECT deviceId AS device_id, name, numMultiprocessors AS sm_count, "
                "computeCapabilityMajor AS cc_major, computeCapabilityMinor AS cc_minor "
                "FROM TARGET_INFO_CUDA_GPU GROUP BY deviceId"
            )
        if self.has_column("TARGET_INFO_GPU", "deviceId"):
            return (
                "SELECT deviceId AS device_id, name, NULL AS sm_count, NULL AS cc_major, "
                "NULL AS cc_minor FROM TARGET_INFO_GPU"
            )
        return None

    def thread_names_query(self) -> str | None:
        """Each thread's OS name (``ThreadNames``, every nsys version that records threads):
        its globalTid and StringIds id; None without the table."""
        if not (self.has_column(THREADS_TABLE, "globalTid")
                and self.has_column(THREADS_TABLE, "nameId")):  # fmt: skip
            return None
        return f"SELECT globalTid, nameId FROM {THREADS_TABLE} WHERE globalTid IS NOT NULL"

    def session_query(self) -> str | None:
        """The session's length, ns. nsys times every event from the session's start (0 on
        the events' clock) to ``ANALYSIS_DETAILS.duration``; ``startTime``/``stopTime`` are on
        another clock (their difference is the duration in every corpus export that has both;
        their values are not event times: 2025.5 records 1.8e14 for events at 4e8)."""
        if self.has_column("ANALYSIS_DETAILS", "duration"):
            return "SELECT MAX(duration) FROM ANALYSIS_DETAILS"
        if self.has_column("ANALYSIS_DETAILS", "stopTime") and self.has_column(
            "ANALYSIS_DETAILS", "startTime"
        ):
            return "SELECT MAX(stopTime - startTime) FROM ANALYSIS_DETAILS"
        return None


@overload
def decode_pid(global_id: int) -> int: ...
@overload
def decode_pid(global_id: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
def decode_pid(global_id: int | npt.NDArray[np.int64]) -> int | npt.NDArray[np.int64]:
    """Process id from an nsys globalTid/globalPid: bits 24..47 (SCHEMA_NOTES.md).

    Works on ints and on numpy int64 arrays alike. Bits 48 and up hold the host (VM) id
    and are dropped: dlprof-lite analyses one host per export.
    """
    return (global_id >> 24) & 0xFFFFFF


@overload
def decode_tid(global_tid: int) -> int: ...
@overload
def decode_tid(global_tid: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
def decode_tid(global_tid: int | npt.NDArray[np.int64]) -> int | npt.NDArray[np.int64]:
    """Thread id from an nsys globalTid: bits 0..23 (zero in a kernel's globalPid)."""
    return global_tid & 0xFFFFFF
