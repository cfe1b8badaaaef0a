"""Untrusted and malformed exports (issue 13, items 4, 5 and 7): one class of bad input per
case, each made from a COPY of a real corpus export, read through ``dlprof-lite analyze`` and
through both readers (ADBC/Arrow and the standard library's sqlite3).

Every case ends in one of two ways: one ``dlprof-lite: error:`` line naming the table and
column, exit 2, never "unexpected" and never a traceback; or (names that are not UTF-8,
impossible rows) a finished report whose warnings count what was repaired. The input's
bytes never change. ``test_no_known_class_reaches_the_unexpected_fallback`` is the guard:
it fails if any class below escapes as anything but an InputError, in either reader.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlprof_lite.cli import main
from dlprof_lite.errors import InputError, OutputError
from dlprof_lite.ingest import fetch
from dlprof_lite.ingest.reader import UNNAMED_KERNEL, read_export

SOURCE = "MohanadOdema__DLProf__nsys_profile.nsys-rep.sqlite"  # 2022.4: every table we read
K = "CUPTI_ACTIVITY_KIND_KERNEL"
R = "CUPTI_ACTIVITY_KIND_RUNTIME"
READERS = ("arrow", "sqlite")

pytestmark = pytest.mark.corpus


def sql(*statements: str) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        finally:
            conn.close()

    return mutate


def unconstrained(table: str, *then: str) -> Callable[[Path], None]:
    """``table`` rebuilt without its NOT NULL/PRIMARY KEY constraints (a crafted file has
    none), then ``then`` run on it."""
    return sql(
        f"CREATE TABLE _copy AS SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE _copy RENAME TO {table}",
        *then,
    )


def last_row(table: str, column: str, value: str) -> Callable[[Path], None]:
    return unconstrained(
        table,
        f"UPDATE {table} SET {column} = {value} WHERE rowid = (SELECT MAX(rowid) FROM {table})",
    )


def scribble_pages(path: Path) -> None:
    """Random bytes over three pages in the middle of the file (seeded: the same each run)."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    rng = random.Random(13)
    middle = len(data) // page // 2
    for p in range(middle, middle + 3):
        data[p * page : (p + 1) * page] = rng.randbytes(page)
    path.write_bytes(bytes(data))


@dataclass(frozen=True)
class Case:
    mutate: Callable[[Path], None]
    expect: str  # regex the error line (or, for a warning case, a warning) must match
    error: bool = True


# One entry per class of bad input. Values where nsys writes an integer: the columns the
# issue names, each with NULL, a BLOB, text and a float.
CASES: dict[str, Case] = {
    "missing column": Case(
        sql(f"ALTER TABLE {K} RENAME COLUMN deviceId TO dev"), rf"{K} has no column deviceId"
    ),
    "renamed StringIds.value": Case(
        sql("ALTER TABLE StringIds RENAME COLUMN value TO val"), r"StringIds has no column value"
    ),
    "renamed runtime column": Case(
        sql(f"ALTER TABLE {R} RENAME COLUMN globalTid TO tid"), rf"{R} has no column globalTid"
    ),
    "malformed pages": Case(scribble_pages, r"corrupt|malformed"),
    "duplicated StringIds.id": Case(
        unconstrained("StringIds", "INSERT INTO StringIds SELECT * FROM StringIds LIMIT 3"),
        r"StringIds\.id \d+ appears more than once",
    ),
    "computed column": Case(
        unconstrained(
            "StringIds",
            "ALTER TABLE StringIds RENAME COLUMN value TO stored",
            "ALTER TABLE StringIds ADD COLUMN value TEXT "
            "GENERATED ALWAYS AS (printf('%.*c', 20000000, 'x')) VIRTUAL",
        ),
        r"StringIds\.value is a computed \(generated\) column",
    ),
    "virtual table": Case(
        sql(
            "DROP TABLE TARGET_INFO_GPU",
            "CREATE VIRTUAL TABLE TARGET_INFO_GPU USING rtree(id, x0, x1)",
        ),
        r"TARGET_INFO_GPU is a virtual table|no such module",
    ),
    "out-of-range id": Case(
        sql(f"UPDATE {K} SET demangledName = 999999999, shortName = 999999998 WHERE rowid = 3"),
        "no name",
        error=False,
    ),
    "NULL kernel name": Case(
        unconstrained(K, f"UPDATE {K} SET demangledName = NULL, shortName = NULL WHERE rowid = 3"),
        "no name",
        error=False,
    ),
    "not UTF-8 kernel name": Case(
        sql(
            f"UPDATE StringIds SET value = CAST(x'ff41fe' AS TEXT) "
            f"WHERE id IN (SELECT shortName FROM {K} LIMIT 1)"
        ),
        r"StringIds\.value are not valid UTF-8",
        error=False,
    ),
    "not UTF-8 range text": Case(
        sql(
            "UPDATE NVTX_EVENTS SET text = CAST(x'ff41fe' AS TEXT) WHERE rowid IN "
            "(SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL LIMIT 3)"
        ),
        r"NVTX_EVENTS\.text are not valid UTF-8",
        error=False,
    ),
    "BLOB range text": Case(
        sql(
            "UPDATE NVTX_EVENTS SET text = x'41ff42' WHERE rowid IN "
            "(SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL LIMIT 2)"
        ),
        r"^2 value\(s\) of NVTX_EVENTS\.text are BLOBs where nsys writes text",
        error=False,
    ),
    "stream id beyond 32 bits": Case(
        sql(f"UPDATE {K} SET streamId = 8589934592 WHERE rowid = 1"),
        r"streamId: an id outside 32 bits",
    ),
    "BLOB kernel name": Case(
        sql(
            f"UPDATE StringIds SET value = x'4142' WHERE id IN (SELECT shortName FROM {K} LIMIT 1)"
        ),
        r"^1 value\(s\) of StringIds\.value are BLOBs where nsys writes text",
        error=False,
    ),
    "negative memcpy bytes": Case(
        sql("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -4096 WHERE rowid = 2"),
        r"^1 of \d+ memcpys/memsets dropped as impossible \(1 have a negative byte count\)",
        error=False,
    ),
    "end before start": Case(
        sql(f"UPDATE {K} SET end = start - 1000000 WHERE rowid = 3"),
        r"1 of \d+ kernels dropped as impossible \(1 end before they start\)",
        error=False,
    ),
    "durations past 64 bits": Case(  # each call 2**54 ns, within the time limit; 279 calls
        sql(f"UPDATE {R} SET start = -9007199254740992, end = 9007199254740992"),
        r"CUDA API call times add up to 5\.\d+e\+18, past what 64-bit totals hold",
    ),
    "extreme timestamps": Case(
        sql(
            f"UPDATE {K} SET end = 9223372036854775807 WHERE rowid = 3",
            f"UPDATE {K} SET start = -9223372036854775808 WHERE rowid = 4",
            f"UPDATE {R} SET end = 9223372036854775807 WHERE rowid = 5",
        ),
        r"2 of \d+ kernels dropped as impossible \(2 have a time beyond",
        error=False,
    ),
}
INTEGER_COLUMNS = ((K, "start"), (K, "end"), (K, "deviceId"), (R, "globalTid"),
                   ("TARGET_INFO_GPU", "computeMajor"), ("NVTX_EVENTS", "start"))  # fmt: skip
NOT_INTEGERS = (("NULL", "NULL", "NULL"), ("BLOB", "x'0102'", "a BLOB"),
                ("text", "'abc'", "text"), ("float", "1.5", "a float"))  # fmt: skip
for _table, _column in INTEGER_COLUMNS:
    for _kind, _value, _word in NOT_INTEGERS:
        if _kind == "NULL" and _column in ("globalTid", "computeMajor"):
            continue  # NULL is legal there (no thread; an old export's unknown GPU)
        CASES[f"{_kind} in {_table}.{_column}"] = Case(
            last_row(_table, _column, _value), rf"{_table}\.{_column} holds {_word}"
        )
CASES["NULL in CUPTI_ACTIVITY_KIND_KERNEL.streamId"] = Case(
    last_row(K, "streamId", "NULL"), rf"{K}\.streamId holds NULL"
)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.fixture
def make(corpus_dir: Path, tmp_path: Path) -> Callable[..., Path]:
    """``make(name)``: a copy of the source export with case ``name`` applied (None: as is),
    alone in its own folder."""

    def build(name: str | None, tag: str = "in") -> Path:
        folder = tmp_path / tag
        folder.mkdir()
        path = folder / "x.sqlite"
        shutil.copy(corpus_dir / SOURCE, path)
        if name is not None:
            CASES[name].mutate(path)
        return path

    return build


def analyze(path: Path, reader: str, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    out = path.parent.parent / f"out-{reader}"
    before = digest(path.parent)
    code = main(["analyze", str(path), "-o", str(out), "--quiet"])
    assert digest(path.parent) == before, "the input folder changed"
    return code, capsys.readouterr().err


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_through_the_cli(
    name: str, reader: str, make, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    if reader == "arrow":
        pytest.importorskip("adbc_driver_sqlite")
    case = CASES[name]
    path = make(name)
    code, err = analyze(path, reader, monkeypatch, capsys)
    assert "Traceback" not in err and "unexpected" not in err, err
    if case.error:
        lines = err.strip().splitlines()
        assert code == 2, err
        assert len(lines) == 1 and lines[0].startswith("dlprof-lite: error: "), err
        assert "x.sqlite" in lines[0]
        assert re.search(case.expect, lines[0]), lines[0]
    else:
        assert code == 0, err
        summary = path.parent.parent / f"out-{reader}" / "summary.json"
        warnings = json.loads(summary.read_text())["warnings"]
        assert any(re.search(case.expect, w) for w in warnings), warnings


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_known_class_reaches_the_unexpected_fallback(
    name: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard: in each reader, a bad input is an InputError or a warning, nothing else."""
    path = make(name)
    for reader in READERS:
        monkeypatch.setenv("DLPROF_LITE_READER", reader)
        try:
            raw = read_export(path)
        except InputError:
            assert CASES[name].error, f"{name}: {reader} refused a file it should repair"
            continue
        assert not CASES[name].error, f"{name}: {reader} read it without an error"
        assert raw.meta.warnings, f"{name}: {reader} repaired it without a warning"
        for frame in (raw.kernels, raw.memops, raw.api):
            assert (frame["dur_ns"] >= 0).all()


@pytest.mark.parametrize("reader", READERS)
def test_repairs_are_counted_and_leave_sane_rows(
    reader: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    clean = read_export(make(None, "clean"))
    raw = read_export(make("extreme timestamps"))
    assert len(raw.kernels) == len(clean.kernels) - 2
    assert len(raw.api) == len(clean.api) - 1
    assert any(w.startswith("1 of") and "CUDA API calls" in w for w in raw.meta.warnings)
    # The recorded session span is kept: the dropped rows do not widen it.
    assert (raw.meta.session_start_ns, raw.meta.session_end_ns) == (
        clean.meta.session_start_ns, clean.meta.session_end_ns)  # fmt: skip


@pytest.mark.parametrize("reader", READERS)
def test_unnamed_kernels_get_a_name_and_a_warning(
    reader: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    raw = read_export(make("out-of-range id"))
    assert (raw.kernels["name"] == UNNAMED_KERNEL).sum() == 1
    assert (raw.kernels["short_name"] == UNNAMED_KERNEL).sum() == 1
    assert any(w.startswith("1 kernel(s) have no name") for w in raw.meta.warnings)


@pytest.mark.parametrize("reader", READERS)
def test_text_that_is_not_utf8_is_replaced(
    reader: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    raw = read_export(make("not UTF-8 range text"))
    names = set(raw.nvtx["name"].astype(str))
    assert "\ufffdA\ufffd" in names
    assert any("3 value(s) of NVTX_EVENTS.text" in w for w in raw.meta.warnings)


@pytest.mark.parametrize("reader", READERS)
def test_result_cap_hit_is_an_input_error(
    reader: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory cap: a result past the budget stops the read (here a budget of 4 kB)."""
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    monkeypatch.setattr(fetch, "MIN_RESULT_BYTES", 4096)
    monkeypatch.setattr(fetch, "RESULT_BYTES_PER_FILE_BYTE", 0)
    with pytest.raises(InputError, match=r"hit a read limit .*larger than 0 MiB"):
        read_export(make(None))


@pytest.mark.parametrize("reader", READERS)
def test_wal_mode_input_in_a_read_only_folder(
    reader: str, make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """immutable=1: no -wal/-shm file appears, and a folder we cannot write to is fine."""
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    path = make(None)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.close()
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.sqlite"]
    before = digest(path.parent)
    path.parent.chmod(0o555)
    try:
        assert len(read_export(path).kernels) > 0
    finally:
        path.parent.chmod(0o755)
    assert digest(path.parent) == before  # no -wal, -shm or -journal, same bytes


def test_sqlite_limits_refuse_a_huge_value(tmp_path: Path) -> None:
    """The stdlib connection's length limit: a 40 MiB value is refused by SQLite itself."""
    path = tmp_path / "x.sqlite"
    sqlite3.connect(path).close()
    conn = fetch.connect_readonly(path)
    try:
        with pytest.raises(sqlite3.DataError, match="too big"):
            conn.execute("SELECT length(replace(printf('%.*c', 20e6, 'x'), 'x', 'yy'))").fetchone()
        # printf itself stops at the limit (NULL instead of a 40 MB string)
        assert conn.execute("SELECT printf('%.*c', 40e6, 'x')").fetchone()[0] is None
        assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
    finally:
        conn.close()


def test_one_bad_export_as_a_real_process(make) -> None:
    """The installed command: one line on stderr, exit 2, no traceback."""
    path = make("NULL in CUPTI_ACTIVITY_KIND_KERNEL.start")
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", str(path), "-o",
         str(path.parent.parent / "out"), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dlprof-lite: error: ")
    assert "CUPTI_ACTIVITY_KIND_KERNEL.start holds NULL" in done.stderr


def test_a_type_change_between_arrow_batches_names_the_value(
    make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADBC types a column from its first batch and fails on a later batch that differs
    ("Type mismatch in column N"): the error still names the table, column and row."""
    pytest.importorskip("adbc_driver_sqlite")
    monkeypatch.setenv("DLPROF_LITE_READER", "arrow")
    monkeypatch.setattr(fetch.ArrowFetcher, "BATCH_ROWS", 4)
    with pytest.raises(InputError, match=rf"{K}\.end holds text 'abc' \(rowid \d+\)"):
        read_export(make("text in CUPTI_ACTIVITY_KIND_KERNEL.end"))


@pytest.mark.parametrize(
    "message",
    [
        "database or disk is full",  # sqlite3
        "IO: [SQLite] Failed to step query: database or disk is full",  # ADBC
    ],
)
def test_full_disk_while_reading_is_an_input_error(message: str) -> None:
    """SQLite's temporary files filling the disk (not reproducible on demand): the real
    exception classes with the drivers' own wording map to the same one line."""
    from dlprof_lite.ingest.bad_input import translate

    error = translate(Path("x.sqlite"), sqlite3.OperationalError(message), "SELECT a FROM T")
    assert str(error).startswith("x.sqlite: no disk space to read it while reading T")
    assert "SQLITE_TMPDIR" in str(error)


@pytest.mark.parametrize(
    "code, hint",
    [(errno.ENOSPC, "free some space"), (errno.EFBIG, "ulimit -f"), (errno.EROFS, "read-only")],
)
def test_output_error_for_a_failed_write(code: int, hint: str) -> None:
    error = OutputError.from_os_error(OSError(code, os.strerror(code)), "/r/x.dlprof")
    assert str(error).startswith(f"cannot write the report in /r/x.dlprof: {os.strerror(code)}")
    assert hint in str(error)
    assert error.exit_code == 2


def test_file_size_limit_while_writing_the_report(make) -> None:
    """A file-size limit (ulimit -f) hit by the report writer: one line, exit 2."""
    path = make(None)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", str(path), "-o",
         str(path.parent.parent / "out"), "--quiet"],
        capture_output=True, text=True, timeout=120, preexec_fn=limit,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("dlprof-lite: error: cannot write the report"), done.stderr
    assert "ulimit -f" in done.stderr and done.stderr.count("\n") == 1


def test_adbc_connections_are_hardened(tmp_path: Path) -> None:
    """ADBC's own SQLite: trusted_schema off and the heap limit that bounds any one value
    (a value past it fails as 'out of memory', which reads as a read-limit error)."""
    pytest.importorskip("adbc_driver_sqlite")
    path = tmp_path / "x.sqlite"
    sqlite3.connect(path).close()
    with fetch.open_fetcher(path, prefer_arrow=True) as reader:
        assert isinstance(reader, fetch.ArrowFetcher)
        assert list(reader.columns("PRAGMA trusted_schema")["trusted_schema"]) == [0]
        limit = reader.columns("PRAGMA hard_heap_limit")["hard_heap_limit"]
        assert 0 < int(limit[0]) <= fetch.ADBC_HEAP_LIMIT


@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if not case.error))
def test_both_readers_repair_alike(name: str, make, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same repairs, the same warnings (counts too), whichever driver read the file."""
    pytest.importorskip("adbc_driver_sqlite")
    path = make(name)
    got = {}
    for reader in READERS:
        monkeypatch.setenv("DLPROF_LITE_READER", reader)
        raw = read_export(path)
        got[reader] = (raw.meta.warnings, len(raw.kernels), len(raw.api), len(raw.nvtx))
    assert got["arrow"] == got["sqlite"]
