"""Fuzzing the analysis with mutated real exports: a clear error or sane tables, never worse.

A seeded mutator changes a copy of a real corpus export the ways broken or hostile files
differ from good ones: rows deleted or duplicated; NULL, negative, huge, text, BLOB and float
cells; tables dropped; columns renamed; start and end swapped; a table replaced by a view
that builds huge strings; non-UTF-8 names; random pages overwritten; the file truncated.
Each mutant goes through the command line (``dlprof-lite analyze``, in-process) with a time
limit, and must satisfy the property:

- exit 0 and a report whose every duration (``*_ns``, not the ``*start_ns``/``*end_ns``
  timestamps) is >= 0, every share (``*_share``, ``*utilization``) within 0-1 and every
  percentage (``*_pct``) within 0-100; or
- exit 2 and exactly one ``dlprof-lite: error:`` line, no "unexpected" fallback, no
  traceback, and no report folder;
- never a hang, and the input's folder (its bytes, and no ``-wal``/``-shm`` beside it)
  unchanged.

Seeds are fixed, so a failure names a mutant that reproduces (``MUTANT=<export>:<seed>``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import random
import shutil
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from conftest import CORPUS
from dlprof_lite.render.read_schema import SIGNED

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

# Small real exports of different nsys versions and shapes (kernels, NVTX, memcpy, GPUs).
BASES = (
    "quasiben__nvtx-examples__cupy.sqlite",
    "amir-ghz__DynamicViT__nsys_profile.sqlite",
    "MohanadOdema__DLProf__nsys_profile.sqlite",
)
SEEDS_PER_CHUNK = 20
CHUNKS = 4  # 3 bases x 4 chunks x 20 seeds = 240 mutants, each through both readers
TIME_LIMIT_S = 60
VALUES: tuple[object, ...] = (None, -1, -(2**62), 2**62, 2**63 - 1, "text", b"\x00\xff", 3.5)


# --- the mutator ---------------------------------------------------------------------------


def _tables(db: sqlite3.Connection) -> list[str]:
    rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in rows if not name.startswith("sqlite_"))


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]


def _interesting(db: sqlite3.Connection, rng: random.Random) -> str:
    """A table the reader uses, most of the time; any table otherwise."""
    tables = _tables(db)
    used = [
        t
        for t in tables
        if t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "StringIds", "TARGET_INFO"))
    ]
    return rng.choice(used if used and rng.random() < 0.9 else tables)


def _sql_mutation(db: sqlite3.Connection, rng: random.Random) -> str:
    table = _interesting(db, rng)
    columns = _columns(db, table)
    column = rng.choice(columns) if columns else "rowid"
    k = rng.randint(2, 7)
    kind = rng.choice(
        ["delete", "duplicate", "cell", "cell", "cell", "drop", "rename", "swap", "bomb", "utf8"]
    )
    if kind == "delete":
        db.execute(f'DELETE FROM "{table}" WHERE rowid % {k} = 0')
    elif kind == "duplicate":
        try:
            db.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE rowid % {k} = 0')
        except sqlite3.IntegrityError:  # a primary key: duplicate it under a new key instead
            kind = "cell"
    if kind == "cell":
        value = rng.choice(VALUES)
        db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid % {k} = 0', (value,))
        return f"{table}.{column} = {value!r} on every {k}-th row"
    if kind == "drop":
        db.execute(f'DROP TABLE "{table}"')
        return f"drop {table}"
    if kind == "rename":
        db.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{column}" TO "{column}_x"')
        return f"rename {table}.{column}"
    if kind == "swap":
        if {"start", "end"} <= set(columns):
            db.execute(f'UPDATE "{table}" SET start = "end", "end" = start WHERE rowid % {k} = 0')
            return f"swap start/end in {table}"
        kind = "bomb"
    if kind == "bomb":
        # A view in place of the string table: each name a 20 MB string built on read.
        if "StringIds" in _tables(db):
            db.execute("ALTER TABLE StringIds RENAME TO StringIds_real")
            db.execute(
                "CREATE VIEW StringIds AS SELECT id, printf('%.*c', 20000000, 'x') AS value "
                "FROM StringIds_real"
            )
            return "StringIds replaced by a view of 20 MB strings"
        kind = "utf8"
    if kind == "utf8":
        if "StringIds" in _tables(db) and "value" in _columns(db, "StringIds"):
            db.execute(
                f"UPDATE StringIds SET value = CAST(x'ff41fe' || CAST(value AS BLOB) AS TEXT) "
                f"WHERE id % {k} = 0"
            )
            return "non-UTF-8 bytes in StringIds names"
        return "(no StringIds to spoil)"
    return f"{kind} every {k}-th row of {table}"


def _byte_mutation(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5:
        cut = rng.randint(0, len(data) - 1)
        path.write_bytes(bytes(data[:cut]))
        return f"truncated to {cut} bytes"
    page = int.from_bytes(data[16:18], "big") or 65536
    pages = max(1, len(data) // page)
    which = rng.randrange(pages)
    offset = which * page + rng.randrange(page)
    size = min(rng.randint(1, 512), len(data) - offset)
    data[offset : offset + size] = bytes(rng.getrandbits(8) for _ in range(size))
    path.write_bytes(bytes(data))
    return f"{size} random bytes at offset {offset} (page {which})"


def mutate(base: Path, target: Path, seed: int) -> str:
    """Write a mutant of ``base`` at ``target``; its description."""
    rng = random.Random(f"{base.name}:{seed}")
    shutil.copyfile(base, target)
    if rng.random() < 0.2:
        return _byte_mutation(target, rng)
    done = []
    with contextlib.closing(sqlite3.connect(target)) as db:
        for _ in range(rng.choice((1, 1, 2, 3))):
            try:
                done.append(_sql_mutation(db, rng))
            except sqlite3.Error as err:  # a mutation SQLite refuses: try another
                done.append(f"(refused: {err})")
        db.commit()
    return "; ".join(done)


# --- the property ---------------------------------------------------------------------------


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(args: list[str]) -> tuple[int, str]:
    from dlprof_lite.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    return code, err.getvalue()


def folder_state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def insane(frame: pd.DataFrame, where: str) -> list[str]:
    """Durations below 0, shares outside 0-1, percentages outside 0-100 in ``frame``."""
    found = []
    for column in frame.columns:
        values = pd.to_numeric(frame[column], errors="coerce").dropna()
        if values.empty or not pd.api.types.is_numeric_dtype(values):
            continue
        low, high = float(values.min()), float(values.max())
        bad = not (math.isfinite(low) and math.isfinite(high))
        if column.endswith(("start_ns", "end_ns")):
            continue  # timestamps on the session clock: real exports have negative ones
        if column in SIGNED:
            continue  # below 0 by definition (a straggler faster there, an id for "none")
        if column.endswith("_ns"):
            bad = bad or low < 0
        elif column.endswith(("_share", "utilization")):
            bad = bad or low < 0 or high > 1 + 1e-9
        elif column.endswith("_pct"):
            bad = bad or low < 0 or high > 100 + 1e-6
        else:
            continue
        if bad:
            found.append(f"{where}.{column} in [{low}, {high}]")
    return found


def check(base: Path, seed: int, tmp: Path) -> list[str]:
    """The property on one mutant: the problems found (empty: it holds)."""
    inputs = tmp / f"in{seed}"
    inputs.mkdir()
    mutant = inputs / "mutant.sqlite"
    what = mutate(base, mutant, seed)
    before = folder_state(inputs)
    out = tmp / f"out{seed}"
    label = f"MUTANT={base.name}:{seed} ({what})"
    try:
        with time_limit(TIME_LIMIT_S):
            code, err = run_cli(["analyze", str(mutant), "-o", str(out), "--quiet"])
    except TimeoutError as hang:
        return [f"{label}: hang: {hang}"]
    problems = []
    if folder_state(inputs) != before:
        problems.append("the input folder changed")
    errors = [line for line in err.splitlines() if line.startswith("dlprof-lite: error:")]
    if "Traceback" in err:
        problems.append("a traceback")
    if code == 0:
        from dlprof_lite import open_report

        report = open_report(out)
        row = pd.DataFrame([report.summary.row()])
        problems += insane(row, "summary")
        for name in ("kernels", "ranges", "layers", "iterations"):
            problems += insane(report.table(name), name)
    elif code == 2:
        if len(errors) != 1 or "unexpected" in errors[0]:
            problems.append(f"error lines {errors!r}")
        if out.exists():
            problems.append("a report folder after an error")
    else:
        problems.append(f"exit {code}: {err.strip()[-300:]!r}")
    return [f"{label}: {p}" for p in problems]


@pytest.mark.parametrize("reader", ["arrow", "sqlite"])
@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("base", BASES)
def test_mutated_exports_fail_clearly_or_give_sane_tables(
    base: str, chunk: int, reader: str, tmp_path: Path, corpus_dir: Path, monkeypatch: Any
) -> None:
    """Each mutant through both readers (the default Arrow one and the stdlib one)."""
    monkeypatch.setenv("DLPROF_LITE_READER", reader)
    path = corpus_dir / base
    assert path.is_file(), f"corpus export {base} is missing"
    problems: list[str] = []
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        problems += check(path, seed, tmp_path)
    assert not problems, "\n".join(problems)


def test_the_mutator_is_seeded_and_varied(tmp_path: Path, corpus_dir: Path) -> None:
    """Same seed, same mutant; the seeds cover every kind of mutation."""
    base = corpus_dir / BASES[0]
    one, two = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    kinds: set[str] = set()
    for seed in range(CHUNKS * SEEDS_PER_CHUNK):
        what = mutate(base, one, seed)
        if seed < 5:
            assert mutate(base, two, seed) == what and one.read_bytes() == two.read_bytes()
        kinds.add(_kind(what))
    assert kinds >= {"cell", "drop", "rename", "truncate", "bytes", "delete", "bomb", "utf8"}


def _kind(what: str) -> str:
    rules: tuple[tuple[str, Callable[[str], bool]], ...] = (
        ("truncate", lambda w: w.startswith("truncated")),
        ("bytes", lambda w: "random bytes" in w),
        ("drop", lambda w: w.startswith("drop")),
        ("rename", lambda w: w.startswith("rename")),
        ("bomb", lambda w: "20 MB" in w),
        ("utf8", lambda w: "UTF-8" in w),
        ("delete", lambda w: w.startswith("delete")),
        ("cell", lambda w: " = " in w),
    )
    return next((kind for kind, test in rules if test(what)), "other")


def test_corpus_is_there(corpus_dir: Path) -> None:
    """The fuzz test needs its real bases (CI fails rather than skips without them)."""
    assert all((CORPUS / base).is_file() for base in BASES)


def test_every_real_export_has_sane_durations_and_shares(corpus_dir: Path) -> None:
    """The same property on every unmodified corpus export, over the analysed window and the
    whole run (real files once gave a per-iteration launch overhead of 1435 %)."""
    from dlprof_lite import analyze

    problems = []
    for path in sorted(corpus_dir.glob("*.sqlite")):
        for whole in (False, True):
            report = analyze(path, all_iterations=whole)
            where = f"{path.name}{' (whole run)' if whole else ''}"
            problems += insane(pd.DataFrame([report.summary.row()]), f"{where}: summary")
            for name in ("kernels", "ranges", "layers", "iterations"):
                problems += insane(report.table(name), f"{where}: {name}")
    assert not problems, "\n".join(problems)
