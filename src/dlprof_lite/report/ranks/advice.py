"""Advice from the ranks table (report/ranks/table.py): exposed communication and the straggler.

report/advice.py grades exposed communication against its thresholds (report/metrics.py) and
registers :func:`straggler_data` (rules/ranks.py holds its rule).
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.durations import ms_from_100us
from dlprof_lite.report.summary_types import Advice, Communication, Summary
from dlprof_lite.report.units import of_scope
from dlprof_lite.rules.advice import THRESHOLDS
from dlprof_lite.rules.ranks import STRAGGLER_MIN_EXCESS, STRAGGLER_WAIT_SHARE


def exposed_text(c: Communication) -> tuple[str, str, str]:
    """Problem, evidence and recommendation of exposed communication (report/advice.py
    grades it against ``exposed_comm_*_pct``)."""
    per = "per step " if c.exposed_comm_scope == "iterations" else "in all "
    of = "each rank's mean step" if c.exposed_comm_scope == "iterations" else (
        f"{of_scope(c.exposed_comm_scope)}")  # fmt: skip
    evidence = (f"{ms_from_100us(c.exposed_comm_ns or 0.0)} of communication kernels {per}run "
                f"with no compute beside them, {c.exposed_comm_pct or 0.0:.1f}% of {of} "
                f"(mean over {c.ranks} rank(s)); communication is "
                f"{(c.comm_share or 0.0):.0%} of kernel busy time")  # fmt: skip
    rec = ("Overlap gradient communication with the backward pass: in DDP tune "
           "bucket_cap_mb (default 25; smaller buckets start all-reduce earlier, larger ones "
           "cost fewer launches), keep gradient_as_bucket_view=True and avoid "
           "find_unused_parameters; accumulate gradients over several micro-batches under "
           "no_sync(); or send less with a DDP communication hook "
           "(torch.distributed.algorithms.ddp_comm_hooks: fp16/bf16 compression, PowerSGD).")
    return "Communication is exposed (not overlapped with compute)", evidence, rec


def straggler_data(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """The straggler rank's extra time is mostly data loading: the others wait for its
    DataLoader."""
    c = summary.communication
    rank, data, excess = c.straggler_rank, c.straggler_data_ns, c.straggler_excess_ns
    if rank is None or data is None or not excess or data < 0.5 * excess:
        return None
    evidence = (f"rank {rank} spends {ms_from_100us(data)} more per step loading data than the "
                f"other ranks' median ({ms_from_100us(excess)} more work in all); the other ranks "
                "wait for it in their collectives")  # fmt: skip
    rec = (f"Speed up rank {rank}'s data loading: DataLoader(num_workers>0, pin_memory=True, "
           "persistent_workers=True, prefetch_factor>=2) on that rank, check its data source "
           "(local disk vs network, a shard larger than the others', a DistributedSampler "
           "with uneven shards) and the CPU cores its workers get beside the other ranks'.")
    return Advice(f"Rank {rank} is a straggler: its data loading holds the others back",
                  "warn", evidence, rec, "straggler_data_ns", data, 0.5 * excess,
                  _CITATION)  # fmt: skip


_CITATION = (f"dlprof-lite choice (rules/ranks.py): the rank whose compute + data time per "
             f"step exceeds the other ranks' median by >= {STRAGGLER_MIN_EXCESS:.0%} of the "
             f"step while the others' exposed communication is >= "
             f"{STRAGGLER_WAIT_SHARE:.0%} of that excess; data time at least half of it")


def straggler_waits(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """Measured in the recorded collectives: a rank the others wait for, and where its extra
    time is, when that is not its data loading (:func:`straggler_data` says so then)."""
    c = summary.communication
    rank, waited = c.straggler_rank, c.straggler_waited_ns
    if rank is None or waited is None or waited <= 0:
        return None
    data, excess = c.straggler_data_ns or 0.0, c.straggler_excess_ns or 0.0
    if data >= 0.5 * waited:
        return None
    step = summary.iterations.iterations_median_ns
    share = f" ({waited / step:.0%} of the median step)" if step else ""
    compute = excess - data
    if compute >= 0.5 * waited:
        layer = (f", most in layer {c.straggler_layer} ({ms_from_100us(c.straggler_layer_ns)} "
                 "more)" if c.straggler_layer and c.straggler_layer_ns else "")  # fmt: skip
        where = (f"its compute: {ms_from_100us(compute)} more per step than the other ranks' "
                 f"median{layer} (an uneven shard or batch, a slower device, extra work on "
                 "that rank)")
        rec = (f"Even out rank {rank}'s work: the same batch size and sequence lengths on every "
               "rank (a DistributedSampler with drop_last, bucketed lengths), the same device "
               "model and clocks, and no rank-only work (logging, evaluation) inside the step.")
    else:
        where = ("neither its data loading nor its kernels: host time outside them (Python "
                 "work, logging, checkpointing, a sleep or a lock on that rank)")
        rec = (f"Look at rank {rank}'s own report (rank{rank}/report.html): its idle causes and "
               "critical path show where its host time goes; move rank-only host work "
               "(logging, metrics, checkpoints) out of the step or to every rank's step end.")
    evidence = (f"the other ranks wait {ms_from_100us(waited)} per step{share} in collectives "
                f"rank {rank} arrives last at (collectives.csv); its extra time is in {where}")
    return Advice(f"Rank {rank} makes the others wait in collectives", "warn", evidence, rec,
                  "straggler_waited_ns", waited, STRAGGLER_MIN_EXCESS * (step or 0.0),
                  _WAIT_CITATION)  # fmt: skip


_WAIT_CITATION = (f"dlprof-lite choice (rules/ranks.py): with recorded collectives, the rank "
                  f"the others wait for most per step, at least {STRAGGLER_MIN_EXCESS:.0%} of "
                  f"the median step; the waits measured as DESIGN.md defines them")


def pipeline_bubble(summary: Summary, layers: pd.DataFrame) -> Advice | None:
    """A pipeline-parallel run whose stages spend a large share of the step without compute."""
    pct = summary.communication.pipeline_bubble_pct
    limit = THRESHOLDS["pipeline_bubble_warn_pct"]
    if pct is None or pct < limit.value:
        return None
    ranks = summary.communication.ranks or 0
    evidence = (f"the pipeline's {ranks} rank(s) spend {pct:.1f}% of their step without compute "
                "on their GPU (ranks.csv bubble_pct): the pipeline's fill and drain")  # fmt: skip
    rec = ("Run more micro-batches per step (the bubble is (p-1)/(m+p-1) of the step for p "
           "stages and m micro-batches: m = 4p keeps it near 20 %), use an interleaved 1F1B "
           "schedule (virtual stages: torch.distributed.pipelining ScheduleInterleaved1F1B), "
           "and balance the stages' layers so no stage waits for a slower neighbour.")
    return Advice("Pipeline bubble: the stages wait for the pipeline to fill and drain", "warn",
                  evidence, rec, "pipeline_bubble_pct", pct, limit.value, limit.citation)
