"""The collectives dlprof-lite times, what each moves, and the bus-bandwidth factors.

Place in the pipeline: rules (every stage may read it; imports nothing heavy). The
annotation wraps the public ``torch.distributed`` functions of :data:`OPS`
(:mod:`dlprof_lite.annotate.collectives`); the report matches their calls across ranks
(:mod:`dlprof_lite.report.collectives`).

**Bytes** follow nccl-tests' "size" column (NVIDIA nccl-tests, doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): all-reduce, broadcast and
reduce count the tensor; all-gather the whole gathered output (n x the input); reduce-scatter
and all-to-all the whole input. :data:`SIZE_OF` says which argument holds it.

**Bandwidth**, from the same document: ``algbw = bytes / time``; ``busbw = algbw x factor``,
the factor making the figure comparable with the link's peak whatever the rank count n:
all-reduce 2(n-1)/n, all-gather, reduce-scatter and all-to-all (n-1)/n, broadcast and reduce 1.
Point-to-point sends and receives have no factor (busbw = algbw) and are not matched across
ranks as collectives are (an instance is a group's n-th collective on every rank).
"""

from __future__ import annotations

import re

from dlprof_lite.rules.names import COLLECTIVE

# The wrapped functions (torch.distributed's public names) and the argument holding the
# tensor (or list of tensors) whose bytes are the op's size; None: it moves no data.
SIZE_OF: dict[str, str | None] = {
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor_list",
    "all_gather_into_tensor": "output_tensor",
    "all_gather_single": "output_tensor",  # torch 2.13's name for all_gather_into_tensor
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "reduce_scatter_single": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "send": "tensor",
    "recv": "tensor",
    "isend": "tensor",
    "irecv": "tensor",
    "barrier": None,
}
OPS = tuple(SIZE_OF)
POINT_TO_POINT = ("send", "recv", "isend", "irecv")
SENDS = ("send", "isend")
# A send and its receive are one instance of the directed pair ``<sender>><receiver>`` (the
# n-th transfer from one to the other, counted on each side): transfer and wait as for a
# collective, but their ends are not simultaneous (a send may complete once buffered), so
# clocks are never aligned on them.
PAIR_SEP = ">"
# NCCL kernels of point-to-point transfers (rules/comm.py names the function); NCCL runs an
# all-to-all as sends and receives too, so these alone do not make a pipeline (ALL_TO_ALL_RE).
P2P_KERNELS = ("SendRecv", "Send", "Recv")
ALL_TO_ALL_RE = r"(?i)all_?to_?all"
# Each op's nccl-tests family (the tensor and list forms of one collective are one family).
FAMILY = {"all_gather_into_tensor": "all_gather", "all_gather_single": "all_gather",
          "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
          "all_to_all_single": "all_to_all", "isend": "send", "irecv": "recv"}
# -- FSDP units ----------------------------------------------------------------------------------
#
# A collective FSDP issues names the unit it gathers or reduces, found on the calling stack (the
# object whose method issued it), by class name so that nothing of FSDP is imported:
# - FSDP2 (``fully_shard``): ``FSDPParamGroup`` (torch/distributed/fsdp/_fully_shard/
#   _fsdp_param_group.py) runs ``foreach_all_gather`` from ``unshard`` and ``foreach_reduce``
#   from ``post_backward``; its ``modules`` are the unit's modules, its ``_training_state`` a
#   ``TrainingState`` (FORWARD, PRE_BACKWARD, POST_BACKWARD; a prefetched unit is put in the
#   prefetching pass's state first, ``use_training_state``).
# - FSDP1 (``FullyShardedDataParallel``): ``FlatParamHandle`` (torch/distributed/fsdp/
#   _flat_param.py) all-gathers in ``_all_gather_flat_param`` (``self``) and is reduced in
#   ``_runtime_utils._reduce_grad(state, handle)`` (``handle``); its ``_fully_sharded_module``
#   is the unit, its ``_training_state`` a ``HandleTrainingState`` (FORWARD, BACKWARD_PRE,
#   BACKWARD_POST).
# The bytes are then the unit's padded sizes: FSDP pads each shard so that every rank holds as
# many elements, and gathers (or reduce-scatters) the padded whole.
FSDP_OWNERS: dict[str, str] = {  # the owner's class -> the attribute holding its module(s)
    "FSDPParamGroup": "modules",
    "FlatParamHandle": "_fully_sharded_module",
}
FSDP_OWNER_LOCALS = ("self", "handle")  # the locals an owner is found in
FSDP_STACK_DEPTH = 8  # frames looked at above the wrapped call (FSDP2: 3, FSDP1: 1)
# The op families FSDP issues (an HSDP replica all-reduce too).
FSDP_FAMILIES = ("all_gather", "reduce_scatter", "all_reduce")


def fsdp_pass(state_name: str) -> str | None:
    """``forward`` or ``backward`` from an FSDP training state's name, else None."""
    name = state_name.upper()
    if "BACKWARD" in name:
        return "backward"
    if "FORWARD" in name:
        return "forward"
    return None


# The advice on exposed FSDP collectives: all-gathers (or reduce-scatters) that no compute
# overlaps for at least this share of the mean step. dlprof-lite choice: a tenth of the step is
# what prefetching can win back (FSDP's own design overlaps all of it but the first all-gather
# and the last reduce-scatter).
FSDP_EXPOSED_WARN_SHARE = 0.10

# The range each call runs in (dlprof-lite domain): ``coll:`` + the op.
RANGE_PREFIX = "coll:"
FACT_KEY = COLLECTIVE


# The most ranks a group may name (a profile's text is untrusted): far beyond any job.
MAX_GROUP_RANKS = 1_000_000


def range_name(op: str) -> str:
    return f"{RANGE_PREFIX}{op}"


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``op`` on ``ranks`` ranks (1 for one rank)."""
    if ranks <= 1:
        return 1.0
    family = FAMILY.get(op, op)
    if family == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if family in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    return 1.0


def ranks_text(ranks: list[int]) -> str:
    """A group's ranks, short: ``0-3`` for a run, else comma-separated (``0,2,4``)."""
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def pair_text(sender: int, receiver: int) -> str:
    """The directed pair a send from ``sender`` to ``receiver`` (and its receive) belongs to."""
    return f"{sender}{PAIR_SEP}{receiver}"


def ranks_count(text: str) -> int:
    """How many ranks a group's text names, without listing them (a profile's text is
    untrusted: ``0-999999999`` is a count, not a list; a directed pair ``a>b`` is 2); a
    ``#n`` suffix (the n-th communicator of an export without facts,
    report/collectives/calls.py) is not part of them; 0 for text that is no group."""
    text = str(text).split("#", 1)[0]
    if re.fullmatch(r"\d{1,9}>\d{1,9}", text):
        return 2  # a directed pair (pair_text)
    if re.fullmatch(r"\d{1,9}-\d{1,9}", text):
        first, last = (int(v) for v in text.split("-"))
        count = last - first + 1
        return count if 0 < count <= MAX_GROUP_RANKS else 0
    if re.fullmatch(r"\d{1,9}(,\d{1,9})*", text):
        count = text.count(",") + 1
        return count if count <= MAX_GROUP_RANKS else 0
    return 0


# -- the link a node's collectives run over -----------------------------------------------------
#
# NVLink bandwidth per GPU of the SXM products, whose NVLink is always present (an HGX board):
# the datasheets' total (both directions) halved, since nccl-tests' busbw compares with one
# direction's link speed. PCIe and NVL cards (NVLink only with an optional bridge) have no row:
# without knowing the link, no "far below the link" is said.
NVLINK_SOURCES = {
    "hopper": "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: NVLink 900 GB/s) and NVIDIA "
              "H200 product page (H200 SXM: NVLink 900 GB/s), https://www.nvidia.com/en-us/"
              "data-center/h100/, https://www.nvidia.com/en-us/data-center/h200/",
    "a100": "NVIDIA A100 Tensor Core GPU datasheet (A100 SXM: NVLink 600 GB/s), "
            "https://www.nvidia.com/en-us/data-center/a100/",
    "v100": "NVIDIA Tesla V100 datasheet (V100 SXM2: NVLink 300 GB/s), "
            "https://www.nvidia.com/en-us/data-center/v100/",
}
NVLINK_GBPS: tuple[tuple[str, float, str], ...] = (  # (device-name regex, GB/s one way, source)
    (r"\bH100\b(?!.*\b(?:PCIe|NVL)\b)", 450.0, "hopper"),
    (r"\bH200\b(?!.*\bNVL\b)", 450.0, "hopper"),
    (r"\bA100[- ]SXM", 300.0, "a100"),
    (r"\bV100[- ]SXM", 150.0, "v100"),
)
# The advice "bandwidth far below the link": a collective of at least this many bytes (nccl-tests
# reach their peak busbw from tens of MB; smaller ones are latency-bound), whose busbw is below
# this share of the link while the ranks wait at most this share of the calls' time (so the
# time is the transfer's, not a late rank's). dlprof-lite choices.
LINK_MIN_BYTES = 16 * 2**20
LINK_LOW_SHARE = 0.25
LINK_MAX_WAIT_SHARE = 0.2


def nvlink_gbps(device_name: str) -> tuple[float, str] | None:
    """One direction's NVLink GB/s of an SXM GPU and the datasheet it is from, else None."""
    for pattern, gbps, source in NVLINK_GBPS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return gbps, NVLINK_SOURCES[source]
    return None
