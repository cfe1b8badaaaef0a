"""A worker process that dies mid-batch (killed for memory, a native crash) costs only its
own input: the pool it broke is replaced, and every other input still gets its result."""

from __future__ import annotations

import os
import signal

from dlprof_lite.batch import WORKER_DIED, run_all


def upper_or_die(name: str) -> str:
    """Top-level, so that a spawned worker can import it: ``die`` kills its own process."""
    if name == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return name.upper()


def test_a_killed_worker_fails_only_its_own_input() -> None:
    items = [("a",), ("die",), ("b",), ("c",), ("d",)]
    outcomes = run_all(upper_or_die, items, jobs=2)
    assert [o.item for o in outcomes] == items  # input order kept
    assert [o.result for o in outcomes] == ["A", None, "B", "C", "D"]
    died = outcomes[1]
    assert (died.error, died.exit_code) == (WORKER_DIED, 1)
    assert all(o.error is None and o.exit_code == 0 for i, o in enumerate(outcomes) if i != 1)
