"""Generate a two-GPU export shaped like an FSDP training run, with round-number ground truth.

Test tooling, outside the pipeline. Two processes (ranks 0 and 1, pids ``1000 + rank``), each on
its own GPU, run ``--steps`` annotated iterations of a model of three FSDP units
(``layers.0``-``layers.2``). Per step, on each rank (µs from the step's start; compute on
stream 7, NCCL's all-gathers and reduce-scatters on stream 20):

    forward   AG layers.0 [a, 140)  C 0 [140, 440)  AG layers.1 [140, 290)  C 1 [440, 740)
              AG layers.2 [440, 800)  C 2 [800, 1100)
    backward  C 2 [1100, 1400)  AG layers.1 [1100, 1300)  C 1 [1400, 1700)
              RS layers.2 [1400, 1550)  AG layers.0 [1410, 1510)  C 0 [1700, 2000)
              RS layers.1 [1700, 1900)  RS layers.0 [2000, 2300)
    optimizer [2300, 2400); the step ends at 2500
    tensor-parallel all-reduces (stream 21, no fact: DTensor's functional collectives are not
    recorded): layers.1's in its forward [745, 795), layers.2's in its backward [1300, 1350)

Rank 1 reaches the first all-gather late (``a`` = 40 µs, rank 0's is 0), so rank 0 waits 40 µs
there and the transfer is 100 µs. What no compute overlaps (exposed), by hand: layers.0's
forward all-gather all of it (nothing runs before it), layers.2's 60 µs (740-800), layers.0's
reduce-scatter all 300 µs (nothing follows it), layers.1's tensor-parallel all-reduce all
50 µs (740-800); the rest is hidden. :data:`TRUTH` holds these
per (layer, pass, op), per rank and step (means over the two ranks).

With ``annotated`` each call also has what dlprof-lite's annotation records: a ``collective``
fact naming its unit and pass, with the unit's padded bytes, and its ``coll:`` range around
the launch (forward on the main thread, backward on autograd's). Without it the export has
only the kernels, each launched inside the module range that issued it (an all-gather
prefetched for the next unit inside the current unit's range): :data:`LAUNCHED_IN`.

    python scripts/make_fsdp_profile.py OUT.sqlite [--steps 6] [--annotated]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlprof_lite.rules.collectives import range_name
from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import COLLECTIVE, DOMAIN
from nsys_db import NsysDb

US = 1000
STEP_NS = 2500 * US
T0 = 1_000 * US
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
KERNEL = {"all_gather_into_tensor": f"ncclDevKernel_AllGather_RING_LL{_ARGS}",
          "reduce_scatter_tensor": f"ncclDevKernel_ReduceScatter_Sum_f32_RING_LL{_ARGS}"}
BYTES = {"layers.0": 3 * 2**20, "layers.1": 5 * 2**20 + 256, "layers.2": 7 * 2**20 + 512}
LATE_US = (0, 40)  # each rank's arrival at the first all-gather
AG, RS = "all_gather_into_tensor", "reduce_scatter_tensor"
# (op, unit, pass, start µs, end µs, the layer range it is launched in); rank 1's first start
# is LATE_US[1]
CALLS = (
    (AG, "layers.0", "forward", 0, 140, "layers.0"),
    (AG, "layers.1", "forward", 140, 290, "layers.0"),
    (AG, "layers.2", "forward", 440, 800, "layers.1"),
    (AG, "layers.1", "backward", 1100, 1300, "layers.2"),
    (RS, "layers.2", "backward", 1400, 1550, "layers.1"),
    (AG, "layers.0", "backward", 1410, 1510, "layers.1"),
    (RS, "layers.1", "backward", 1700, 1900, "layers.0"),
    (RS, "layers.0", "backward", 2000, 2300, "layers.0"),
)
COMPUTE = (  # (layer, pass, start µs, end µs)
    ("layers.0", "forward", 140, 440), ("layers.1", "forward", 440, 740),
    ("layers.2", "forward", 800, 1100), ("layers.2", "backward", 1100, 1400),
    ("layers.1", "backward", 1400, 1700), ("layers.0", "backward", 1700, 2000),
    ("", "optimizer", 2300, 2400),
)
# Per (layer, pass, op): ns per rank and step, by hand from the schedule above.
TRUTH = {
    ("layers.0", "forward", AG): {"time": 120, "transfer": 100, "wait": 20, "exposed": 120},
    ("layers.1", "forward", AG): {"time": 150, "transfer": 150, "wait": 0, "exposed": 0},
    ("layers.2", "forward", AG): {"time": 360, "transfer": 360, "wait": 0, "exposed": 60},
    ("layers.1", "backward", AG): {"time": 200, "transfer": 200, "wait": 0, "exposed": 0},
    ("layers.0", "backward", AG): {"time": 100, "transfer": 100, "wait": 0, "exposed": 0},
    ("layers.2", "backward", RS): {"time": 150, "transfer": 150, "wait": 0, "exposed": 0},
    ("layers.1", "backward", RS): {"time": 200, "transfer": 200, "wait": 0, "exposed": 0},
    ("layers.0", "backward", RS): {"time": 300, "transfer": 300, "wait": 0, "exposed": 300},
}
TP_CALLS = (("layers.1", "forward", 745, 795), ("layers.2", "backward", 1300, 1350))
TP_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
TP_TRUTH = {("layers.1", "forward"): {"time": 50, "exposed": 50},
            ("layers.2", "backward"): {"time": 50, "exposed": 0}}
LAUNCHED_IN = {(unit, phase, op): launched for op, unit, phase, _, _, launched in CALLS}
LAUNCH_US = 30  # a launch precedes its kernel on the host by this much


def make(path: Path, *, steps: int = 6, annotated: bool = True) -> None:
    with NsysDb(path) as db:
        corr = {0: 0, 1: 0}
        for rank in (0, 1):
            pid = 1000 + rank
            db.process(pid)
            db.thread(pid, pid, "python3")
            db.thread(pid, pid + 1, "pt_autograd_0")
            db.stream(pid, 7)
            db.stream(pid, 20)
            db.stream(pid, 21)
            db.gpu(rank, name="NVIDIA H100 80GB HBM3")
            db.mark(T0 - 500, fact_text("process", {"rank": rank, "local_rank": rank,
                                                    "world_size": 2}),
                    pid, pid, domain=DOMAIN)  # fmt: skip
        for step in range(steps):
            base = T0 + step * STEP_NS
            for rank in (0, 1):
                pid = 1000 + rank
                _step(db, base, rank, pid, corr, step, annotated)
        db.session(0, T0 + steps * STEP_NS + 1_000_000)


def _step(db: NsysDb, base: int, rank: int, pid: int, corr: dict[int, int], step: int,
          annotated: bool) -> None:  # fmt: skip
    def at(us: int) -> int:
        return base + us * US

    def thread(phase: str) -> int:
        return pid if phase == "forward" else pid + 1

    db.push(at(-LAUNCH_US - 20), at(2500 - 10), "iteration", pid, pid, domain=DOMAIN)
    db.push(at(-LAUNCH_US - 10), at(1100 - LAUNCH_US), "forward", pid, pid, domain=DOMAIN)
    db.push(at(1100 - LAUNCH_US), at(2300 - LAUNCH_US), "backward", pid, pid, domain=DOMAIN)
    db.push(at(2300 - LAUNCH_US), at(2400), "optimizer", pid, pid, domain=DOMAIN)
    # each layer's module range on the host: from its first launch to its last (+10 µs)
    spans: dict[tuple[str, str], list[int]] = {}
    for layer, phase, start, _ in COMPUTE:
        spans.setdefault((layer, phase), []).append(start)
    for _, _, phase, start, _, launched in CALLS:
        spans.setdefault((launched, phase), []).append(start)
    for layer, phase, start, _ in TP_CALLS:
        spans.setdefault((layer, phase), []).append(start)
    for (layer, phase), starts in spans.items():
        if not layer:
            continue
        kind = "fwd" if phase == "forward" else "bwd"
        first = min(starts) - LAUNCH_US - 8
        last = max(starts) - LAUNCH_US + 8
        db.push(at(first), at(last), f"{kind}:{layer}:FSDPBlock", pid, thread(phase),
                domain=DOMAIN)
    for _, phase, start, end in COMPUTE:
        corr[rank] += 1
        tid = pid if phase != "backward" else pid + 1
        db.runtime(at(start - LAUNCH_US), at(start - LAUNCH_US + 5), "cudaLaunchKernel_v7000",
                   pid=pid, tid=tid, correlation_id=corr[rank])  # fmt: skip
        db.kernel(at(start), at(end), GEMM, pid=pid, correlation_id=corr[rank], device=rank)
    for n, (op, unit, phase, start, end, _) in enumerate(CALLS):
        first = start if n else LATE_US[rank]
        launch = at(start - LAUNCH_US)
        tid = thread(phase)
        if annotated:
            db.mark(launch - 3 * US, fact_text(COLLECTIVE, {
                "op": op, "group": "0,1", "seq": step * len(CALLS) + n + 1,
                "bytes": BYTES[unit], "dtype": "float32", "async": False, "unit": unit,
                "pass": phase,
            }), pid, tid, domain=DOMAIN)  # fmt: skip
            db.push(launch - 2 * US, launch + 6 * US, range_name(op), pid, tid, domain=DOMAIN)
        corr[rank] += 1
        db.runtime(launch, launch + 2 * US, "cudaLaunchKernelExC_v11060", pid=pid, tid=tid,
                   correlation_id=corr[rank])  # fmt: skip
        db.kernel(at(first), at(end), KERNEL[op], pid=pid, correlation_id=corr[rank],
                  device=rank, stream=20)  # fmt: skip
    for _, phase, start, end in TP_CALLS:
        corr[rank] += 1
        db.runtime(at(start - LAUNCH_US), at(start - LAUNCH_US + 2), "cudaLaunchKernelExC_v11060",
                   pid=pid, tid=thread(phase), correlation_id=corr[rank])  # fmt: skip
        db.kernel(at(start), at(end), TP_KERNEL, pid=pid, correlation_id=corr[rank], device=rank,
                  stream=21)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--annotated", action="store_true")
    args = parser.parse_args()
    make(args.out, steps=args.steps, annotated=args.annotated)


if __name__ == "__main__":
    main()
