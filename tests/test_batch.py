"""Several inputs: a process pool and a Dask cluster give the same reports as one by one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dlprof_lite.cli import main

INPUTS = (
    "quasiben__nvtx-examples__cupy.sqlite",
    "MohanadOdema__DLProf__nsys_profile.sqlite",
    "hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
)


def _files(folder: Path) -> dict[str, bytes]:
    """Every report file below ``folder`` by relative path; the combined summary names the
    parent folder in its report_dir column, so that column's prefix is normalised."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = p.read_bytes().replace(bytes(folder), b"<out>")
    return out


@pytest.fixture(scope="module")
def inputs(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("inputs")
    paths = []
    for i, name in enumerate(INPUTS):  # one folder per "rank", as a multi-GPU run has
        (tmp / f"rank{i}").mkdir()
        paths.append(Path(shutil.copy(corpus_dir / name, tmp / f"rank{i}" / name)))
    return paths


@pytest.fixture(scope="module")
def one_by_one(inputs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serial") / "reports"
    assert main(["analyze", *map(str, inputs), "-o", str(out), "--quiet", "--jobs", "1"]) == 0
    return out


@pytest.mark.corpus
def test_one_folder_per_input_and_a_combined_summary(one_by_one: Path) -> None:
    files = _files(one_by_one)
    assert "summary.csv" in files and "summary.json" in files
    folders = sorted(p.name for p in one_by_one.iterdir() if p.is_dir())
    assert len(folders) == len(INPUTS)
    rows = files["summary.csv"].decode().strip().splitlines()
    assert len(rows) == 1 + len(INPUTS)  # header + one row per input


@pytest.mark.corpus
def test_process_pool_gives_the_same_reports(
    inputs: list[Path], one_by_one: Path, tmp_path: Path
) -> None:
    out = tmp_path / "reports"
    assert main(["analyze", *map(str, inputs), "-o", str(out), "--quiet", "--jobs", "2"]) == 0
    assert _files(out) == _files(one_by_one)


@pytest.mark.corpus
@pytest.mark.slow
def test_dask_cluster_gives_the_same_reports(
    inputs: list[Path], one_by_one: Path, tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        out = tmp_path / "reports"
        argv = ["analyze", *map(str, inputs), "-o", str(out), "--quiet"]
        assert main([*argv, "--dask-scheduler", cluster.scheduler_address]) == 0
    assert _files(out) == _files(one_by_one)


def test_unreachable_dask_scheduler_is_one_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    a.write_text("x")
    b.write_text("x")
    code = main(["analyze", str(a), str(b), "--dask-scheduler", "tcp://127.0.0.1:9", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert err[-1].startswith("dlprof-lite: error: cannot reach the Dask scheduler")
    assert not any("Traceback" in line for line in err)
