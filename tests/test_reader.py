"""The reader: every corpus export reads; bad inputs give one clear InputError."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pandas as pd
import pytest

from builders import foreign_sqlite, query
from conftest import corpus_files
from dlprof_lite.errors import InputError
from dlprof_lite.ingest.columns import check_frame
from dlprof_lite.ingest.reader import read_export
from nsys_oracle import nsys_report

CORPUS = corpus_files()
CUPY = "quasiben__nvtx-examples__cupy.sqlite"


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_every_corpus_export_reads(corpus_dir: Path, path: Path) -> None:
    raw = read_export(path)
    check_frame(raw.api, "api", derived=False)
    assert raw.meta.session_end_ns >= raw.meta.session_start_ns
    for frame in (raw.kernels, raw.memops):
        if len(frame):
            assert (frame["dur_ns"] >= 0).all()
            assert frame["start_ns"].min() >= raw.meta.session_start_ns
            assert frame["end_ns"].max() <= raw.meta.session_end_ns


@pytest.mark.corpus
@pytest.mark.nsys
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_kernel_totals_equal_nsys_gpukernsum(corpus_dir: Path, nsys: str, path: Path) -> None:
    raw = read_export(path)
    oracle = nsys_report(nsys, path, "gpukernsum")
    if oracle.empty:
        assert raw.kernels.empty, "nsys found no kernels, we did"
        return
    ours = raw.kernels.groupby("name", observed=True)["dur_ns"].agg(["count", "sum"])
    theirs = oracle.groupby("Name")[["Instances", "Total Time (ns)"]].sum()
    assert sorted(ours.index) == sorted(theirs.index)
    theirs = theirs.loc[ours.index]
    assert (ours["count"].to_numpy() == theirs["Instances"].to_numpy()).all()
    assert (ours["sum"].to_numpy() == theirs["Total Time (ns)"].to_numpy()).all()


@pytest.mark.corpus
def test_oldest_schema_mixes_inline_and_registered_nvtx_text(corpus_dir: Path) -> None:
    raw = read_export(corpus_dir / "quasiben__nvtx-examples__cudf.sqlite")
    registered = query(
        corpus_dir / "quasiben__nvtx-examples__cudf.sqlite",
        "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text IS NULL",
    )[0][0]
    assert registered > 0
    assert (raw.nvtx["name"].astype(str) != "").all()
    # The cuDF ranges live in a named domain, created by an eventType-75 row.
    assert "libcudf" in set(raw.nvtx["domain"].astype(str))


@pytest.mark.corpus
def test_two_process_export_decodes_both_pids(corpus_dir: Path) -> None:
    raw = read_export(corpus_dir / "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite")
    assert raw.kernels["pid"].nunique() == 2
    assert set(raw.kernels["pid"]) <= set(raw.api["pid"])


@pytest.mark.corpus
@pytest.mark.parametrize(
    "name, kernels, nvtx",
    [
        ("YoonKyonghwan__EfficientCenterFormer__baseline.sqlite", 0, 1824),  # NVTX only
        ("frasertajima__WeatherBench2__report1.sqlite", 0, 0),  # no kernel table
        ("amir-ghz__DynamicViT__nsys_profile.sqlite", 0, 0),  # nothing at all
    ],
)
def test_edge_case_exports_give_empty_typed_frames(
    corpus_dir: Path, name: str, kernels: int, nvtx: int
) -> None:
    raw = read_export(corpus_dir / name)
    assert len(raw.kernels) == kernels
    assert len(raw.nvtx) == nvtx
    assert list(raw.kernels.columns)[:3] == ["start_ns", "end_ns", "dur_ns"]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_export(tmp_path / "nope.sqlite")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_export(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "e.sqlite").write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        read_export(tmp_path / "e.sqlite")


def test_text_file(tmp_path: Path) -> None:
    (tmp_path / "t.sqlite").write_text("time,kernel\n1,2\n")
    with pytest.raises(InputError, match="not a SQLite file"):
        read_export(tmp_path / "t.sqlite")


def test_sqlite_that_is_not_nsys(tmp_path: Path) -> None:
    other = foreign_sqlite(tmp_path / "other.sqlite")
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        read_export(other)


@pytest.mark.corpus
def test_truncated_export(corpus_dir: Path, tmp_path: Path) -> None:
    data = (corpus_dir / CUPY).read_bytes()
    (tmp_path / "half.sqlite").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated"):
        read_export(tmp_path / "half.sqlite")


@pytest.mark.corpus
def test_corrupt_pages(corpus_dir: Path, tmp_path: Path) -> None:
    data = bytearray((corpus_dir / CUPY).read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for p in range(2, len(data) // page):  # keep the header page, scribble over the rest
        data[p * page : p * page + 64] = b"\xff" * 64
    (tmp_path / "bad.sqlite").write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt"):
        read_export(tmp_path / "bad.sqlite")


@pytest.mark.corpus
def test_input_is_never_modified(corpus_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ro.sqlite"
    shutil.copy(corpus_dir / CUPY, copy)
    os.chmod(copy, stat.S_IRUSR)
    before = (copy.read_bytes(), copy.stat().st_mtime_ns)
    read_export(copy)
    assert (copy.read_bytes(), copy.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.sqlite"]  # no -journal, -wal


@pytest.mark.corpus
def test_non_ascii_path(corpus_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "プロファイル ü #1?.sqlite"
    shutil.copy(corpus_dir / CUPY, target)
    assert len(read_export(target).kernels) == 15


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_sqlite3_and_arrow_drivers_read_the_same(
    corpus_dir: Path, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("adbc_driver_sqlite")
    arrow = read_export(path)
    monkeypatch.setenv("DLPROF_LITE_READER", "sqlite")
    plain = read_export(path)
    _same_frames(arrow, plain)
    assert arrow.meta == plain.meta


def _same_frames(a: object, b: object) -> None:
    for table in ("kernels", "memops", "api", "nvtx", "marks", "gpus"):
        x, y = getattr(a, table), getattr(b, table)
        for col in x.columns:  # categories may be ordered differently: compare values
            left = x[col].astype(object) if x[col].dtype == "category" else x[col]
            right = y[col].astype(object) if y[col].dtype == "category" else y[col]
            pd.testing.assert_series_equal(left, right, check_dtype=False, obj=f"{table}.{col}")


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_reading_in_rowid_ranges_equals_one_scan(
    corpus_dir: Path, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlprof_lite.ingest import fetch, reader

    monkeypatch.setattr(reader, "READ_THREADS", 1)
    whole = read_export(path)
    monkeypatch.setattr(reader, "READ_THREADS", 3)  # odd split, 3 ranges per table
    monkeypatch.setattr(fetch.SplitFetcher, "MIN_ROWS_TO_SPLIT", 0)
    _same_frames(read_export(path), whole)


def test_split_read_joins_parts_whose_types_differ(tmp_path: Path) -> None:
    """Each part's column types come from its own rows: ints in one, text in the other."""
    pytest.importorskip("adbc_driver_sqlite")
    from concurrent.futures import ThreadPoolExecutor

    from dlprof_lite.ingest import fetch

    db = tmp_path / "mixed.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a, b INTEGER)")
        rows = [(i if i < 50 else f"x{i}", i) for i in range(100)]
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    split = fetch.SplitFetcher(db, ThreadPoolExecutor(2), parts=2)
    split.MIN_ROWS_TO_SPLIT = 0
    cols = split.columns("SELECT a, b FROM t")
    assert list(cols["b"]) == list(range(100))
    assert list(cols["a"]) == [r[0] for r in rows]


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_real_exports_need_no_repair(corpus_dir: Path, path: Path) -> None:
    """The checks for damaged and hostile files (ingest/sanitize.py, bad_input.py) never
    fire on a real export: no warning, nothing dropped, every duration >= 0."""
    raw = read_export(path)
    assert raw.meta.warnings == ()
    counts = query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = {r[0] for r in counts}
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        total = query(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
        assert len(raw.kernels) == total
    for frame in (raw.kernels, raw.memops, raw.api):
        assert (frame["dur_ns"] >= 0).all()
    closed = raw.nvtx["end_ns"].notna()
    assert (raw.nvtx["end_ns"][closed] >= raw.nvtx["start_ns"][closed]).all()
