"""Numbered range names counted under their template (rules/templates.py).

Hand-built exports with round numbers: ten steps named ``iteration 0`` … ``iteration 9``,
each holding module ranges ``blocks.0`` and ``blocks.1`` (foreign names, repeated every
step) and emit_nvtx-style op ranges whose ``seq``/``op_id`` grow with every call. The ranges
table must have one row per template where the numbers count (``iteration #``, ``aten::mm,
seq = #, op_id = #``), one per module where they name things, and its totals must be the
ranges' own. On every corpus export, the table's totals per template equal ``nsys stats -r
nvtxsum``'s rows summed per the same template.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dlprof_lite
from conftest import corpus_files
from dlprof_lite.ingest.load import load
from dlprof_lite.report.build import build_report
from dlprof_lite.rules.templates import template
from nsys_db import NsysDb
from nsys_oracle import nsys_report

STEP = 1_000_000  # 1 ms per step
CORPUS = corpus_files()


def export(path: Path, *, processes: int = 1, steps: int = 10) -> Path:
    op_id = 5000
    with NsysDb(path) as db:
        for p in range(processes):
            pid = 100 + p
            db.process(pid)
            db.thread(pid, pid, "python3")
            for s in range(steps):
                base = 10 * STEP + s * STEP
                db.push(base, base + 900_000, f"iteration {s}", pid, pid)
                for b in range(2):
                    start = base + 100_000 + b * 300_000
                    db.push(start, start + 200_000, f"blocks.{b}", pid, pid)
                    op_id += 7
                    db.push(start + 10_000, start + 60_000,
                            f"aten::mm, seq = {op_id // 7}, op_id = {op_id}", pid, pid)
        db.session(0, 10 * STEP + steps * STEP + STEP)
    return path


def table(path: Path) -> pd.DataFrame:
    report = build_report(load(path), all_iterations=True)
    return report.ranges.set_index(report.ranges["path"].astype(str))


@pytest.mark.parametrize("processes", [1, 2])
def test_counters_collapse_and_module_indices_stay(tmp_path: Path, processes: int) -> None:
    rows = table(export(tmp_path / "t.sqlite", processes=processes))
    n = 10 * processes
    assert sorted(rows.index) == [
        "iteration #", "iteration #/blocks.0", "iteration #/blocks.0/aten::mm, seq = #, op_id = #",
        "iteration #/blocks.1", "iteration #/blocks.1/aten::mm, seq = #, op_id = #"]
    assert rows.loc["iteration #", "instances"] == n
    assert rows.loc["iteration #", "wall_ns"] == n * 900_000
    assert rows.loc["iteration #/blocks.1", "wall_ns"] == n * 200_000
    leaf = "iteration #/blocks.0/aten::mm, seq = #, op_id = #"
    assert rows.loc[leaf, "instances"] == n and rows.loc[leaf, "wall_ns"] == n * 50_000
    assert rows.loc["iteration #", "name"] == "iteration #"
    profile = load(tmp_path / "t.sqlite")  # each range keeps its own name
    assert profile.ranges["name"].astype(str).str.fullmatch(r"iteration \d").sum() == n


def test_numbers_that_do_not_grow_name_distinct_ranges(tmp_path: Path) -> None:
    path = tmp_path / "shapes.sqlite"
    with NsysDb(path) as db:
        db.process(1)
        db.thread(1, 1, "python3")
        for i, size in enumerate((64, 16, 32)):  # once each, not in growing order
            db.push(1000 + i * 1000, 1500 + i * 1000, f"gemm {size}x{size}", 1, 1)
        for i in range(2):  # one name twice: a name, not a counter
            db.push(10_000 + i * 1000, 10_500 + i * 1000, f"step {7}", 1, 1)
        db.session(0, 100_000)
    rows = table(path)
    assert sorted(rows.index) == ["gemm 16x16", "gemm 32x32", "gemm 64x64", "step 7"]


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_totals_per_template_equal_nvtxsum(corpus_dir: Path, nsys: str, path: Path) -> None:
    oracle = nsys_report(nsys, path, "nvtxsum")
    report = dlprof_lite.analyze(path, all_iterations=True)
    ranges = report.ranges
    if oracle.empty:
        assert ranges.empty
        return
    theirs = oracle.groupby(oracle["Range"].astype(str).map(template))[
        ["Instances", "Total Time (ns)"]].sum()  # fmt: skip
    name = ranges["name"].astype(str)
    domain = ranges["domain"].astype(str)
    shown = name.where(domain == "", domain + ":" + name).map(template)
    ours = ranges.groupby(shown)[["instances", "wall_ns"]].sum()
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["instances"].to_numpy() == theirs["Instances"].to_numpy()).all()
    assert (ours["wall_ns"].to_numpy() == theirs["Total Time (ns)"].to_numpy()).all()
