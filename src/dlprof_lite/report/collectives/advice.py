"""Advice from the collectives per op and size (report/collectives/instances.py op_summary).

A large collective whose ranks hardly wait yet whose bus bandwidth is far below the node's
NVLink (rules/collectives.py: the link, the size and the shares) moves its data slowly: the
link, not a late rank, is the question. The rank the others wait for has its own advice
(report/ranks/advice.py).

FSDP's all-gathers and reduce-scatters per layer (report/collectives/layers.py): when those
of one pass that no compute overlapped add up to FSDP_EXPOSED_WARN_SHARE of the mean step,
prefetching (or keeping the last units gathered) is what wins the time back.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.report.summary_types import Advice, Summary
from dlprof_lite.report.units import bytes_text
from dlprof_lite.rules.collectives import (
    FAMILY,
    FSDP_EXPOSED_WARN_SHARE,
    LINK_LOW_SHARE,
    LINK_MAX_WAIT_SHARE,
    LINK_MIN_BYTES,
    nvlink_gbps,
)


def slow_link(summary: Summary, ops: pd.DataFrame) -> list[Advice]:
    """Each (group, op, size) whose bus bandwidth is below LINK_LOW_SHARE of the GPUs' NVLink
    while the ranks wait at most LINK_MAX_WAIT_SHARE of the time; none without a known link."""
    names = [n.strip() for n in (summary.system.gpu_names or "").split(";") if n.strip()]
    links = {nvlink_gbps(n) for n in names}
    if not names or None in links or len(links) != 1 or ops.empty:
        return []
    link = links.pop()
    assert link is not None
    peak, source = link
    found = []
    for row in ops.to_dict("records"):
        busbw, wait = float(row["busbw_gbps"]), float(row["wait_share"])
        size, op, group = float(row["bytes_mean"]), str(row["op"]), str(row["group"])
        if not (size >= LINK_MIN_BYTES and busbw == busbw and wait == wait
                and wait <= LINK_MAX_WAIT_SHARE and busbw < LINK_LOW_SHARE * peak):  # fmt: skip
            continue
        transfer_ms = float(row["transfer_median_ns"]) / 1e6
        evidence = (f"{op} of {bytes_text(size)} on ranks {group}: bus bandwidth {busbw:.3g} "
                    f"GB/s, {busbw / peak:.0%} of NVLink's {peak:.0f} GB/s per direction on "
                    f"{names[0]}, while the ranks wait only {wait:.0%} of the calls' time "
                    f"({int(row['instances'])} calls, median transfer {transfer_ms:.3g} ms)")
        rec = ("Check the path NCCL takes: NCCL_DEBUG=INFO prints each channel's transport "
               "(NVLink 'P2P/CUMEM' or 'P2P/IPC' vs 'SHM' or 'NET'); NCCL_P2P_DISABLE or a "
               "container without the GPUs' IPC falls back to host memory; nvidia-smi topo -m "
               "shows the links. Larger messages (DDP bucket_cap_mb) reach more of the link.")
        found.append(Advice(f"{op} moves its data far below the link's speed", "warn",
                            evidence, rec, "busbw_gbps", busbw, LINK_LOW_SHARE * peak,
                            f"dlprof-lite choice (rules/collectives.py): at least "
                            f"{bytes_text(LINK_MIN_BYTES)}, waits at most "
                            f"{LINK_MAX_WAIT_SHARE:.0%}, busbw below {LINK_LOW_SHARE:.0%} of "
                            f"the link; busbw as nccl-tests defines it; link: {source}"))
    return found


# What wins exposed FSDP time back, per (op family, pass): FSDP1's constructor arguments and
# FSDP2's FSDPModule methods (torch.distributed.fsdp docs).
_FSDP_REMEDY = {
    ("all_gather", "forward"):
        "Prefetch the next unit's all-gather during this one's forward: FSDP2 "
        "`unit.set_modules_to_forward_prefetch([next_unit])`, FSDP1 `forward_prefetch=True`; "
        "on FSDP2 keep the root's parameters gathered (`reshard_after_forward=False` on it).",
    ("all_gather", "backward"):
        "Prefetch the previous unit's all-gather during this one's backward: FSDP2 "
        "`unit.set_modules_to_backward_prefetch([previous_unit])`, FSDP1 "
        "`backward_prefetch=BackwardPrefetch.BACKWARD_PRE`; or skip the backward all-gather of "
        "the last units with `reshard_after_forward=False` (more memory).",
    ("reduce_scatter", "backward"):
        "A reduce-scatter overlaps the next unit's backward; exposed ones come from units too "
        "small to hide it or from the first unit's, which nothing follows: make units larger "
        "(wrap bigger blocks), and under gradient accumulation skip the sync of all but the last "
        "micro-batch (FSDP2 `set_requires_gradient_sync(False)`, FSDP1 `no_sync()`).",
}


def fsdp_exposed(summary: Summary, layers: pd.DataFrame) -> list[Advice]:
    """Per (op family, pass) of FSDP's calls: their exposed time over the mean step, when at
    least FSDP_EXPOSED_WARN_SHARE. Only on GPUs: on the CPU (gloo) a blocking collective is
    exposed whole by definition, and no prefetch would overlap it with compute."""
    if layers.empty or not summary.totals.kernel_count:
        return []
    rows = layers[layers["fsdp"].eq(True).to_numpy(dtype=bool)].copy()
    if rows.empty:
        return []
    rows["family"] = [FAMILY.get(str(op), str(op)) for op in rows["op"]]
    found = []
    for (family, phase), g in rows.groupby(["family", "pass"], sort=True):
        share = float(g["exposed_step_ratio"].sum(min_count=1))
        remedy = _FSDP_REMEDY.get((str(family), str(phase)))
        if remedy is None or not share >= FSDP_EXPOSED_WARN_SHARE:
            continue
        top = g.sort_values("exposed_ns", ascending=False).head(3)
        named = "; ".join(
            f"{r['layer'] or '(outside layers)'} {float(r['exposed_ns']) / 1e6:.3g} ms of "
            f"{float(r['time_ns']) / 1e6:.3g} ms ({bytes_text(float(r['bytes_mean']))} a call)"
            for r in top.to_dict("records"))  # fmt: skip
        name = str(family).replace("_", "-")
        evidence = (f"FSDP's {phase} {name}s leave {share:.0%} of the mean step with no compute "
                    f"overlapping them ({float(g['exposed_ns'].sum()) / 1e6:.3g} ms per step, "
                    f"{len(g)} layers); most: {named}")
        found.append(Advice(f"FSDP {phase} {name}s are exposed", "warn", evidence, remedy,
                            "exposed_step_ratio", share, FSDP_EXPOSED_WARN_SHARE,
                            "dlprof-lite choice (rules/collectives.py): exposed FSDP "
                            "collectives of one pass at least "
                            f"{FSDP_EXPOSED_WARN_SHARE:.0%} of the mean step"))
    return found
