"""Advice from the collectives per op and size (report/collectives/instances.py op_summary).

A large collective whose ranks hardly wait yet whose bus bandwidth is far below the node's
NVLink (rules/collectives.py: the link, the size and the shares) moves its data slowly: the
link, not a late rank, is the question. The rank the others wait for has its own advice
(report/ranks/advice.py).
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.report.summary_types import Advice, Summary
from dlprof_lite.report.units import bytes_text
from dlprof_lite.rules.collectives import (
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
