"""Correlation (ingest/correlate.py) on hand-built frames with round numbers, worked out in
comments: two processes reusing correlation ids, nested ranges on two threads, a start/end
range ended on another thread catching a launch from a third, CUDA-graph kernels, duplicate
API rows, a kernel outside every range, a push without a pop, non-ASCII names. Then a random
trace against a slow, obviously-correct reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from builders import nvtx_events
from dlprof_lite.ingest.columns import check_frame, coerce
from dlprof_lite.ingest.correlate import (
    attach_launches,
    attribute_ranges,
    range_gpu_totals,
    range_membership,
)
from dlprof_lite.ingest.nvtx import build_ranges

NA = pd.NA
PP, SE = "push_pop", "start_end"
SESSION_END = 10_000
FWD, CONV = "Ünïcode", "前向/フォワード ✓"


def api(rows: list[tuple]) -> pd.DataFrame:
    """``(name, start, end, pid, tid, correlation_id)`` rows."""
    frame = pd.DataFrame(
        rows, columns=["name", "start_ns", "end_ns", "pid", "tid", "correlation_id"]
    )
    frame = coerce(frame.assign(dur_ns=frame.end_ns - frame.start_ns, source="runtime"), "api")
    check_frame(frame, "api", derived=False)
    return frame


def gpu_ops(table: str, rows: list[tuple], **extra: object) -> pd.DataFrame:
    """``(pid, correlation_id, start, end[, graph_node_id])`` rows, no launch columns."""
    cols = ["pid", "correlation_id", "start_ns", "end_ns"]
    frame = pd.DataFrame([r[:4] for r in rows], columns=cols, dtype="int64")
    node = pd.array([r[4] if len(r) > 4 else None for r in rows], dtype="Int64")
    frame = frame.assign(dur_ns=frame.end_ns - frame.start_ns, graph_node_id=node, **extra)
    return coerce(frame.assign(device_id=0, context_id=1, stream_id=7), table)


def kernels(rows: list[tuple]) -> pd.DataFrame:
    return gpu_ops("kernels", rows, name="k", short_name="k")


def memops(rows: list[tuple], kinds: tuple[str, ...] = ()) -> pd.DataFrame:
    kind = list(kinds) or ["memcpy"] * len(rows)
    copy = ["HtoD" if k == "memcpy" else None for k in kind]
    extra = {"bytes": 4096, "src_mem": "pinned", "dst_mem": "device"}
    return gpu_ops("memops", rows, kind=kind, copy_kind=copy, **extra)


# Range ids follow start order, longer first, then input order:
#   0 loader   [0, 2000]    pid 100 tid 12 (longest of the three starting at 0)
#   1 step     [0, 1000]    pid 100 tid 11
#   2 step     [0, 1000]    pid 200 tid 21 (same interval as 1: input order)
#   3 epoch    [50, 1500]   start/end, started on tid 11, ended on tid 12
#   4 Ünïcode  [100, 400]   under 1
#   5 前向/…    [150, 250]   under 4
#   6 fetch    [300, 600]   under 0
#   7 backward [500, 900]   under 1
#   8 window   [800, 3000]  start/end on tid 13, overlaps epoch
#   9 tail     [2000, open] pid 200 tid 21, never popped: ends at 10000
RANGES = [
    ("loader", 0, 2000, PP, 100, 12, None),
    ("step", 0, 1000, PP, 100, 11, None),
    ("step", 0, 1000, PP, 200, 21, None),
    ("epoch", 50, 1500, SE, 100, 11, 12),
    (FWD, 100, 400, PP, 100, 11, None),
    (CONV, 150, 250, PP, 100, 11, None),
    ("fetch", 300, 600, PP, 100, 12, None),
    ("backward", 500, 900, PP, 100, 11, None),
    ("window", 800, 3000, SE, 100, 13, 13),
    ("tail", 2000, None, PP, 200, 21, None),
]

API = [
    ("cudaLaunchKernel_v7000", 200, 210, 100, 11, 1),  # in 前向 (tid 11)
    ("cudaLaunchKernel_v7000", 450, 460, 100, 11, 2),  # in step, between its children
    ("cudaLaunchKernel_v7000", 350, 360, 100, 12, 3),  # in fetch (tid 12)
    ("cuLaunchKernel", 1200, 1210, 100, 13, 4),  # tid 13: only epoch and window
    ("cudaLaunchKernel_v7000", 2500, 2510, 100, 11, 5),  # after step: only window
    ("cudaLaunchKernel_v7000", 5000, 5010, 100, 11, 6),  # outside every range
    ("cudaGraphLaunch_v10000", 600, 620, 100, 11, 7),  # one call, two graph kernels
    ("cudaLaunchKernel", 690, 760, 100, 11, 8),  # pipit-style twin rows: the bare
    ("cudaLaunchKernel_v7000", 700, 750, 100, 11, 8),  # name wraps the _v7000 one
    ("cudaMemcpyAsync_v3020", 160, 170, 100, 11, 10),
    ("cudaMemsetAsync_v3020", 320, 330, 100, 12, 11),
    ("cudaLaunchKernel_v7000", 300, 310, 200, 21, 1),  # pid 200 reuses id 1
    ("cudaLaunchKernel_v7000", 9000, 9010, 200, 21, 3),  # in the unclosed tail
]

KERNELS = [
    (100, 1, 1000, 1100),  # k0  dur 100
    (100, 2, 1100, 1300),  # k1  dur 200
    (100, 3, 1300, 1350),  # k2  dur 50
    (100, 4, 2000, 2400),  # k3  dur 400
    (100, 5, 3000, 3010),  # k4  dur 10
    (100, 6, 6000, 6020),  # k5  dur 20
    (100, 7, 700, 730, 1),  # k6  dur 30, graph node 1
    (100, 7, 730, 770, 2),  # k7  dur 40, graph node 2
    (100, 8, 800, 880),  # k8  dur 80
    (200, 1, 400, 460),  # k9  dur 60
    (200, 2, 500, 505),  # k10 dur 5, no API row in pid 200 (windowed export)
    (200, 3, 9100, 9200),  # k11 dur 100
]

MEMOPS = [
    (100, 10, 180, 380),  # m0 memcpy, dur 200, launched in 前向
    (100, 11, 900, 950),  # m1 memset, dur 50, launched in fetch
]


@pytest.fixture(scope="module")
def ranges() -> pd.DataFrame:
    return build_ranges(nvtx_events(RANGES), session_end_ns=SESSION_END)


@pytest.fixture(scope="module")
def k() -> pd.DataFrame:
    return attach_launches(kernels(KERNELS), api(API))


@pytest.fixture(scope="module")
def m() -> pd.DataFrame:
    return attach_launches(memops(MEMOPS, ("memcpy", "memset")), api(API))


def test_ranges_are_numbered_as_worked_out(ranges: pd.DataFrame) -> None:
    assert ranges["name"].astype(str).tolist() == [
        "loader", "step", "step", "epoch", FWD, CONV, "fetch", "backward", "window", "tail"
    ]  # fmt: skip
    assert ranges["pid"].tolist() == [100, 100, 200, 100, 100, 100, 100, 100, 100, 200]
    assert ranges.loc[9, ["end_ns", "closed"]].tolist() == [SESSION_END, False]


def test_attach_launches_joins_on_pid_and_correlation_id(k: pd.DataFrame) -> None:
    check_frame(k, "kernels", derived=False)
    assert k["tid"].tolist() == [11, 11, 12, 13, 11, 11, 11, 11, 11, 21, NA, 21]
    # k9: pid 200's id 1 is the call at 300 on tid 21, not pid 100's call at 200
    assert k["api_start_ns"].tolist() == [
        200, 450, 350, 1200, 2500, 5000, 600, 600, 700, 300, NA, 9000
    ]  # fmt: skip
    assert k.loc[9, "api_end_ns"] == 310
    assert k.loc[3, "api_name"] == "cuLaunchKernel"
    assert k["api_name"].isna().tolist() == [False] * 10 + [True, False]
    assert str(k["api_start_ns"].dtype) == "Int64" and str(k["tid"].dtype) == "Int32"


def test_graph_kernels_attach_to_their_graph_launch(k: pd.DataFrame) -> None:
    graph = k[k["graph_node_id"].notna()]
    assert graph["api_name"].astype(str).tolist() == ["cudaGraphLaunch_v10000"] * 2
    assert graph["api_start_ns"].tolist() == [600, 600]


def test_duplicate_api_rows_keep_the_versioned_launch(k: pd.DataFrame) -> None:
    # corr 8 has cudaLaunchKernel [690, 760] and cudaLaunchKernel_v7000 [700, 750]
    row = k.loc[8, ["api_name", "api_start_ns", "api_end_ns"]].tolist()
    assert row == ["cudaLaunchKernel_v7000", 700, 750]
    assert len(k) == len(KERNELS)  # duplicates never duplicate kernels


def test_duplicate_preference_order() -> None:
    rows = [
        ("cudaEventRecord_v3020", 100, 200, 1, 1, 5),  # not a launch: last choice
        ("cudaLaunchKernel", 110, 200, 1, 1, 5),  # launch, no suffix, earliest launch
        ("cuLaunchKernel", 120, 200, 1, 1, 5),  # launch, no suffix
        ("cudaLaunchKernel_v7000", 130, 200, 1, 1, 5),  # launch + suffix: first choice
    ]
    one = kernels([(1, 5, 1000, 1010)])
    assert attach_launches(one, api(rows)).loc[0, "api_name"] == "cudaLaunchKernel_v7000"
    assert attach_launches(one, api(rows[:3])).loc[0, "api_start_ns"] == 110
    assert attach_launches(one, api(rows[:1])).loc[0, "api_name"] == "cudaEventRecord_v3020"


def test_attach_launches_is_pure_and_places_launch_columns(k: pd.DataFrame) -> None:
    frame = kernels(KERNELS)
    before = frame.copy()
    out = attach_launches(frame, api(API))
    pd.testing.assert_frame_equal(frame, before)
    cols = list(out.columns)
    at = cols.index("graph_node_id")
    assert cols[at + 1 : at + 5] == ["tid", "api_name", "api_start_ns", "api_end_ns"]
    pd.testing.assert_frame_equal(attach_launches(out, api(API)), out)  # idempotent


def test_attach_launches_without_api_rows() -> None:
    out = attach_launches(kernels(KERNELS[:2]), api([]))
    assert out["tid"].isna().all() and out["api_name"].isna().all()
    check_frame(out, "kernels", derived=False)


def test_attribute_ranges_innermost(k: pd.DataFrame, ranges: pd.DataFrame) -> None:
    out = attribute_ranges(k, ranges).astype(object).where(lambda f: f.notna(), None)
    # k0 前向 (5); k1 step (1); k2 fetch (6); k3 tid 13 in epoch [50,1500] and window
    # [800,3000]: the later-starting window (8); k4 window (8); k5 none; k6-k8 backward
    # (7); k9 pid 200 step (2); k10 no API row; k11 the unclosed tail (9), top level:
    # it starts at 2000, after pid 200's step [0, 1000] ended.
    assert out["range_id"].tolist() == [5, 1, 6, 8, 8, None, 7, 7, 7, 2, None, 9]
    assert out["range_path"].tolist() == [
        f"step/{FWD}/{CONV}", "step", "loader/fetch", "window", "window", None,
        "step/backward", "step/backward", "step/backward", "step", None, "tail",
    ]  # fmt: skip
    typed = attribute_ranges(k, ranges)
    assert str(typed["range_id"].dtype) == "Int32"
    assert isinstance(typed["range_path"].dtype, pd.CategoricalDtype)


def test_range_membership_is_inclusive(k: pd.DataFrame, ranges: pd.DataFrame) -> None:
    pairs = range_membership(k, ranges)
    got = pairs.groupby("op_index")["range_id"].agg(list).to_dict()
    assert got == {
        0: [1, 3, 4, 5],  # step > Ünïcode > 前向, plus epoch (same process, any thread)
        1: [1, 3],
        2: [0, 3, 6],  # loader > fetch on tid 12, plus epoch
        3: [3, 8],  # tid 13 has no push/pop ranges: both start/end ranges
        4: [8],
        6: [1, 3, 7],
        7: [1, 3, 7],
        8: [1, 3, 7],
        9: [2],
        11: [9],  # the unclosed tail only: pid 200's step [0, 1000] ended long before
    }
    assert list(pairs.columns) == ["op_index", "range_id"]
    assert (pairs["op_index"].diff().dropna() >= 0).all()


def test_range_gpu_totals(k: pd.DataFrame, m: pd.DataFrame, ranges: pd.DataFrame) -> None:
    t = range_gpu_totals(k, m, ranges).set_index("range_id").drop(columns="tc_gpu_ns")
    # loader: k2 (50) inclusive, self 0; memop m1 (50); GPU span min(1300,900)..1350
    assert t.loc[0].tolist() == [50, 0, 1, 1, 50, 900, 1350, 450]
    # step pid 100: k0 100 + k1 200 + k6 30 + k7 40 + k8 80 = 450, self k1 200;
    # m0 [180,380]; span 180..max(1100,1300,730,770,880,380) = 1300 -> 1120
    assert t.loc[1].tolist() == [450, 200, 5, 1, 200, 180, 1300, 1120]
    # step pid 200: k9 60 [400, 460]; k11 (in tail, which starts after step) is not in it
    assert t.loc[2].tolist() == [60, 60, 1, 0, 0, 400, 460, 60]
    # epoch: k0 100 + k1 200 + k2 50 + k3 400 + k6 30 + k7 40 + k8 80 = 900; self 0
    # (k3's innermost is window); m0 200 + m1 50; span 180..2400 -> 2220
    assert t.loc[3].tolist() == [900, 0, 7, 2, 250, 180, 2400, 2220]
    # Ünïcode: k0 100, m0 200; span min(1000,180)..max(1100,380) -> 920
    assert t.loc[4].tolist() == [100, 0, 1, 1, 200, 180, 1100, 920]
    assert t.loc[5].tolist() == [100, 100, 1, 1, 200, 180, 1100, 920]
    # fetch: k2 50 [1300,1350], m1 50 [900,950]: 900..1350 -> 450
    assert t.loc[6].tolist() == [50, 50, 1, 1, 50, 900, 1350, 450]
    # backward: k6 30 + k7 40 + k8 80 = 150; 700..880 -> 180
    assert t.loc[7].tolist() == [150, 150, 3, 0, 0, 700, 880, 180]
    # window: k3 400 + k4 10 = 410; 2000..3010 -> 1010
    assert t.loc[8].tolist() == [410, 410, 2, 0, 0, 2000, 3010, 1010]
    # tail: k11 100; 9100..9200
    assert t.loc[9].tolist() == [100, 100, 1, 0, 0, 9100, 9200, 100]


def test_range_gpu_totals_tensor_core_time_is_the_tc_kernels_own_total(
    k: pd.DataFrame, m: pd.DataFrame, ranges: pd.DataFrame
) -> None:
    assert (range_gpu_totals(k, m, ranges)["tc_gpu_ns"] == 0).all()  # no flag: none
    flagged = k.assign(uses_tensor_cores=np.arange(len(k)) % 3 == 0)
    t = range_gpu_totals(flagged, m, ranges)
    # The oracle: inclusive kernel time of the flagged kernels alone.
    alone = range_gpu_totals(k[flagged["uses_tensor_cores"]], m.iloc[:0], ranges)
    assert t["tc_gpu_ns"].tolist() == alone["gpu_ns"].tolist()
    assert (t["tc_gpu_ns"] > 0).any() and (t["tc_gpu_ns"] < t["gpu_ns"]).any()
    assert t["range_id"].tolist() == ranges["range_id"].tolist()  # rows in ranges order


def test_range_gpu_totals_without_gpu_work(ranges: pd.DataFrame) -> None:
    none = attach_launches(kernels([]), api(API))
    t = range_gpu_totals(none, attach_launches(memops([]), api(API)), ranges)
    assert len(t) == len(ranges) and (t["gpu_ns"] == 0).all()
    assert t["gpu_start_ns"].isna().all() and (t["projected_ns"] == 0).all()
    assert str(t["gpu_start_ns"].dtype) == "Int64"


def test_improper_overlap_does_not_crash() -> None:
    # Broken thread: A [0,100], B [50,150] (not inside A), C [60,70] inside both: by
    # nvtx.build_ranges C's parent is B. Launch at 25 -> A; at 65 -> C (chain C, B);
    # at 120 -> B; at 75 -> the latest-starting range holding it, B.
    rows = [("A", 0, 100), ("B", 50, 150), ("C", 60, 70)]
    r = build_ranges(nvtx_events([(*x, PP, 1, 1, None) for x in rows]), session_end_ns=SESSION_END)
    calls = api([("cuLaunchKernel", t, t + 1, 1, 1, i) for i, t in enumerate([25, 65, 120, 75])])
    ops = attach_launches(kernels([(1, i, 1000, 1001) for i in range(4)]), calls)
    assert attribute_ranges(ops, r)["range_path"].tolist() == ["A", "B/C", "B", "B"]
    got = range_membership(ops, r).groupby("op_index")["range_id"].agg(list).to_dict()
    assert got == {0: [0], 1: [1, 2], 2: [1], 3: [1]}


def test_ranges_need_not_be_numbered_in_start_order(k: pd.DataFrame, ranges: pd.DataFrame) -> None:
    # Renumber ids backwards (parents too) and shuffle rows: same ranges, same answers.
    flipped = ranges.assign(
        range_id=9 - ranges["range_id"],
        parent_id=np.where(ranges["parent_id"] >= 0, 9 - ranges["parent_id"], -1),
    ).iloc[[3, 0, 9, 5, 1, 8, 2, 7, 4, 6]]
    want = attribute_ranges(k, ranges)["range_id"]
    got = attribute_ranges(k, flipped)["range_id"]
    assert got.tolist() == [NA if pd.isna(x) else 9 - x for x in want]
    pairs = range_membership(k, flipped).assign(range_id=lambda f: 9 - f["range_id"])
    pd.testing.assert_frame_equal(
        pairs.sort_values(["op_index", "range_id"], ignore_index=True),
        range_membership(k, ranges),
    )


def test_attribute_ranges_without_ranges(k: pd.DataFrame, ranges: pd.DataFrame) -> None:
    out = attribute_ranges(k, ranges.iloc[:0])
    assert out["range_id"].isna().all() and out["range_path"].isna().all()
    assert range_membership(k, ranges.iloc[:0]).empty


# --- a slow, obviously-correct reference on a random trace -------------------------------


def random_trace(seed: int, huge: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Valid push/pop stacks on 6 threads of 2 processes, overlapping start/end ranges,
    launches at random times (some on a thread without ranges, some without API row).
    ``huge``: one thread at 2**62 ns with a negative tid (ids are int32, columns.py), so
    packed int64 keys fall back."""
    rng = np.random.default_rng(seed)
    rows, horizon = [], 0
    for pid, tid in [(1, 10), (1, 11), (1, 12), (2, 10), (2, 20), (2, 21)]:
        far = 2**62 if huge and tid == 21 else 0
        big_tid = -21 if huge and tid == 21 else tid
        t, stack = far, []
        for _ in range(300):
            t += int(rng.integers(1, 4))  # times repeat across threads, never on one
            if stack and (rng.random() < 0.45 or len(stack) > 6):
                rows[stack.pop()][2] = t
            else:
                stack.append(len(rows))
                rows.append([f"p{len(rows)}", t, None, PP, pid, big_tid, None])
        horizon = max(horizon, t - far)
    for pid in (1, 2):
        for i in range(60):
            s = int(rng.integers(0, horizon))
            e = s + int(rng.integers(0, horizon // 4))
            rows.append([f"s{pid}.{i}", s, e, SE, pid, 10, int(rng.choice([10, 11, 12]))])
    ranges = build_ranges(nvtx_events([tuple(r) for r in rows]), session_end_ns=2**62 + 10**6)
    n = 3000
    pid = rng.choice([1, 2], n)
    tid = np.where(pid == 1, rng.choice([10, 11, 12, 13], n), rng.choice([10, 20, 21], n))
    t = rng.integers(0, horizon + 20, n)
    if huge:
        t = np.where(tid == 21, t + 2**62, t)
        tid = np.where(tid == 21, -21, tid)
    launched = np.flatnonzero(rng.random(n) < 0.95)
    name = "cudaLaunchKernel_v7000"
    calls = api([(name, int(t[i]), int(t[i]) + 5, int(pid[i]), int(tid[i]), i) for i in launched])
    starts = rng.integers(0, 1000, n)  # GPU times: only range_gpu_totals reads them
    ops = [(int(pid[i]), i, int(starts[i]), int(starts[i] + i % 7 + 1)) for i in range(n)]
    return attach_launches(kernels(ops), calls), ranges


def reference(ops: pd.DataFrame, ranges: pd.DataFrame) -> tuple[list, list]:
    """Per op: innermost range id (or None) and the sorted inclusive range ids, by loops."""
    by_thread: dict[tuple, list] = {}
    by_process: dict[int, list] = {}
    for r in ranges.itertuples():
        span = (r.start_ns, r.end_ns, r.range_id)
        if r.style == PP:
            by_thread.setdefault((r.pid, r.tid), []).append(span)
        else:
            by_process.setdefault(r.pid, []).append(span)
    inner, member = [], []
    for op in ops.itertuples():
        t, launched = op.api_start_ns, not pd.isna(op.tid)
        pp = [i for s, e, i in by_thread.get((op.pid, op.tid), []) if launched and s <= t <= e]
        se = [i for s, e, i in by_process.get(op.pid, []) if launched and s <= t <= e]
        inner.append(max(pp) if pp else max(se) if se else None)
        member.append(sorted(pp + se))
    return inner, member


@pytest.mark.parametrize(("seed", "huge"), [(1, False), (2, False), (3, True)])
def test_matches_reference_on_a_random_trace(seed: int, huge: bool) -> None:
    ops, ranges = random_trace(seed, huge)
    inner, member = reference(ops, ranges)
    got = attribute_ranges(ops, ranges)["range_id"]
    assert [None if pd.isna(x) else int(x) for x in got] == inner
    pairs = range_membership(ops, ranges)
    grouped = pairs.groupby("op_index")["range_id"].agg(list)
    assert [grouped.get(i, []) for i in range(len(ops))] == member
    # the trace exercises every case: no range, push/pop, start/end only, nested levels
    assert sum(x is None for x in inner) > 50 and sum(len(m) > 3 for m in member) > 50
    assert ops["tid"].isna().sum() > 50
    # totals are sums over the same memberships
    dur, start, end = (ops[c].tolist() for c in ("dur_ns", "start_ns", "end_ns"))
    want = {}
    for i, ids in enumerate(member):
        for r in ids:
            w = want.setdefault(r, [0, 0, 0, 2**63, 0])  # gpu, self, count, first, last
            w[0] += dur[i]
            w[1] += dur[i] if r == inner[i] else 0
            w[2] += 1
            w[3], w[4] = min(w[3], start[i]), max(w[4], end[i])
    tot = range_gpu_totals(ops, ops.iloc[:0], ranges).set_index("range_id")
    got = tot[["gpu_ns", "self_gpu_ns", "kernels", "gpu_start_ns", "gpu_end_ns"]]
    assert {r: v for r, v in zip(got.index, got.values.tolist()) if v[2]} == want
