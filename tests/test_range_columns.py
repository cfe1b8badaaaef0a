"""Per-range derived columns of ``Profile.ranges`` (ingest/range_columns.py, paths.py).

- a hand-built profile with round numbers: every column worked out by hand;
- every corpus export: the columns equal a slow reference built from the (op, range) pairs
  of :func:`range_membership` (itself checked against ``nsys stats`` nvtxkernsum in
  test_corpus_oracle.py) and from parent chains walked one range at a time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlprof_lite
from builders import R, make_profile, phase, ranges
from conftest import corpus_files
from dlprof_lite.errors import SchemaError
from dlprof_lite.ingest.columns import TABLES, check_frame, empty_frame
from dlprof_lite.ingest.correlate import range_gpu_totals, range_membership
from dlprof_lite.ingest.range_columns import GPU_WORK_COLUMNS, enrich_ranges
from dlprof_lite.report.tables import ranges_table
from dlprof_lite.rules.names import parse_module_range

CORPUS = corpus_files()
LAUNCH = "cudaLaunchKernel_v7000"
MEMCPY = dict(kind="memcpy", start_ns=60, dur_ns=10, api_name="cudaMemcpyAsync_v3020",
              api_start_ns=50, api_end_ns=55)  # fmt: skip


def labels(column: pd.Series) -> list[str | None]:
    return [None if pd.isna(v) else str(v) for v in column]


def kernel(start: int, dur: int, launch: int, tc: bool = False) -> dict[str, object]:
    return dict(name="k", start_ns=start, dur_ns=dur, api_name=LAUNCH, api_start_ns=launch,
                api_end_ns=launch + 5, tc=tc)  # fmt: skip


@pytest.fixture(scope="module")
def hand() -> pd.DataFrame:
    """A step holding a backward that recomputes a forward; a second step; a forward at the
    top level; a start/end data range over the first step (process-wide)."""
    profile = make_profile(
        ranges=[
            R("step", 0, 1000, [R("bwd:fc:Linear", 100, 900, [R("fwd:fc:Linear", 200, 400)])]),
            R("fwd:fc:Linear", 1000, 1200),
            R("step", 2000, 2100),
            phase("data", 0, 1000),
        ],
        kernels=[kernel(300, 100, 250, tc=True), kernel(600, 200, 500), kernel(1150, 10, 1100)],
        memops=[MEMCPY],
    )
    out = profile.ranges.copy()
    # The span's ends are range_gpu_totals' (the profile keeps only the projected span).
    span = range_gpu_totals(profile.kernels, profile.memops, profile.ranges)
    out["gpu_start_ns"], out["gpu_end_ns"] = span["gpu_start_ns"], span["gpu_end_ns"]
    return out.set_index(out["name"].astype(str) + "@" + out["start_ns"].astype(str))


BY_HAND = ("gpu_ns", "self_gpu_ns", "kernels", "memops", "memop_ns",
           "gpu_start_ns", "gpu_end_ns", "projected_ns", "tc_gpu_ns")  # fmt: skip


@pytest.mark.parametrize(
    ("at", "expect"),
    [
        # gpu, self, kernels, memops, memop, first start, last end, projected, tc
        ("step@0", (300, 0, 2, 1, 10, 60, 800, 740, 100)),
        ("bwd:fc:Linear@100", (300, 200, 2, 0, 0, 300, 800, 500, 100)),
        ("fwd:fc:Linear@200", (100, 100, 1, 0, 0, 300, 400, 100, 100)),
        ("fwd:fc:Linear@1000", (10, 10, 1, 0, 0, 1150, 1160, 10, 0)),
        ("step@2000", (0, 0, 0, 0, 0, None, None, 0, 0)),
        # start/end: every launch of the process inside it; push/pop ranges own the kernels
        ("data@0", (300, 0, 2, 1, 10, 60, 800, 740, 100)),
    ],
)
def test_gpu_work_per_range_by_hand(hand: pd.DataFrame, at: str, expect: tuple) -> None:
    got = tuple(None if pd.isna(v) else int(v) for v in hand.loc[at, list(BY_HAND)])
    assert got == expect


def test_module_direction_and_path_ids_by_hand(hand: pd.DataFrame) -> None:
    direction = dict(zip(hand.index, labels(hand["module_direction"]), strict=True))
    assert direction == {
        "step@0": None, "data@0": None, "bwd:fc:Linear@100": "backward",
        "fwd:fc:Linear@200": "recompute",  # a forward inside a backward: a recompute
        "fwd:fc:Linear@1000": "forward", "step@2000": None,
    }  # fmt: skip
    path = hand["path_id"]
    assert path["step@0"] == path["step@2000"]  # two instances of one chain
    assert path["fwd:fc:Linear@200"] != path["fwd:fc:Linear@1000"]  # same name, other chain
    assert hand.loc["fwd:fc:Linear@200", "parent_path_id"] == path["bwd:fc:Linear@100"]
    assert hand.loc["bwd:fc:Linear@100", "parent_path_id"] == path["step@0"]
    assert (hand.loc[["step@0", "data@0", "fwd:fc:Linear@1000"], "parent_path_id"] == -1).all()


def test_enrich_ranges_on_no_ranges_and_on_base_ranges() -> None:
    no_ops = (empty_frame("kernels", derived=True), empty_frame("memops", derived=True))
    none = enrich_ranges(empty_frame("ranges"), *no_ops)
    check_frame(none, "ranges", derived=True)
    assert none.empty
    base = ranges([("a", 0, 10, -1), ("b", 2, 4, 0), ("a", 20, 30, -1)])
    out = enrich_ranges(base, *no_ops)
    check_frame(out, "ranges", derived=True)
    assert out["path_id"].tolist()[0] == out["path_id"].tolist()[2] != out["path_id"][1]
    assert (out[["gpu_ns", "kernels", "projected_ns"]] == 0).all().all()
    assert "gpu_ns" not in base.columns  # the input is not modified


def test_the_ranges_table_refuses_ranges_without_their_gpu_work() -> None:
    p = make_profile(ranges=[R("a", 0, 100)], kernels=[kernel(20, 10, 10)])
    bare = p.ranges.drop(columns=list(GPU_WORK_COLUMNS))
    with pytest.raises(SchemaError, match="missing column 'gpu_ns'"):
        ranges_table(p.kernels, p.memops, bare)
    assert ranges_table(p.kernels, p.memops, p.ranges)["gpu_ns"].tolist() == [10]


def test_every_contract_column_is_written() -> None:
    p = make_profile(ranges=[R("a", 0, 100)])
    assert set(p.ranges.columns) == {c.name for c in TABLES["ranges"]}


def slow_reference(profile: dlprof_lite.Profile) -> pd.DataFrame:
    """Per range id: GPU work summed over membership pairs, chains walked one by one."""
    r = profile.ranges
    index = pd.Index(r["range_id"], name="range_id")
    out = pd.DataFrame(index=index)
    parts = []
    for ops, kind in ((profile.kernels, "k"), (profile.memops, "m")):
        pairs = range_membership(ops, r)
        op = pairs["op_index"].to_numpy()
        tc = ops["uses_tensor_cores"].to_numpy() if kind == "k" else np.zeros(len(ops), bool)
        parts.append(pd.DataFrame({
            "range_id": pairs["range_id"].to_numpy(), "kind": kind,
            "dur": ops["dur_ns"].to_numpy()[op], "tc": tc[op],
            "start": ops["start_ns"].to_numpy()[op], "end": ops["end_ns"].to_numpy()[op],
        }))  # fmt: skip
    pairs = pd.concat(parts, ignore_index=True)
    k = pairs[pairs["kind"] == "k"].groupby("range_id")
    m = pairs[pairs["kind"] == "m"].groupby("range_id")
    out["gpu_ns"] = k["dur"].sum()
    out["kernels"] = k.size()
    out["memops"] = m.size()
    out["memop_ns"] = m["dur"].sum()
    out["tc_gpu_ns"] = pairs[pairs["tc"]].groupby("range_id")["dur"].sum()
    own = profile.kernels.dropna(subset=["range_id"])
    out["self_gpu_ns"] = own.groupby(own["range_id"].astype("int64"))["dur_ns"].sum()
    out = out.fillna(0).astype("int64")
    span = pairs.groupby("range_id").agg(first=("start", "min"), last=("end", "max"))
    out["gpu_start_ns"] = span["first"].reindex(index).astype("Int64")
    out["gpu_end_ns"] = span["last"].reindex(index).astype("Int64")
    out["projected_ns"] = (out["gpu_end_ns"] - out["gpu_start_ns"]).fillna(0).astype("int64")
    # chains of (path name, domain) (a counter's template, ingest/templates.py) and module
    # directions (from the names), walked up parent by parent
    parent = dict(zip(r["range_id"], r["parent_id"], strict=True))
    label = dict(zip(r["range_id"], zip(r["name"].astype(str), r["domain"].astype(str))))
    path_label = dict(zip(r["range_id"], zip(r["path_name"].astype(str),
                                             r["domain"].astype(str))))  # fmt: skip
    chain: dict[int, tuple] = {}
    direction: dict[int, object] = {}
    for rid in r["range_id"]:  # a parent precedes its children
        up = parent[rid]
        chain[rid] = (*(chain[up] if up >= 0 else ()), path_label[rid])
        module = parse_module_range(label[rid][0])
        d = module.direction if module else None
        at = up
        while d == "forward" and at >= 0:
            above = parse_module_range(label[at][0])
            if above is not None and above.direction in ("backward", "recompute"):
                d = "recompute"
            at = parent[at]
        direction[rid] = d
    out["chain"] = pd.Series(chain)
    out["parent_chain"] = [chain.get(parent[i]) for i in index]
    out["module_direction"] = pd.Series(direction)
    return out


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_corpus_range_columns_equal_a_slow_reference(corpus_dir: Path, path: Path) -> None:
    profile = dlprof_lite.load(path)
    if profile.ranges.empty:
        pytest.skip("no NVTX ranges")
    assert list(profile.ranges.columns) == [c.name for c in TABLES["ranges"]]  # in order
    ours = profile.ranges.set_index("range_id")
    ref = slow_reference(profile)
    for column in GPU_WORK_COLUMNS:
        # Values and missing values equal; counts are int32 in the profile (columns.py).
        assert ours[column].astype("Int64").equals(ref[column].astype("Int64")), column
    assert labels(ours["module_direction"]) == ref["module_direction"].tolist()
    # one path_id per chain and one chain per path_id; the parent's chain id
    by_chain = pd.DataFrame({"chain": ref["chain"], "id": ours["path_id"]})
    assert (by_chain.groupby("chain")["id"].nunique() == 1).all()
    assert by_chain["id"].nunique() == by_chain["chain"].nunique()
    id_of = dict(zip(by_chain["chain"], by_chain["id"], strict=False))
    want = [id_of[c] if c is not None else -1 for c in ref["parent_chain"]]
    assert ours["parent_path_id"].tolist() == want
