"""Which collective calls an analysed window holds (report/collectives/instances.py match).

Each rank's calls count in its own analysed steps: in an all-ranks report the window is the
key process's steps, and another rank's steps begin and end a little later or earlier. Two
ranks, four steps, one all-reduce a step; rank 1's steps run 30 ns behind rank 0's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.report.collectives.calls import CALL_COLUMNS
from dlprof_lite.report.collectives.instances import match
from dlprof_lite.report.steps.window import ANALYSED, StepWindow

GROUP = "0,1"
LAG = 30  # rank 1's steps: (100k + 30, 100k + 130]


def calls() -> pd.DataFrame:
    rows = []
    for step in range(4):
        for rank, end in ((0, 100 * step + 90), (1, 100 * step + 115)):
            rows.append(dict(pid=100 + rank, tid=1, rank=rank, group=GROUP, op="all_reduce",
                             seq=step, bytes=4096, dtype="float32", peer=np.nan,
                             start_ns=end - 20, end_ns=end, from_kernels=False, layer=None,
                             **{"async": False, "pass": None}, fsdp=False,
                             exposed_ns=np.nan))  # fmt: skip
    return pd.DataFrame(rows, columns=list(CALL_COLUMNS))


# rank 0's steps 1-3 are the window: (100, 400]
WINDOW = StepWindow(ANALYSED, (1, 2, 3), (100, 200, 300), (200, 300, 400), 100, 400)
SPANS = {
    100: (np.array([100, 200, 300]), np.array([200, 300, 400])),
    101: (np.array([100 + LAG, 200 + LAG, 300 + LAG]), np.array([200 + LAG, 300 + LAG, 400 + LAG])),
}


def test_each_rank_counts_the_calls_of_its_own_analysed_steps() -> None:
    held = match(calls(), WINDOW, SPANS)
    # the last step's all-reduce ends on rank 1 at 415, after the window's 400: still in
    # rank 1's own step 3 (330, 430]; step 0's calls are in no analysed step of either rank
    assert sorted(held.groupby("rank")["seq"].apply(list).items()) == [(0, [1, 2, 3]),
                                                                         (1, [1, 2, 3])]
    assert held["complete"].all()


def test_without_steps_of_its_own_an_instance_counts_where_its_last_call_ends() -> None:
    held = match(calls(), WINDOW)
    # by its last call: step 0's instance (ends at 115, inside (100, 400]) counts and step
    # 3's (415) does not: the rule a rank without steps of its own still gets
    assert sorted(set(held["seq"])) == [0, 1, 2]
    only_rank_0 = match(calls(), WINDOW, {100: SPANS[100]})
    assert sorted(only_rank_0.loc[only_rank_0["rank"] == 0, "seq"]) == [1, 2, 3]
    assert sorted(only_rank_0.loc[only_rank_0["rank"] == 1, "seq"]) == [0, 1, 2]
