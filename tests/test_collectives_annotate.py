"""The wrapped torch.distributed collectives (annotate/collectives.py) on real gloo groups.

What each call records (its fact: op, group, sequence number, bytes as nccl-tests counts
them, dtype; its ``coll:<op>`` range), that an async all-reduce's range ends when its work
completes, not when the call returns, and that the wrapping changes nothing a program sees:
signatures, and results bit-identical to torch's own functions on two gloo processes.
"""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch has no gloo process group", allow_module_level=True)

from dlprof_lite.annotate import collectives  # noqa: E402
from dlprof_lite.rules.collectives import (  # noqa: E402
    OPS,
    bus_factor,
    ranks_count,
    ranks_text,
)
from dlprof_lite.rules.facts import parse_fact  # noqa: E402


def facts(rec: Any) -> list[dict[str, Any]]:
    found = [parse_fact(text) for _, text in rec.marks]
    return [value for key, value in filter(None, found) if key == "collective"]


def test_each_call_records_its_op_group_sequence_and_bytes(recorder: Any, group: None) -> None:
    remove = collectives.install(recorder)
    try:
        t = torch.arange(6, dtype=torch.float32)
        dist.all_reduce(t)
        out = [torch.zeros(6, dtype=torch.float32)]
        dist.all_gather(out, t)
        whole = torch.zeros(6, dtype=torch.float64)
        dist.all_gather_into_tensor(whole, torch.ones(6, dtype=torch.float64))
        dist.broadcast(t, src=0)
        dist.barrier()
    finally:
        remove()
    got = facts(recorder)
    assert [(f["op"], f["seq"], f["bytes"], f["dtype"]) for f in got] == [
        ("all_reduce", 1, 24, "float32"),
        ("all_gather", 2, 24, "float32"),  # the gathered output: n x the input
        ("all_gather_into_tensor", 3, 48, "float64"),
        ("broadcast", 4, 24, "float32"),
        ("barrier", 5, 0, None),
    ]
    assert {f["group"] for f in got} == {"0"} and not any(f["async"] for f in got)
    names = [r.name for r in recorder.ranges]
    assert names == ["coll:all_reduce", "coll:all_gather", "coll:all_gather_into_tensor",
                     "coll:broadcast", "coll:barrier"]  # fmt: skip
    # each fact just before its range opens, on the same thread
    ticks = [tick for tick, _ in recorder.marks]
    assert all(t + 1 == r.start for t, r in zip(ticks, recorder.ranges))
    assert all(r.end > r.start for r in recorder.ranges)
    assert dist.all_reduce is not None and not hasattr(dist.all_reduce, "_dlprof_lite_collective")


def test_an_async_collective_is_timed_to_its_completion(recorder: Any, group: None) -> None:
    remove = collectives.install(recorder)
    try:
        t = torch.ones(4)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        deadline = time.monotonic() + 5
        while recorder.ranges[0].end < 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        remove()
    (fact,) = facts(recorder)
    assert fact["async"] is True
    (item,) = recorder.ranges
    assert item.name == "coll:all_reduce" and item.tid is None  # a start/end range
    assert item.end > item.start and work.is_completed()


def test_the_wrappers_keep_torchs_signatures_and_restore_its_functions(recorder: Any) -> None:
    originals = {op: getattr(dist, op) for op in OPS if hasattr(dist, op)}
    remove = collectives.install(recorder)
    try:
        for op, original in originals.items():
            wrapped = getattr(dist, op)
            assert wrapped is not original and getattr(dist.distributed_c10d, op) is wrapped
            assert inspect.signature(wrapped) == inspect.signature(original), op
            assert wrapped.__name__ == original.__name__ and wrapped.__doc__ == original.__doc__
        assert collectives.install(recorder)() is None  # wrapping twice wraps nothing more
    finally:
        remove()
    assert all(getattr(dist, op) is f for op, f in originals.items())


def test_group_ranks_text_round_trips() -> None:
    for ranks in ([0], [0, 1], [0, 1, 2, 3], [0, 2, 4, 6], [3, 4, 5]):
        assert ranks_count(ranks_text(ranks)) == len(ranks)
    assert ranks_text([0, 1, 2, 3]) == "0-3" and ranks_text([3, 4, 5]) == "3-5"
    assert ranks_text([0, 2, 4, 6]) == "0,2,4,6" and ranks_text([0, 1]) == "0,1"
    # a profile's text: counted without listing, junk is no group
    assert ranks_count("0-3#2") == 4 and ranks_count("0,2,4") == 3
    for junk in ("0-999999999", "3-1", "abc", "", "1;2", "0-3-5", "-1"):
        assert ranks_count(junk) == 0, junk
    assert bus_factor("all_reduce", 4) == 1.5 and bus_factor("all_gather_into_tensor", 4) == 0.75
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("all_reduce", 1) == 1.0


class _Clock:
    """A backend that keeps each start/end range's wall-clock bounds, nothing else."""

    def __init__(self) -> None:
        self.spans: list[list[float]] = []

    def push(self, name: str) -> None: ...
    def pop(self) -> None: ...
    def mark(self, message: str) -> None: ...

    def start(self, name: str, payload: int | None = None) -> list[float]:
        span = [time.monotonic(), -1.0]
        self.spans.append(span)
        return span

    def end(self, span: list[float]) -> None:
        span[1] = time.monotonic()


def _results(rank: int) -> dict[str, list[Any]]:
    torch.manual_seed(rank)
    x = torch.randn(37, dtype=torch.float32) * (rank + 1)
    out: dict[str, list[Any]] = {}
    t = x.clone()
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    t = x.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = t.tolist()
    gathered = [torch.zeros(37) for _ in range(2)]
    dist.all_gather(gathered, x)
    out["all_gather"] = [g.tolist() for g in gathered]
    whole = torch.zeros(74)
    dist.all_gather_into_tensor(whole, x)
    out["all_gather_into_tensor"] = whole.tolist()
    part = torch.zeros(37)
    dist.reduce_scatter_tensor(part, torch.cat([x, 2 * x]))
    out["reduce_scatter_tensor"] = part.tolist()
    t = x.clone()
    dist.broadcast(t, src=1)
    out["broadcast"] = t.tolist()
    t = x.clone()
    dist.all_reduce(t, async_op=True).wait()
    out["async"] = t.tolist()
    dist.barrier()
    return out


def _worker(rank: int, store: str, result: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        plain = _results(rank)
        clock = _Clock()
        remove = collectives.install(clock)  # type: ignore[arg-type]
        try:
            wrapped = _results(rank)
            # An async all-reduce that rank 1 joins 0.3 s late: rank 0's call returns at
            # once, its range ends when the collective does.
            dist.barrier()
            clock.spans.clear()
            if rank == 1:
                time.sleep(0.3)
            began = time.monotonic()
            work = dist.all_reduce(torch.ones(8), async_op=True)
            returned = time.monotonic() - began
            work.wait()
            deadline = time.monotonic() + 5
            while clock.spans[0][1] < 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            ended = clock.spans[0][1] - began
        finally:
            remove()
        Path(f"{result}.{rank}").write_text(json.dumps(
            {"plain": plain, "wrapped": wrapped, "returned": returned, "ended": ended}))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_results_are_bit_identical_on_two_gloo_processes(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.start_processes(_worker, args=(str(tmp_path / "store"), str(tmp_path / "result")),
                       nprocs=2, start_method="spawn")  # fmt: skip
    for rank in range(2):
        got = json.loads((tmp_path / f"result.{rank}").read_text())
        # floats compared exactly (JSON keeps every bit of a float64 value)
        assert got["wrapped"] == got["plain"], rank
    early = json.loads((tmp_path / "result.0").read_text())
    assert early["returned"] < 0.15 and early["ended"] >= 0.25, early
