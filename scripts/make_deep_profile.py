"""Generate an nsys export whose NVTX ranges nest thousands of levels deep, with its truth.

Test and benchmark tooling, outside the ``annotate → launch → ingest → report`` pipeline. The
shape is what real code produces: a recursive module that calls itself (the same qualified
name at every level, as a recursive ``nn.Module`` does: ``fwd:model.cell:TreeCell``), or user
code that pushes in a loop and never pops (``--unbalanced``: nsys leaves ``end`` NULL and the
session end closes them). One thread of one process:

* a start/end ``iteration`` and ``forward`` in the dlprof-lite domain around everything;
* a chain of ``depth`` push/pop ranges, each nested in the previous one, whose names cycle
  through :data:`CHAIN_NAMES`; each chain range launches one kernel before its child opens;
* ``ranges - depth`` leaf ranges ``fwd:model.cell.proj:Linear`` spread evenly over the chain
  levels, each launching one kernel.

Every kernel runs 1 µs after its launch call for ``KERNEL_NS``; times are round numbers. The
truth (per range, in generation order: the full chain of names, inclusive kernels and GPU ns)
is computed from the generator's own arrays, never by reading the file back.

    python scripts/make_deep_profile.py OUT.sqlite --ranges 2000 --depth 1400 [--unbalanced]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dlprof_lite.rules.names import DOMAIN
from nsys_db import NsysDb
from nsys_schema import NVTX_PUSH_POP, global_pid, global_tid

CHAIN_NAMES = ("fwd:model.cell:TreeCell", "fwd:model.cell.gate:Gate", "user_step")
LEAF_NAME = "fwd:model.cell.proj:Linear"
KERNEL = "ampere_sgemm_64x32_sliced1x4_nn"
PID, TID, DEVICE, STREAM = 4242, 4242, 0, 7
T0_NS = 1_000_000
STEP_NS = 1_000  # one slot: a launch call, or a leaf range holding one
KERNEL_NS = 200


@dataclass(frozen=True)
class DeepTruth:
    """Per range in generation order (chain first, then leaves by level)."""

    names: list[str]
    parents: list[int]  # index into names, -1 under the phases
    kernels: list[int]  # inclusive: launched inside the range on its thread
    gpu_ns: list[int]

    def chain(self, i: int) -> list[str]:
        """Names from the outermost push/pop range down to range ``i``."""
        out = []
        while i >= 0:
            out.append(self.names[i])
            i = self.parents[i]
        return out[::-1]


def _layout(ranges: int, depth: int) -> dict[str, np.ndarray]:
    """Start/end of every range and the launch time of every kernel (one per range).

    Chain level ``L`` opens at ``open[L]``, launches its kernel one slot later, holds its
    leaves in the next slots, then opens level ``L + 1``; it closes one slot after its child.
    """
    leaves = ranges - depth
    per_level = np.bincount(np.arange(leaves) * depth // max(leaves, 1), minlength=depth)
    slots = 2 + per_level  # the level's own launch, its leaves, the child's open
    open_ns = T0_NS + STEP_NS * np.concatenate([[0], np.cumsum(slots)[:-1]])
    last = open_ns[-1] + STEP_NS * slots[-1]
    close_ns = last + STEP_NS * np.arange(depth)[::-1]
    leaf_level = np.repeat(np.arange(depth), per_level)
    leaf_rank = np.arange(leaves) - np.repeat(np.cumsum(per_level) - per_level, per_level)
    leaf_start = open_ns[leaf_level] + STEP_NS * (2 + leaf_rank)
    return {
        "start": np.concatenate([open_ns, leaf_start]),
        "end": np.concatenate([close_ns, leaf_start + STEP_NS // 2]),
        "launch": np.concatenate([open_ns + STEP_NS, leaf_start + STEP_NS // 10]),
        "parent": np.concatenate([np.arange(depth) - 1, leaf_level]),
    }


def _truth(depth: int, lay: dict[str, np.ndarray]) -> DeepTruth:
    n = lay["parent"].size
    level_of = np.concatenate([np.arange(depth), lay["parent"][depth:]])
    # a chain level holds its own kernel and every kernel launched at its level or deeper
    at_level = np.bincount(level_of, minlength=depth)
    chain_kernels = np.cumsum(at_level[::-1])[::-1]
    kernels = np.concatenate([chain_kernels, np.ones(n - depth, dtype=np.int64)])
    names = [CHAIN_NAMES[i % len(CHAIN_NAMES)] for i in range(depth)] + [LEAF_NAME] * (n - depth)
    return DeepTruth(
        names=names,
        parents=lay["parent"].tolist(),
        kernels=kernels.tolist(),
        gpu_ns=(kernels * KERNEL_NS).tolist(),
    )


def make_deep_profile(
    path: str | Path, *, ranges: int = 2000, depth: int = 1400, unbalanced: bool = False
) -> DeepTruth:
    """Write the export to ``path`` and its truth to ``<path>.truth.json``."""
    if not 1 <= depth <= ranges:
        raise ValueError(f"need 1 <= depth <= ranges, got depth {depth}, ranges {ranges}")
    lay = _layout(ranges, depth)
    truth = _truth(depth, lay)
    launch = lay["launch"]
    order = np.argsort(lay["start"], kind="stable")
    end = lay["end"].astype(object)
    if unbalanced:
        end[:depth] = None  # never popped: nsys leaves end NULL
    session_end = int(lay["end"].max()) + 10 * STEP_NS
    with NsysDb(path) as db:
        db.process(PID)
        db.thread(PID, TID, "python3")
        db.stream(PID, STREAM)
        db.gpu(DEVICE)
        did = db.domain(DOMAIN, pid=PID, tid=TID, start=T0_NS - 3 * STEP_NS)
        for phase in ("iteration", "forward"):
            db.start_end(T0_NS - STEP_NS, session_end - STEP_NS, phase, PID, TID, domain=DOMAIN)
        text = np.asarray([db.string_id(s) for s in truth.names], dtype=np.int64)
        db.insert("NVTX_EVENTS", {
            "start": lay["start"][order], "end": end[order], "eventType": NVTX_PUSH_POP,
            "textId": text[order], "globalTid": global_tid(PID, TID), "domainId": did,
        })  # fmt: skip
        corr = np.arange(1, launch.size + 1)
        db.runtimes({"start": launch, "end": launch + STEP_NS // 20,
                     "globalTid": global_tid(PID, TID), "correlationId": corr,
                     "nameId": db.string_id("cudaLaunchKernel_v7000")})  # fmt: skip
        gpu = launch + STEP_NS // 20 + STEP_NS // 10
        db.kernels({"start": gpu, "end": gpu + KERNEL_NS, "deviceId": DEVICE, "contextId": 1,
                    "streamId": STREAM, "globalPid": global_pid(PID), "correlationId": corr,
                    "demangledName": db.string_id(KERNEL), "shortName": db.string_id(KERNEL),
                    "registersPerThread": 128, "gridX": 64, "blockX": 128})  # fmt: skip
        db.session(0, session_end)
    Path(f"{path}.truth.json").write_text(json.dumps(asdict(truth)))
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranges", type=int, default=2000)
    ap.add_argument("--depth", type=int, default=1400)
    ap.add_argument("--unbalanced", action="store_true", help="the chain is never popped")
    args = ap.parse_args(argv)
    truth = make_deep_profile(
        args.out, ranges=args.ranges, depth=args.depth, unbalanced=args.unbalanced
    )
    print(f"{args.out}: {len(truth.names)} ranges, {args.depth} deep")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
