"""Generate a multi-GPU export shaped like a real NCCL data-parallel run, with planted waits.

Test tooling, outside the pipeline. One process per rank (pid ``1000 + rank``), each on its own
GPU, runs ``--steps`` annotated iterations (``iteration`` ⊃ ``forward``/``backward``/
``optimizer``): compute kernels on stream 7, then one all-reduce as recent NCCL launches it
(``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` on stream 20, launched by
``cudaLaunchKernelExC`` inside NCCL's own ``ncclAllReduce`` range of the NCCL domain). A
process fact (our annotation's) gives each process its rank.

The ground truth (``<out>.truth.json``): rank r reaches step s's all-reduce ``skew[r] +
jitter`` after the earliest rank, that lateness being its backward GEMM in layer ``decoder``;
the all-reduce kernel of every rank ends ``transfer`` after the last arrival, so rank r's wait
is the last arrival minus its own and the transfer is ``--transfer-us``. ``--annotated``
also writes what dlprof-lite's annotation records around the call (a ``collective`` fact and
a ``coll:all_reduce`` range, bytes ``--bytes``).

    python scripts/make_nccl_profile.py OUT.sqlite --ranks 4 --skew-us 0,0,300,0 [--annotated]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from dlprof_lite.rules.collectives import range_name, ranks_text
from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import COLLECTIVE, DOMAIN
from nsys_db import NsysDb

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
COMPUTE_KERNEL = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
T0 = 1_000_000
STEP_NS = 5_000_000
COMPUTE_NS = 2_000_000


def make(path: Path, *, ranks: int, steps: int, skew_ns: list[int], transfer_ns: int,
         jitter_ns: int, annotated: bool, nbytes: int, seed: int = 0,
         gpu_name: str = "NVIDIA H100 80GB HBM3", node_ranks: range | None = None,
         clock_offset_ns: int = 0, end_jitter_ns: int = 0) -> dict[str, object]:
    """Write the export; returns its ground truth (also written beside it).

    ``node_ranks``: the ranks this export holds (one node of a job of ``ranks``; default all);
    every node made with the same seed shares one history. Its events are on its own clock,
    ``clock_offset_ns`` ahead of the job's; each rank's all-reduce ends up to
    ``end_jitter_ns`` after the last arrival plus the transfer (completion skew)."""
    rng = random.Random(seed)
    mine = node_ranks if node_ranks is not None else range(ranks)
    truth: dict[str, Any] = {"instances": [], "clock_offset_ns": clock_offset_ns}
    with NsysDb(path) as db:
        for rank in mine:
            pid = 1000 + rank
            db.process(pid)
            db.thread(pid, pid, "python3")
            db.stream(pid, 7)
            db.stream(pid, 20)
            db.gpu(rank - mine[0], name=gpu_name)
            db.mark(clock_offset_ns + T0 - 500, fact_text("process", {
                "rank": rank, "local_rank": rank - mine[0], "world_size": ranks,
            }), pid, pid, domain=DOMAIN)  # fmt: skip
        corr = {r: 0 for r in range(ranks)}
        for step in range(steps):
            base = clock_offset_ns + T0 + step * STEP_NS
            arrive = [skew_ns[r] + rng.randrange(jitter_ns + 1) for r in range(ranks)]
            late = [rng.randrange(end_jitter_ns + 1) for _ in range(ranks)]
            last = max(arrive)
            instance = {"seq": step + 1, "transfer_ns": transfer_ns,
                        "last_rank": arrive.index(last)}  # fmt: skip
            for rank in mine:
                pid = 1000 + rank
                # the GPU reaches the all-reduce after its compute and its lateness
                t = base + COMPUTE_NS + arrive[rank]
                ends = base + COMPUTE_NS + last + transfer_ns + late[rank]
                stop = base + STEP_NS - 100_000
                db.push(base, stop, "iteration", pid, pid, domain=DOMAIN)
                db.push(base, base + COMPUTE_NS // 2, "forward", pid, pid, domain=DOMAIN)
                db.push(base + COMPUTE_NS // 2, t + 2_000, "backward", pid, pid, domain=DOMAIN)
                db.push(ends + 1_000, stop, "optimizer", pid, pid, domain=DOMAIN)
                # the forward's GEMM in layer "encoder", the same on every rank; the
                # backward's in layer "decoder" lasts as long as the rank is late
                db.push(base + 5, base + 25, "fwd:encoder:Linear", pid, pid, domain=DOMAIN)
                corr[rank] += 1
                db.runtime(base + 10, base + 20, "cudaLaunchKernel_v7000", pid=pid, tid=pid,
                           correlation_id=corr[rank])  # fmt: skip
                db.kernel(base + 30, base + COMPUTE_NS - 100, COMPUTE_KERNEL, pid=pid,
                          correlation_id=corr[rank], device=rank)  # fmt: skip
                back = base + COMPUTE_NS // 2 + 100
                db.push(back, back + 30, "bwd:decoder:Linear", pid, pid, domain=DOMAIN)
                corr[rank] += 1
                db.runtime(back + 5, back + 15, "cudaLaunchKernel_v7000", pid=pid, tid=pid,
                           correlation_id=corr[rank])  # fmt: skip
                db.kernel(base + COMPUTE_NS, t - 100, COMPUTE_KERNEL, pid=pid,
                          correlation_id=corr[rank], device=rank)  # fmt: skip
                launch = t - 600
                if annotated:
                    db.mark(launch - 300, fact_text(COLLECTIVE, {
                        "op": "all_reduce", "group": ranks_text(list(range(ranks))),
                        "seq": step + 1, "bytes": nbytes, "dtype": "float32", "async": False,
                    }), pid, pid, domain=DOMAIN)  # fmt: skip
                    db.push(launch - 200, launch + 400, range_name("all_reduce"), pid, pid,
                            domain=DOMAIN)  # fmt: skip
                db.push(launch - 100, launch + 300, "ncclAllReduce", pid, pid, domain="NCCL")
                corr[rank] += 1
                db.runtime(launch, launch + 200, "cudaLaunchKernelExC_v11060", pid=pid, tid=pid,
                           correlation_id=corr[rank])  # fmt: skip
                db.kernel(t, ends, NCCL_KERNEL, pid=pid, correlation_id=corr[rank],
                          device=rank, stream=20)  # fmt: skip
                instance[f"wait_{rank}"] = last - arrive[rank]
                instance[f"end_late_{rank}"] = late[rank]
            truth["instances"].append(instance)
        db.session(0, clock_offset_ns + T0 + steps * STEP_NS + 1_000_000)
    path.with_suffix(".truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--skew-us", default="0,0,300,0",
                        help="each rank's lateness at the all-reduce, comma-separated")
    parser.add_argument("--jitter-us", type=int, default=20)
    parser.add_argument("--transfer-us", type=int, default=150)
    parser.add_argument("--bytes", type=int, default=25 * 2**20)
    parser.add_argument("--annotated", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--node-ranks", help="FIRST:STOP, the ranks of this node (default all)")
    parser.add_argument("--clock-offset-us", type=int, default=0)
    parser.add_argument("--end-jitter-us", type=int, default=0)
    args = parser.parse_args()
    skew = [int(float(v) * 1000) for v in args.skew_us.split(",")]
    if len(skew) != args.ranks:
        parser.error("--skew-us needs one value per rank")
    make(args.out, ranks=args.ranks, steps=args.steps, skew_ns=skew,
         transfer_ns=args.transfer_us * 1000, jitter_ns=args.jitter_us * 1000,
         annotated=args.annotated, nbytes=args.bytes, seed=args.seed,
         node_ranks=range(*map(int, args.node_ranks.split(":"))) if args.node_ranks else None,
         clock_offset_ns=args.clock_offset_us * 1000,
         end_jitter_ns=args.end_jitter_us * 1000)  # fmt: skip


if __name__ == "__main__":
    main()
