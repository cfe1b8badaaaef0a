"""The pipeline bubble on generated 1F1B schedules: each stage's step time without compute.

scripts/make_pipeline_profile.py runs p equal stages over m micro-batches in the 1F1B order,
each operation waiting for its neighbour's (activations forward, gradients back, through NCCL
send/receive kernels). The oracle is the schedule's own arithmetic: every stage computes
m (F + B) of a step of (m + p - 1)(F + B), so its bubble is (p - 1)/(m + p - 1) of the step
(GPipe; Megatron-LM's 1F1B), within 5 % (the sends' own latency stretches the step a little).
A run whose send/receive kernels carry an all-to-all is not a pipeline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from make_pipeline_profile import make

BUBBLE = "Pipeline bubble: the stages wait for the pipeline to fill and drain"


@pytest.mark.parametrize(("stages", "micro"), [(4, 8), (2, 4), (4, 16), (8, 8)])
def test_the_bubble_is_the_schedules(tmp_path: Path, stages: int, micro: int) -> None:
    path = tmp_path / "pp.sqlite"
    make(path, stages=stages, micro=micro, steps=5, fwd=100_000, bwd=200_000)
    report = build_report(load(path))
    want = (stages - 1) / (micro + stages - 1) * 100
    ranks = report.ranks
    assert len(ranks) == stages
    for pct in ranks["bubble_pct"]:
        assert pct == pytest.approx(want, rel=0.05)
    got = report.summary.communication.pipeline_bubble_pct
    assert got == pytest.approx(want, rel=0.05)
    fires = any(a.problem == BUBBLE for a in report.summary.advice)
    assert fires is (got >= 20.0)
    # the stages' send/receive kernels name no peer and interleave in each stage's own order:
    # never paired by order as a collective's are (two stages run as many of them)
    assert report.collectives.empty


@pytest.mark.corpus
def test_an_all_to_all_is_no_pipeline(corpus_dir: Path) -> None:
    """A real 2 x H100 slice whose NCCL send/receive kernels run PyTorch's all_to_all."""
    name = "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"
    report = build_report(load(corpus_dir / name))
    assert report.summary.communication.pipeline_bubble_pct is None
    assert not any(a.problem == BUBBLE for a in report.summary.advice)
