"""NVTX nesting (ingest/nvtx.py) on hand-built ``nvtx_events`` frames with round numbers.

Each expected id, depth, parent and path is worked out in a comment beside the rows. A
random valid trace is checked against the push/pop stack that generated it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from builders import nvtx_events
from dlprof_lite.ingest.columns import SchemaError, check_frame
from dlprof_lite.ingest.nvtx import build_ranges

NA = pd.NA
PP, SE = "push_pop", "start_end"
SESSION_END = 10_000


def build(rows: list[tuple]) -> pd.DataFrame:
    ranges = build_ranges(nvtx_events(rows), session_end_ns=SESSION_END)
    check_frame(ranges, "ranges", derived=False)
    return ranges


def by_name(ranges: pd.DataFrame) -> dict[str, dict]:
    out = ranges.astype({"name": object, "path": object}).to_dict("records")
    return {r["name"]: r for r in out}


TWO_THREADS = [
    # thread 1: step [0,1000] > forward [100,500] > conv [200,300]; backward [600,900]
    ("step", 0, 1000, PP, 1, 1),
    ("forward", 100, 500, PP, 1, 1),
    ("conv", 200, 300, PP, 1, 1),
    ("backward", 600, 900, PP, 1, 1),
    # thread 2: loader [50,950] > fetch [100,200]
    ("loader", 50, 950, PP, 1, 2),
    ("fetch", 100, 200, PP, 1, 2),
]


def test_nested_ranges_on_two_threads() -> None:
    r = build(TWO_THREADS)
    # start order: step 0, loader 50, forward 100 (400 long) before fetch 100 (100 long),
    # conv 200, backward 600.
    assert r["name"].astype(str).tolist() == [
        "step", "loader", "forward", "fetch", "conv", "backward"
    ]  # fmt: skip
    assert r["range_id"].tolist() == [0, 1, 2, 3, 4, 5]
    assert r["depth"].tolist() == [0, 0, 1, 1, 2, 1]
    # forward and backward under step (0); fetch under loader (1); conv under forward (2).
    assert r["parent_id"].tolist() == [-1, -1, 0, 1, 2, 0]
    assert r["path"].astype(str).tolist() == [
        "step", "loader", "step/forward", "loader/fetch", "step/forward/conv", "step/backward"
    ]  # fmt: skip
    assert r["closed"].all()
    assert r["tid"].tolist() == [1, 2, 1, 2, 1, 1]


def test_input_order_does_not_matter() -> None:
    base = build(TWO_THREADS)
    shuffled = build([TWO_THREADS[i] for i in (5, 2, 0, 4, 3, 1)])
    pd.testing.assert_frame_equal(base, shuffled)


def test_does_not_mutate_input() -> None:
    frame = nvtx_events(TWO_THREADS)
    before = frame.copy()
    build_ranges(frame, session_end_ns=SESSION_END)
    pd.testing.assert_frame_equal(frame, before)


def test_push_without_pop_ends_at_session_end() -> None:
    r = by_name(
        build(
            [
                ("train", 100, None, PP, 1, 1),  # never popped: [100, 10000], closed False
                ("step", 200, 300, PP, 1, 1),  # inside the open range: its child
                ("late", 9000, None, PP, 1, 1),  # also open: [9000, 10000] inside train
            ]
        )
    )
    assert (r["train"]["end_ns"], r["train"]["closed"]) == (SESSION_END, False)
    assert (r["late"]["end_ns"], r["late"]["closed"]) == (SESSION_END, False)
    assert r["step"]["closed"]
    assert (r["step"]["depth"], r["step"]["path"]) == (1, "train/step")
    # late [9000, 10000] ⊂ train [100, 10000] (closed intervals): a child, like a pushed
    # range inside a range that was never popped.
    assert (r["late"]["depth"], r["late"]["parent_id"], r["late"]["path"]) == (1, 0, "train/late")


def test_start_end_ranges_are_process_wide_and_top_level() -> None:
    r = by_name(
        build(
            [
                ("epoch", 0, 5000, SE, 1, 1, 2),  # started on thread 1, ended on thread 2
                ("step", 100, 200, PP, 1, 1),  # inside epoch in time, same thread
                ("window", 150, 180, SE, 1, 1, 1),  # inside step in time
                ("inner", 160, 170, PP, 1, 1),  # inside window and step
            ]
        )
    )
    # start/end ranges are never on a thread's stack: depth 0, no parent, path = name,
    # and they never parent a push/pop range (step is top-level, inner's parent is step).
    for name in ("epoch", "window"):
        assert (r[name]["depth"], r[name]["parent_id"], r[name]["path"]) == (0, -1, name)
    assert (r["step"]["depth"], r["step"]["parent_id"]) == (0, -1)
    assert (r["inner"]["parent_id"], r["inner"]["path"]) == (r["step"]["range_id"], "step/inner")


def test_equal_starts_put_the_longer_range_first() -> None:
    r = build(
        [
            ("short", 0, 100, PP, 1, 1),  # same start as long: the longer one is first
            ("long", 0, 500, PP, 1, 1),
            ("twin_a", 600, 700, PP, 1, 1),  # identical intervals: input order decides
            ("twin_b", 600, 700, PP, 1, 1),
        ]
    )
    assert r["name"].astype(str).tolist() == ["long", "short", "twin_a", "twin_b"]
    # long encloses short; twin_a encloses twin_b (closed intervals, twin_a first).
    assert r["parent_id"].tolist() == [-1, 0, -1, 2]
    assert r["path"].astype(str).tolist() == ["long", "long/short", "twin_a", "twin_a/twin_b"]


def test_non_ascii_names_and_slash_inside_a_name() -> None:
    r = by_name(
        build(
            [
                ("Ünïcode", 0, 100, PP, 1, 1),
                ("前向/フォワード ✓", 10, 50, PP, 1, 1),  # a '/' inside the name itself
                ("a", 200, 300, PP, 1, 1),
                ("b/c", 210, 220, PP, 1, 1),  # a > "b/c" spells a/b/c ...
                ("a/b", 400, 500, PP, 1, 1),
                ("c", 410, 420, PP, 1, 1),  # ... and so does "a/b" > c
            ]
        )
    )
    fwd = r["前向/フォワード ✓"]
    # Structure is depth/parent: one level down. The path does not escape the '/'.
    assert (fwd["depth"], fwd["parent_id"]) == (1, r["Ünïcode"]["range_id"])
    assert fwd["path"] == "Ünïcode/前向/フォワード ✓"
    assert r["b/c"]["path"] == r["c"]["path"] == "a/b/c"
    assert (r["b/c"]["depth"], r["c"]["depth"]) == (1, 1)


def test_one_category_per_spelled_path() -> None:
    first = [("a", 200, 300, PP, 1, 1), ("b/c", 210, 220, PP, 1, 1)]
    second = [("a/b", 400, 500, PP, 1, 1), ("c", 410, 420, PP, 1, 1)]
    r, r2, both = build(first), build(second), build([*first, *second])
    assert list(r["path"].cat.categories) == ["a", "a/b/c"]
    assert list(r2["path"].cat.categories) == ["a/b", "a/b/c"]
    assert sorted(both["path"].cat.categories) == ["a", "a/b", "a/b/c"]


def test_missing_name_counts_as_empty_in_paths() -> None:
    frame = nvtx_events([("outer", 0, 100, PP, 1, 1), ("x", 10, 20, PP, 1, 1)])
    frame["name"] = pd.Categorical(["outer", None])
    r = build_ranges(frame, session_end_ns=SESSION_END)
    assert r["path"].astype(str).tolist() == ["outer", "outer/"]


def test_improper_overlap_gets_a_deterministic_enclosing_parent() -> None:
    # A broken trace: on one thread B starts inside A and outlives it.
    rows = [
        ("A", 0, 100, PP, 1, 1),
        ("B", 50, 150, PP, 1, 1),  # not inside A: top level too
        ("C", 60, 70, PP, 1, 1),  # inside A and B: parent = latest-starting enclosing = B
        ("D", 120, 130, PP, 1, 1),  # inside B only
    ]
    r = by_name(build(rows))
    assert (r["A"]["depth"], r["B"]["depth"]) == (0, 0)
    assert (r["C"]["depth"], r["C"]["parent_id"], r["C"]["path"]) == (1, 1, "B/C")
    assert (r["D"]["depth"], r["D"]["parent_id"], r["D"]["path"]) == (1, 1, "B/D")
    assert build(rows[::-1]).equals(build(rows))


def test_improper_overlap_invariants_on_random_broken_traces() -> None:
    rng = np.random.default_rng(7)
    start = rng.integers(0, 1000, 400)
    rows = [
        (f"r{i}", int(s), int(s + rng.integers(0, 200)) if i % 17 else None, PP, 1, i % 3)
        for i, s in enumerate(start)
    ]
    r = build(rows)
    has_parent = r["parent_id"] >= 0
    child = r[has_parent]
    parent = r.set_index("range_id").loc[child["parent_id"]]
    # every parent encloses its child, comes first, sits one level up, on the same thread
    assert (parent["start_ns"].to_numpy() <= child["start_ns"].to_numpy()).all()
    assert (parent["end_ns"].to_numpy() >= child["end_ns"].to_numpy()).all()
    assert (parent.index.to_numpy() < child["range_id"].to_numpy()).all()
    assert (parent["depth"].to_numpy() + 1 == child["depth"].to_numpy()).all()
    assert (parent["tid"].to_numpy() == child["tid"].to_numpy()).all()
    assert (r.loc[~has_parent, "depth"] == 0).all()


def test_end_before_start_is_clipped_to_zero_length() -> None:
    r = build([("bad", 500, 400, PP, 1, 1)])
    assert (r.loc[0, "start_ns"], r.loc[0, "end_ns"]) == (500, 500)


def test_empty_input_gives_an_empty_contract_frame() -> None:
    r = build([])
    assert r.empty


def test_huge_timestamps_and_ids_still_nest() -> None:
    # Ends spread over 2**62 ns with many threads: the packed int64 "thread, end" key
    # falls back to ranks. A negative tid (ids are int32, columns.py) exercises the
    # factorized (pid, tid) key.
    far = 2**62
    rows = [(f"t{t}", 0, far, PP, 1, t) for t in range(8)]
    rows += [("x", 10, 20, PP, 1, 3), ("y", far - 20, far - 10, PP, 1, 5)]
    rows += [("big", 0, 100, PP, 1, -7), ("in", 5, 6, PP, 1, -7)]
    r = by_name(build(rows))
    assert (r["x"]["path"], r["y"]["path"], r["in"]["path"]) == ("t3/x", "t5/y", "big/in")


def test_an_id_past_int32_is_refused_not_wrapped() -> None:
    # Decoded nsys thread ids have 24 bits; a frame with a wider one is refused by the
    # contract's cast (it would wrap into another thread's id).
    with pytest.raises(SchemaError, match=r"nvtx_events\.tid"):
        build([("a", 0, 10, PP, 1, 2**40)])


def random_stack_trace(seed: int, threads: int = 4, pushes: int = 400) -> list[tuple]:
    """Valid push/pop per thread from a real stack; names are ``"own id<parent id"``."""
    rng = np.random.default_rng(seed)
    rows = []
    for tid in range(threads):
        t, stack, opened = 0, [], []
        for _ in range(pushes * 2):
            t += int(rng.integers(1, 6))  # distinct times on a thread
            if stack and (rng.random() < 0.45 or len(stack) > 8):
                i = stack.pop()
                opened[i][2] = t
            else:
                parent = opened[stack[-1]][0].split("<")[0] if stack else "-"
                opened.append([f"{tid}.{len(opened)}<{parent}", t, None])
                stack.append(len(opened) - 1)
        rows += [(name, s, e, PP, 1 + tid % 2, tid) for name, s, e in opened]
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_valid_trace_matches_the_stack(seed: int) -> None:
    rows = random_stack_trace(seed)
    r = build(rows)
    names = r["name"].astype(str)
    own, true_parent = names.str.split("<").str[0], names.str.split("<").str[1]
    found_parent = pd.Series(own.to_numpy(), index=r["range_id"]).reindex(r["parent_id"])
    assert (found_parent.fillna("-").to_numpy() == true_parent.to_numpy()).all()
    # path = path names (these unique, growing numbers are a counter's: rules/templates.py)
    # along the chain of true parents; depth = its length - 1
    parent_of = dict(zip(own, true_parent, strict=True))
    name_of = dict(zip(own, r["path_name"].astype(str), strict=True))
    for me, path, depth in zip(own, r["path"].astype(str), r["depth"], strict=True):
        chain = [me]
        while parent_of[chain[-1]] != "-":
            chain.append(parent_of[chain[-1]])
        assert path == "/".join(name_of[i] for i in reversed(chain))
        assert depth == len(chain) - 1
    assert (~r["closed"]).sum() == sum(1 for row in rows if row[2] is None)


def random_timed_trace(rng: np.random.Generator, valid: bool) -> list[tuple]:
    """Up to 40 ranges on 3 threads with a coarse clock: equal times, zero-length ranges,
    touching ranges; ``valid``: from a real stack per thread, else random intervals."""
    n, rows = int(rng.integers(1, 40)), []
    for tid in range(3):
        if not valid:
            for _ in range(n // 3 + 1):
                s = int(rng.integers(0, 10))
                rows.append((f"{tid}.{len(rows)}", s, s + int(rng.integers(0, 5)), PP, 1, tid))
            continue
        clock, stack, opened = 0, [], []
        for _ in range(n // 3 + 1):
            while stack and rng.random() < 0.4:
                opened[stack.pop()][2] = clock
                clock += int(rng.integers(0, 2))
            opened.append([f"{tid}.{len(opened)}", clock, None])
            stack.append(len(opened) - 1)
            clock += int(rng.integers(0, 2))
        rows += [(name, s, e, PP, 1, tid) for name, s, e in opened]  # unpopped: session end
    return rows


@pytest.mark.parametrize("valid", [True, False])
def test_counted_nesting_equals_level_peeling_with_equal_times(valid: bool) -> None:
    # The counting pass must give the peeling's answer on every properly nested thread and
    # hand every other thread to the peeling; ties and zero-length ranges are the hard part.
    from dlprof_lite.ingest import nvtx

    rng = np.random.default_rng(11 if valid else 12)
    for _ in range(150):
        r = build(random_timed_trace(rng, valid))
        thread = r["tid"].to_numpy(dtype=np.int64)
        end, push_pop = r["end_ns"].to_numpy(), np.ones(len(r), dtype=bool)
        depth, parent = nvtx._nest_peeled(thread, end, push_pop)
        assert (r["depth"].to_numpy() == depth).all()
        assert (r["parent_id"].to_numpy() == parent).all()


def test_a_chain_longer_than_the_path_cap_is_elided_in_the_middle() -> None:
    from dlprof_lite.ingest.paths import ELISION, PATH_HEAD, PATH_TAIL

    cap = PATH_HEAD + PATH_TAIL + 1
    rows = [(f"L{i}", i, 1000 - i, PP, 1, 1) for i in range(cap + 1)]
    r = build(rows)
    paths = r["path"].astype(str).tolist()
    assert paths[cap - 1] == "/".join(f"L{i}" for i in range(cap))  # cap names: in full
    head = [f"L{i}" for i in range(PATH_HEAD)]
    tail = [f"L{i}" for i in range(cap + 1 - PATH_TAIL, cap + 1)]
    assert paths[cap] == "/".join([*head, ELISION, *tail])  # one more: two names elided
    assert r["depth"].tolist() == list(range(cap + 1))  # the structure is all there


def test_a_path_of_very_long_names_keeps_its_ends() -> None:
    from dlprof_lite.ingest.paths import ELISION, PATH_MAX_CHARS

    long = ["a" * 600, "b" * 600]
    r = build([(long[0], 0, 100, PP, 1, 1), (long[1], 10, 20, PP, 1, 1)])
    path = r["path"].astype(str).iloc[1]
    assert len(path) == PATH_MAX_CHARS and ELISION in path
    assert path.startswith("a" * 400) and path.endswith("b" * 400)


def test_properly_nested_ties_need_no_level_peeling() -> None:
    # [0,10] > [5,8] > [5,5] (zero length at its parent's start) and [8,8] (at its end);
    # [10,10] touches the outer range's end and nests in it (closed intervals).
    from dlprof_lite.ingest import nvtx

    start = np.array([0, 5, 5, 8, 10])
    end = np.array([10, 8, 5, 8, 10])
    depth, parent, bad = nvtx._nest_counted(np.zeros(5, dtype=np.int64), start, end)
    assert bad.size == 0  # the counted pass answered for the whole thread
    assert depth.tolist() == [0, 1, 2, 2, 1]
    assert parent.tolist() == [-1, 0, 1, 1, 0]
    peeled = nvtx._nest_peeled(np.zeros(5, dtype=np.int64), end, np.ones(5, dtype=bool))
    assert (peeled[0].tolist(), peeled[1].tolist()) == (depth.tolist(), parent.tolist())
