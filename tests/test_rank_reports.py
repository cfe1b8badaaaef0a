"""One report per rank of a multi-process profile (issue #16, item 1: the run form).

Oracles: the generator's ground truth per process (scripts/make_profile.py ``processes=2``)
for the per-pid load, and the training script's own step count and sleep for the real
``torchrun`` run under the real nsys.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dlprof_lite.cli import main
from dlprof_lite.ingest.facts import facts_of
from dlprof_lite.ingest.load import enrich, load, load_raw
from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.pipeline import AnalyzeOptions, analyze_one
from dlprof_lite.ranks_run import RANKS_STEM, rank_processes

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from make_profile import GroundTruth, make_profile  # noqa: E402

DDP = ROOT / "tests" / "launch_scripts" / "ddp_train.py"
ITERATIONS = 7


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    path = tmp_path_factory.mktemp("ranks") / "two.sqlite"
    truth = make_profile(path, iterations=ITERATIONS, layers=4, kernels_per_layer=3,
                         processes=2, seed=3)  # fmt: skip
    return path, truth


def truth_by_pid(truth: GroundTruth) -> dict[int, int]:
    """Kernel ns per process: the sum of its iterations' (every kernel is in an iteration)."""
    out: dict[int, int] = {}
    for it in truth.iterations:
        out[it["pid"]] = out.get(it["pid"], 0) + sum(it["kernel_ns"])
    assert sum(out.values()) == truth.totals["kernel_ns"]  # the oracle covers every kernel
    return out


def test_per_pid_load_sees_one_process(two_processes: tuple[Path, GroundTruth]) -> None:
    path, truth = two_processes
    expected = truth_by_pid(truth)
    raw = load_raw(path)
    found = rank_processes(facts_of(raw.marks), raw.nvtx)
    assert [(p.rank, p.pid) for p in found] == [(None, p) for p in sorted(expected)]
    for pid, kernel_ns in expected.items():
        one = load(path, pids=[pid])
        assert set(one.kernels["pid"]) == {pid} and set(one.ranges["pid"]) == {pid}
        assert int(one.kernels["dur_ns"].sum()) == kernel_ns
        assert len(one.iterations) == ITERATIONS
        assert len(one.kernels) == truth.totals["kernels"] // 2  # same ops in each process
    both = enrich(raw)  # the raw frames read once serve the all-processes profile too
    assert int(both.kernels["dur_ns"].sum()) == truth.totals["kernel_ns"]


def test_each_rank_report_holds_its_process(
    two_processes: tuple[Path, GroundTruth], tmp_path: Path
) -> None:
    path, truth = two_processes
    expected = truth_by_pid(truth)
    out = tmp_path / "two.dlprof"
    # The tables of the whole run (not the steady window), as the truth counts every kernel.
    options = AnalyzeOptions(formats=("csv",), steps=StepSelection(all_iterations=True))
    result = analyze_one(path, out, options)
    assert [r.process.folder for r in result.ranks] == [f"pid{p}" for p in sorted(expected)]
    summary = {r["report_dir"]: r for r in rows(out / f"{RANKS_STEM}.csv")}
    assert len(summary) == 2
    for pid, kernel_ns in expected.items():
        folder = out / f"pid{pid}"
        kernels = rows(folder / "kernels.csv")
        assert sum(int(k["total_ns"]) for k in kernels) == kernel_ns
        assert len(rows(folder / "iterations.csv")) == ITERATIONS
        row = summary[str(folder)]
        assert int(row["kernel_ns"]) == kernel_ns and int(row["iterations_count"]) == ITERATIONS
        assert (folder / "trace.json").is_file() and (folder / "summary.csv").is_file()
    # The all-processes report is still the whole profile.
    assert int(rows(out / "summary.csv")[0]["kernel_ns"]) == truth.totals["kernel_ns"]


def test_analyze_shows_each_rank_and_nodes_keep_their_rank_folders(
    two_processes: tuple[Path, GroundTruth], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, truth = two_processes
    out = tmp_path / "one.dlprof"
    assert main(["analyze", str(path), "-o", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"ranks: 2 reports, one per process (cross-rank table: {out / RANKS_STEM}.csv)" in shown
    for process in truth.processes:
        line = next(x for x in shown.splitlines() if x.startswith(f"  pid {process['pid']} "))
        assert f"{ITERATIONS} steps, median step " in line and line.endswith(
            str(out / f"pid{process['pid']}"))  # fmt: skip
    # Several nodes' profiles (the multi-node recipe): a folder per node, ranks inside each.
    node = tmp_path / "node1.sqlite"
    node.write_bytes(path.read_bytes())
    both = tmp_path / "nodes"
    assert main(["analyze", str(path), str(node), "-o", str(both), "--quiet"]) == 0
    summary = rows(both / "summary.csv")
    assert len(summary) == 2
    for row in summary:
        folder = Path(row["report_dir"])
        assert len(rows(folder / f"{RANKS_STEM}.csv")) == 2
        assert all((folder / f"pid{p['pid']}" / "summary.csv").is_file() for p in truth.processes)


def test_a_rank_the_window_misses_is_a_warning_and_the_others_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank that stopped early (its last iteration ranges removed from a generated export):
    a window past its steps leaves it without a report, said so; the other rank's is written."""
    path = tmp_path / "early.sqlite"
    make_profile(path, iterations=4, layers=2, kernels_per_layer=2, processes=2)
    with sqlite3.connect(path) as db:
        text = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))"
        starts = [r[0] for r in db.execute(
            f"SELECT start FROM NVTX_EVENTS WHERE {text} = 'iteration' "
            "AND ((globalTid >> 24) & 16777215) = 2000 ORDER BY start")]  # fmt: skip
        assert len(starts) == 4
        db.execute(f"DELETE FROM NVTX_EVENTS WHERE {text} = 'iteration' AND start >= ? "
                   "AND ((globalTid >> 24) & 16777215) = 2000", (starts[2],))  # fmt: skip
    out = tmp_path / "early.dlprof"
    args = ["analyze", str(path), "-o", str(out), "--quiet", "--iter-start", "3",
            "--iter-stop", "4"]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "warning: no report for pid2000 (pid 2000): the iteration window [3, 4)" in err
    assert (out / "pid1000" / "summary.csv").is_file() and not (out / "pid2000").exists()
    assert [Path(r["report_dir"]).name for r in rows(out / f"{RANKS_STEM}.csv")] == ["pid1000"]


def test_one_process_gets_no_rank_folders(tmp_path: Path) -> None:
    path = tmp_path / "one.sqlite"
    make_profile(path, iterations=3, layers=2, kernels_per_layer=2, processes=1)
    result = analyze_one(path, tmp_path / "one.dlprof", AnalyzeOptions(formats=("csv",)))
    assert result.ranks == ()
    names = {p.name for p in (tmp_path / "one.dlprof").iterdir()}
    assert f"{RANKS_STEM}.csv" not in names and not any(n.startswith("pid") for n in names)


@pytest.mark.nsys
@pytest.mark.slow
def test_torchrun_writes_one_report_per_rank(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    steps, slow_ms = 6, 40
    out = tmp_path / "ddp.dlprof"
    cmd = ["torchrun", "--standalone", "--nproc_per_node=2", str(DDP), "--steps", str(steps),
           "--slow-rank", "1", "--slow-ms", str(slow_ms)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", "--nsys", nsys, "-o", str(out),
                           "--quiet", "--", *cmd], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"rank 0/2: {steps} steps" in done.stdout  # the script's own count
    summaries = {}
    for rank in (0, 1):
        folder = out / f"rank{rank}"
        assert len(rows(folder / "iterations.csv")) == steps, rank  # warm-up included
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        summaries[rank] = rows(folder / "summary.csv")[0]
        assert not any("processes ran annotated iterations" in w for w in summary["warnings"])
    # Distinguishable: each report holds one process, each a different one.
    pids = {rank: {r["pid"] for r in rows(out / f"rank{rank}" / "timeline.csv")}
            for rank in (0, 1)}  # fmt: skip
    assert all(len(p) == 1 for p in pids.values()) and pids[0] != pids[1]
    table = {Path(r["report_dir"]).name: r for r in rows(out / f"{RANKS_STEM}.csv")}
    assert sorted(table) == ["rank0", "rank1"]
    # The slow rank sleeps slow_ms in each batch's loading: its data time per step shows it
    # (at least half the sleep more than the other's; a sleep never runs short).
    data = {n: float(r["step_data_wall_ns"]) for n, r in table.items()}
    assert data["rank1"] - data["rank0"] >= slow_ms * 1e6 / 2, data
    # DDP's all-reduce makes every rank wait for the slow one: each rank's median step holds
    # the sleep (synchronous ranks share one step time).
    for name, row in table.items():
        assert float(row["iterations_median_ns"]) >= slow_ms * 1e6, (name, row)
    # DDP's gradient bucket is tagged with the layers it carries (annotate/ddp.py): the
    # script's MLP, Linear(32, 64) and Linear(64, 4), float32 weights and biases. DDP is a
    # wrapper: the layers are the MLP's own (no ``module.``), the wrapper named beside them.
    for rank in (0, 1):
        layers = {r["layer"]: r for r in rows(out / f"rank{rank}" / "layers.csv")}
        assert layers["0"]["grad_bytes"] == str((32 * 64 + 64) * 4), rank
        assert layers["2"]["grad_bytes"] == str((64 * 4 + 4) * 4), rank
        assert layers["0"]["grad_buckets"] == layers["2"]["grad_buckets"] == "0"
        assert layers["1"]["grad_bytes"] == "", "ReLU has no gradients"
        assert layers["0"]["wrapper"] == "DistributedDataParallel", layers["0"]
    # The all-ranks report names the slow rank the straggler (report/ranks/table.py).
    assert rows(out / "summary.csv")[0]["straggler_rank"] == "1"
    # analyze of the nsys report does the same (exported once), naming the user's report.
    rep, again = out / "profile.nsys-rep", tmp_path / "again"
    assert main(["analyze", str(rep), "-o", str(again), "--quiet"]) == 0
    for rank in (0, 1):
        assert rows(again / f"rank{rank}" / "summary.csv")[0]["source"] == str(rep)
        assert len(rows(again / f"rank{rank}" / "iterations.csv")) == steps


def test_the_notebook_api_gives_each_rank_its_report(
    two_processes: tuple[Path, GroundTruth],
) -> None:
    """``dlprof_lite.analyze_ranks``: the reports the command line writes per rank, by
    folder name; the oracle is the generator's kernel time per process."""
    import dlprof_lite

    path, truth = two_processes
    expected = truth_by_pid(truth)
    reports = dlprof_lite.analyze_ranks(path, all_iterations=True)
    assert sorted(reports) == [f"pid{p}" for p in sorted(expected)]
    for pid, kernel_ns in expected.items():
        report = reports[f"pid{pid}"]
        assert report.summary.totals.kernel_ns == kernel_ns
        assert report.summary.iterations.iterations_count == ITERATIONS
    one = make_profile(path.with_name("one.sqlite"), iterations=ITERATIONS, layers=2,
                       kernels_per_layer=1, processes=1, seed=4)  # fmt: skip
    assert one.totals["kernel_ns"] > 0
    assert dlprof_lite.analyze_ranks(path.with_name("one.sqlite")) == {}
