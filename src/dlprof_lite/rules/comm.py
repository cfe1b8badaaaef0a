"""Communication kernels: which GPU kernels move data between ranks (NCCL and its forks).

Kernels are told by name, as nsys's own reports and HTA do (HTA ``KernelType.COMMUNICATION``:
a kernel whose name contains ``nccl``). We match the names the libraries generate, not the
substring, so a user kernel that merely mentions NCCL in a template argument is not one:

- NCCL 2.19 and later: ``ncclDevKernel_<Func>[_<RedOp>_<type>_<ALGO>_<PROTO>]``, one kernel
  per collective (NCCL ``src/device/generate.py``; the kernels declared in its generated
  ``device_table.cu``), e.g. ``ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)``
  (corpus: GindaChen nsys-ai mfu_2gpu fixture);
- NCCL before 2.19: ``ncclKernel_<Func>_<ALGO>_<PROTO>_<RedOp>_<type>`` (NCCL
  ``src/collectives/device/common.h``, ``IMPL_COLL_KERN``), e.g.
  ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)`` (HTA test traces, A100);
- RCCL (ROCm's fork of NCCL) generates its kernels with the same two prefixes.

Tested on real names in tests/test_rules.py.
"""

from __future__ import annotations

import re

COMM_KERNEL_RE = re.compile(
    r"^(?:void\s+)?(?P<lib>nccl)(?:Dev)?Kernel_(?P<func>[A-Za-z]+?)(?=_|\(|<|$)"
)


def comm_kernel(name: str) -> str | None:
    """The collective a communication kernel runs (``AllReduce``), else None."""
    match = COMM_KERNEL_RE.match(name)
    return match["func"] if match else None


def is_comm_kernel(name: str) -> bool:
    return COMM_KERNEL_RE.match(name) is not None


# Host time inside a collective call (the idle partition's ``comm`` cause, rules/idle.py):
# NVTX ranges that wrap one, by their name: PyTorch's record_function names a collective
# ``nccl:all_reduce``/``gloo:all_reduce`` (``record_param_comms``; corpus: the GindaChen
# mfu_2gpu fixture's ``nccl:all_to_all, op_id = ...``) and its dispatcher op ``c10d::allreduce_``
# under emit_nvtx; NCCL's own NVTX ranges are ``ncclAllReduce``, ``ncclGroupEnd``, ...; nsys's
# MPI trace names each call ``MPI_Allreduce``; our annotation wraps each DDP bucket's
# all-reduce in ``ddp:bucket:<id>`` (rules/names.py) and each torch.distributed collective
# call in ``coll:<op>`` (rules/collectives.py). Ranges in the NCCL or MPI domain are
# collectives whatever their name.
COMM_RANGE_RE = re.compile(r"^(?:nccl(?::|[A-Z])|gloo:|ucc:|c10d::|MPI_|ddp:bucket:\d|coll:)")
COMM_DOMAINS = ("NCCL", "MPI")
