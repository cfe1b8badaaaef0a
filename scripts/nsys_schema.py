"""The Nsight Systems 2022.4 SQLite export schema (3.0.0): tables, enum rows, id encoders.

Test and benchmark tooling, outside the ``annotate → launch → ingest → report`` pipeline:
``nsys_db.NsysDb`` writes nsys-shaped files from this schema (hand-built fixtures and
``make_profile.py`` use it) that the real ``nsys stats`` reads like any export. Tables, columns,
types and constraints are those of ``EXPORT_SCHEMA_VERSION 3.0.0`` as written by nsys 2022.4.2.1
(checked against a real export in ``tests/test_make_profile.py``); the per-column comments of the
real DDL are left out. ``from nsys_schema import NsysDb`` works too.
"""

from __future__ import annotations

import re
from typing import Any

EXPORT_PRODUCT_VERSION = "2022.4.2.1"
EXPORT_SCHEMA_VERSION = "3.0.0"
HOST_ID = 1

NVTX_MARK = 34
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
NVTX_DOMAIN_DESTROY = 76
MEMCPY_HTOD, MEMCPY_DTOH, MEMCPY_DTOD = 1, 2, 8
MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE = 0, 1, 2
SYNC_STREAM = 3

TABLES: dict[str, str] = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
        "mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, "
        "registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, "
        "blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
        "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
        "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, "
        "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, "
        "deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, "
        "srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, "
        "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, "
        "graphNodeId INTEGER, memKind INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, "
        "doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, "
        "jsonTextId INTEGER, jsonText TEXT"
    ),
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
        "isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, "
        "clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, "
        "chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, "
        "nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER, "
        "maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, "
        "maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, "
        "asyncEngines INTEGER, maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, "
        "maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, maxBlockDimY INTEGER, "
        "maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, "
        "computeMajor INTEGER, computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER"
    ),
    "TARGET_INFO_CUDA_STREAM": (
        "streamId INTEGER NOT NULL, hwId INTEGER NOT NULL, vmId INTEGER NOT NULL, "
        "processId INTEGER NOT NULL, contextId INTEGER NOT NULL, priority INTEGER NOT NULL, "
        "flag INTEGER NOT NULL"
    ),
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "ANALYSIS_DETAILS": (
        "globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, "
        "stopTime INTEGER NOT NULL"
    ),
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
    "EXPORT_META_DATA": "name TEXT NOT NULL, value TEXT",
}
ENUM_COLUMNS = "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT"

# ENUM_NSYS_EVENT_TYPE ids 0..133 in order; in 2022.4 every label equals its name.
_EVENT_TYPES = (  # noqa: SIM905 (one long line otherwise)
    "Unknown,CpuCycles,Instructions,CacheReferences,L1CacheDataWriteMisses,L1CacheDataReadMisses,"
    "L1CacheInstructionMisses,L2CacheDataWriteMisses,L2CacheDataReadMisses,"
    "L2CacheInstructionMisses,BranchInstructions,BranchMisses,BusCycles,CpuClock,TaskClock,"
    "PageFault,ContextSwitches,CpuMigrations,PageFaultsMin,PageFaultsMax,AlignmentFaults,"
    "EmulationFaults,ThreadState,Frames,Annotations,SchedSwitch,SchedWakeup,Command,Mmap,MemUsage,"
    "Emc,Composite,NvtxEvents,NvtxCategory,NvtxMark,NvtxPushRange,NvtxPopRange,NvtxStartRange,"
    "NvtxEndRange,NvtxThread,PowerRate,Sched,CpuCyclesSelf,CpuCyclesTotal,CpuCyclesSelfPlus,Cuda,"
    "CudaDevice,TraceProcess,TraceFunctions,Diagnostic,GlWorkload,BandwidthUsage,KhrDebugMark,"
    "KhrDebugPushRange,KhrDebugPopRange,KhrDebugGpuMark,KhrDebugGpuPushRange,KhrDebugGpuPopRange,"
    "GpuCtxsw,NvtxPushPopRange,NvtxStartEndRange,ProfTime,KhrDebugPushPopRange,"
    "KhrDebugGpuPushPopRange,NvtxtCategory,NvtxtMark,NvtxtPushRange,NvtxtPopRange,"
    "NvtxtStartRange,NvtxtEndRange,NvtxtPushPopRange,NvtxtStartEndRange,NvtxtMetaThread,"
    "NvtxtMetaProcess,NvtxtMetaFileDisplay,NvtxDomainCreate,NvtxDomainDestroy,NvnGpuCmdBuf,"
    "TraceVSync,CudaDeviceKernel,CudaDeviceMemory,Pmu,NvnGpuDraw,NvnGpuCompute,NvnGpuDebug,"
    "OS runtime libraries,CuDNN,CuBLAS,NvMedia,OpenACC,Correlation,DX12,DX12Workload,PmuRawEvent,"
    "GraphicsFrame,Vulkan,VulkanWorkload,NvtxNameCudaDevice,NvtxNameCudaContext,"
    "NvtxNameCudaStream,SystemEvent,GpuMemoryEvent,DX12CreateObject,VulkanCreateObject,"
    "UnitTraceEvent,CustomETWEvent,CudaSyncEvent,SLIEvent,CudaBacktrace,WddmEvent,DX11,"
    "DX11CreateObject,DXGI,CudaGraphNodeCreation,OpenMP,UncorePmuEvent,UncorePmuCarmel,"
    "CudaDeviceMemoryUsage,ETWDxgKrnlEvent,CudaUvmCpuPageFaultEvent,CudaUvmGpuPageFaultEvent,"
    "NICMetricsValuesEvent,NICMetricsListEvent,InterruptHandler,NVENC,NVDEC,nvJPEG,"
    "CudaEventRecord,PerfEventCountEvent,CudaDeviceMemoryPool,CudaDeviceGraph,"
    "CudaGraphExecCreation,CudaGraphCreation,CudaGraphClone"
).split(",")


def _enum(prefix: str, labels: str) -> list[tuple[int, str, str]]:
    """Rows ``(id, PREFIX_SUFFIX, label)`` from ``"SUFFIX=label;..."`` in id order."""
    pairs = [item.split("=") for item in labels.split(";")]
    return [(i, prefix + suffix, label) for i, (suffix, label) in enumerate(pairs)]


ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_NSYS_EVENT_TYPE": [(i, name, name) for i, name in enumerate(_EVENT_TYPES)],
    "ENUM_CUDA_MEMCPY_OPER": _enum(
        "CUDA_MEMCPY_KIND_",
        "UNKNOWN=Unknown;HTOD=Host-to-Device;DTOH=Device-to-Host;HTOA=Host-to-Array;"
        "ATOH=Array-to-Host;ATOA=Array-to-Array;ATOD=Array-to-Device;DTOA=Device-to-Array;"
        "DTOD=Device-to-Device;HTOH=Host-to-Host;PTOP=Peer-to-Peer;"
        "UVM_HTOD=Unified Host-to-Device;UVM_DTOH=Unified Device-to-Host;"
        "UVM_DTOD=Unified Device-to-Device",
    ),
    "ENUM_CUDA_MEM_KIND": _enum(
        "CUDA_MEMOPR_MEMORY_KIND_",
        "PAGEABLE=Pageable;PINNED=Pinned;DEVICE=Device;ARRAY=Array;MANAGED=Managed;"
        "DEVICE_STATIC=Device Static;MANAGED_STATIC=Managed Static;UNKNOWN=Unknown",
    ),
    "ENUM_CUPTI_SYNC_TYPE": _enum(
        "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_",
        "UNKNOWN=Unknown;EVENT_SYNCHRONIZE=Event sync;STREAM_WAIT_EVENT=Stream wait sync;"
        "STREAM_SYNCHRONIZE=Stream sync;CONTEXT_SYNCHRONIZE=Context sync",
    ),
    "ENUM_CUDA_KRENEL_LAUNCH_TYPE": _enum(  # sic: nsys's own spelling
        "CUDA_KERNEL_LAUNCH_TYPE_",
        "UNKNOWN=Unknown;REGULAR=Regular;COOPERATIVE_SINGLE_DEVICE=Coop Single Device;"
        "COOPERATIVE_MULTI_DEVICE=Coop Multi Device",
    ),
    "ENUM_CUDA_FUNC_CACHE_CONFIG": _enum(
        "CU_FUNC_CACHE_PREFER_", "NONE=None;SHARED=Shared;L1=L1;EQUAL=Equal"
    ),
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": _enum(
        "CUDA_SHARED_MEM_LIMIT_", "DEFAULT=Default;OPTIN=Opt in"
    ),
}

# Tables nsys leaves out of an export when the trace produced no such event.
EVENT_TABLES = (*[t for t in TABLES if t.startswith("CUPTI_")], "NVTX_EVENTS")

KERNEL_DEFAULTS: dict[str, Any] = {
    "launchType": 1, "cacheConfig": 0, "registersPerThread": 32, "gridX": 1, "gridY": 1,
    "gridZ": 1, "blockX": 128, "blockY": 1, "blockZ": 1, "staticSharedMemory": 0,
    "dynamicSharedMemory": 0, "localMemoryPerThread": 0, "localMemoryTotal": 0,
    "sharedMemoryExecuted": 0, "sharedMemoryLimitConfig": 0,
}  # fmt: skip


def ddl() -> list[str]:
    """The CREATE TABLE statements of every table this module writes."""
    stmts = [f"CREATE TABLE {name} ({cols})" for name, cols in TABLES.items()]
    return stmts + [f"CREATE TABLE {name} ({ENUM_COLUMNS})" for name in ENUMS]


def global_pid(pid: Any, host: int = HOST_ID) -> Any:
    """nsys ``globalPid``: host id in bits 48+, pid in bits 24..47, tid bits 0 (ints or arrays)."""
    return (host << 48) | (pid << 24)


def global_tid(pid: Any, tid: Any, host: int = HOST_ID) -> Any:
    """nsys ``globalTid``: ``host << 48 | pid << 24 | tid``, e.g. ``0x1_00177e_00177e``."""
    return (host << 48) | (pid << 24) | tid


_ANON = re.compile(r"\((anonymous namespace|anonymous)\)|<unnamed>")


def short_name(name: str) -> str:
    """The bare function name nsys stores as ``shortName``: no ``void``, scope, templates, args."""
    bare = _ANON.sub("", name.removeprefix("void "))
    bare = re.split(r"[<(]", bare, maxsplit=1)[0]
    return bare.rsplit("::", 1)[-1].strip() or name


def __getattr__(name: str) -> Any:
    """``from nsys_schema import NsysDb``: the writer lives in ``nsys_db`` (which imports this)."""
    if name == "NsysDb":
        from nsys_db import NsysDb

        return NsysDb
    raise AttributeError(f"module 'nsys_schema' has no attribute {name!r}")
