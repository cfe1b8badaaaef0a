"""Generate a pipeline-parallel export: a 1F1B schedule over equal stages, one rank each.

Test tooling, outside the pipeline. Each of ``--stages`` ranks (pid ``2000 + stage``, its own
GPU) runs ``--steps`` annotated iterations of ``--micro-batches`` micro-batches in the 1F1B
order (stage s first runs ``stages - s - 1`` forwards, then alternates one forward and one
backward, then the remaining backwards); a forward of micro-batch i on stage s waits for
stage s-1's forward of it, a backward for stage s+1's backward of it. Each forward kernel
takes ``--forward-us``, each backward ``--backward-us``; between stages a short NCCL
``SendRecv`` kernel on its own stream carries the activation or gradient, overlapping the
next operation (equal stages, no transfer latency: the textbook schedule). Every rank's
iteration spans the whole flushed pipeline, so the ground truth (``<out>.truth.json``) of
each stage's bubble, its time without compute, is ``(p - 1) / (m + p - 1)`` of the step.

    python scripts/make_pipeline_profile.py OUT.sqlite --stages 4 --micro-batches 8
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import DOMAIN
from nsys_db import NsysDb

FORWARD_KERNEL = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
BACKWARD_KERNEL = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x128_32x3_nt_align4>"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
T0 = 1_000_000
P2P_NS = 2_000  # a SendRecv kernel, on its own stream
LEAD_NS = 1_000  # from a step's start to its first kernel (the launch before it)


def schedule(stages: int, micro: int) -> list[list[tuple[str, int]]]:
    """Each stage's op order: ('F' | 'B', micro-batch) in 1F1B."""
    out = []
    for s in range(stages):
        warm = min(stages - s - 1, micro)
        order = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while f < micro:
            order += [("F", f), ("B", b)]
            f, b = f + 1, b + 1
        order += [("B", i) for i in range(b, micro)]
        out.append(order)
    return out


def simulate(stages: int, micro: int, fwd: int, bwd: int) -> dict[tuple[str, int, int], int]:
    """Start time (from the step's start) of each (op, stage, micro-batch)."""
    order = schedule(stages, micro)
    start: dict[tuple[str, int, int], int] = {}
    done: dict[tuple[str, int, int], int] = {}
    position = [0] * stages
    free = [0] * stages
    while any(position[s] < len(order[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] >= len(order[s]):
                continue
            op, i = order[s][position[s]]
            need = ("F", s - 1, i) if op == "F" else ("B", s + 1, i)
            edge = (op == "F" and s == 0) or (op == "B" and s == stages - 1)
            if not edge and need not in done:
                continue
            ready = 0 if edge else done[need]  # the send overlaps the next op (own stream)
            if op == "B" and s == stages - 1:
                ready = done[("F", s, i)]  # the loss: its own forward first
            t = max(free[s], ready)
            start[(op, s, i)] = t
            done[(op, s, i)] = t + (fwd if op == "F" else bwd)
            free[s] = done[(op, s, i)]
            position[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocked")
    return start


def make(path: Path, *, stages: int, micro: int, steps: int, fwd: int,
         bwd: int) -> dict[str, object]:  # fmt: skip
    start = simulate(stages, micro, fwd, bwd)
    span = max(t + (fwd if op == "F" else bwd) for (op, _, _), t in start.items())
    step_ns = span + LEAD_NS  # one step after the other, as a pipeline runs them
    with NsysDb(path) as db:
        for s in range(stages):
            pid = 2000 + s
            db.process(pid)
            db.thread(pid, pid, "python3")
            db.stream(pid, 7)
            db.stream(pid, 20)
            db.gpu(s)
            db.mark(T0 - 500, fact_text("process", {"rank": s, "local_rank": s,
                                                    "world_size": stages}),
                    pid, pid, domain=DOMAIN)  # fmt: skip
        corr = [0] * stages
        for step in range(steps):
            step_start = T0 + step * step_ns
            base = step_start + LEAD_NS  # the first kernel starts just after the step
            for s in range(stages):
                pid = 2000 + s
                db.push(step_start, base + span, "iteration", pid, pid, domain=DOMAIN)
                for (op, stage, _), t in sorted(start.items(), key=lambda kv: kv[1]):
                    if stage != s:
                        continue
                    length = fwd if op == "F" else bwd
                    corr[s] += 1
                    db.runtime(base + t - 500, base + t - 400, "cudaLaunchKernel_v7000",
                               pid=pid, tid=pid, correlation_id=corr[s])  # fmt: skip
                    db.kernel(base + t, base + t + length,
                              FORWARD_KERNEL if op == "F" else BACKWARD_KERNEL, pid=pid,
                              correlation_id=corr[s], device=s)  # fmt: skip
                    sends = (op == "F" and s < stages - 1) or (op == "B" and s > 0)
                    if sends:  # the activation or gradient to the next stage
                        corr[s] += 1
                        end = base + t + length
                        db.runtime(end - 300, end - 200, "cudaLaunchKernelExC_v11060",
                                   pid=pid, tid=pid, correlation_id=corr[s])  # fmt: skip
                        db.kernel(end, end + P2P_NS, SENDRECV, pid=pid,
                                  correlation_id=corr[s], device=s, stream=20)  # fmt: skip
        db.session(0, T0 + steps * step_ns + 1_000_000)
    truth = {"stages": stages, "micro_batches": micro, "step_ns": step_ns,
             "bubble_fraction": (stages - 1) / (micro + stages - 1),
             "busy_ns": micro * (fwd + bwd)}  # fmt: skip
    path.with_suffix(".truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--forward-us", type=int, default=100)
    parser.add_argument("--backward-us", type=int, default=200)
    args = parser.parse_args()
    make(args.out, stages=args.stages, micro=args.micro_batches, steps=args.steps,
         fwd=args.forward_us * 1000, bwd=args.backward_us * 1000)  # fmt: skip


if __name__ == "__main__":
    main()
