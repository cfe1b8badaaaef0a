"""Coverage said (issue 26, item 4): the share of GPU operations whose launch call is in the
export (``launch_coverage``), and a warning below 90 %.

Launch overhead, queue times and layer attribution need the launch call of each GPU op; an
export can lack it (a windowed export, API tracing started late, a process traced without
CUDA API calls). The oracle is our own SQL: an op has its call when a runtime row has its
correlation id in its process (nsys's own join rule). Real exports, and copies in
``tmp_path`` whose runtime rows before some time are deleted (API tracing that starts late).
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.render.console import render
from dlprof_lite.render.page.html import header_rows

TWO_GPUS = CORPUS / "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite"
NGP = CORPUS / "sangyun802__instant-ngp__report1.qdrep.sqlite"
OPS = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
WARNING = "of the GPU operations have their launch call in the export"


def coverage(path: Path) -> float:
    """Ops with a runtime row of their correlation id in their process, over all ops."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        have = total = 0
        for table in OPS:
            if table not in tables:
                continue
            total += con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            have += con.execute(
                f"SELECT COUNT(*) FROM {table} o WHERE EXISTS (SELECT 1 FROM "
                "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = o.correlationId "
                "AND (r.globalTid >> 24) = (o.globalPid >> 24))"
            ).fetchone()[0]
    return have / total


@pytest.mark.corpus
@pytest.mark.parametrize("path", [TWO_GPUS, NGP], ids=["two-gpus", "instant-ngp"])
def test_coverage_is_the_share_of_ops_with_their_call(corpus_dir: Path, path: Path) -> None:
    summary = dlprof_lite.analyze(path).summary
    assert summary["launch_coverage"] == pytest.approx(coverage(path), rel=1e-12)
    assert summary["launch_coverage"] >= 0.9  # 99.4 % and 100 %: no warning
    assert not any(WARNING in w for w in summary.warnings)


def _late_api(tmp_path: Path, share: float) -> Path:
    """A copy of the instant-ngp export whose runtime calls before the time by which
    ``share`` of its kernels had started are gone (API tracing that started late)."""
    path = tmp_path / f"late-{share}.sqlite"
    shutil.copyfile(NGP, path)
    with closing(sqlite3.connect(path)) as con:
        count = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        [(cut,)] = con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start "
                               "LIMIT 1 OFFSET ?", (int(count * share),)).fetchall()  # fmt: skip
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start < ?", (cut,))
        con.commit()
    return path


@pytest.mark.corpus
def test_missing_launch_calls_are_said(corpus_dir: Path, tmp_path: Path) -> None:
    path = _late_api(tmp_path, 0.5)
    want = coverage(path)
    assert 0.3 < want < 0.7
    report = dlprof_lite.analyze(path)
    assert report.summary["launch_coverage"] == pytest.approx(want, rel=1e-12)
    [line] = [w for w in report.summary.warnings if WARNING in w]
    assert line.startswith(f"only {want:.1%} ")
    out = StringIO()
    render(report, None, Console(file=out, width=200))
    assert line in " ".join(out.getvalue().split())
    assert dict(header_rows(report))["GPU operations with their launch call"] == f"{want:.1%}"


@pytest.mark.corpus
def test_a_few_missing_calls_are_no_warning(corpus_dir: Path, tmp_path: Path) -> None:
    path = _late_api(tmp_path, 0.05)
    summary = dlprof_lite.analyze(path).summary
    assert summary["launch_coverage"] == pytest.approx(coverage(path), rel=1e-12)
    assert 0.9 <= summary["launch_coverage"] < 1
    assert not any(WARNING in w for w in summary.warnings)
