"""Damaged and hostile run stores (issue 40): no SQL of theirs runs, no password is shown,
reading commands write nothing, and every bad value is one error line.

A store is recorded by dlprof-lite (two runs of the hand-built example profile), then changed
with SQL the way the issue's hostile sender did. Oracles: the store's bytes (unchanged after
every command, whatever it was), the absence of what a trigger would have written, wall
time (a view over an endless recursive query must not hang), and the output's text (no
password in any form, no raw escape sequence).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from dlprof_lite.cli import main
from dlprof_lite.store import engine as store_engine
from dlprof_lite.store.database import RunStore, StoreError
from dlprof_lite.store.engine import masked, parse_url, secrets
from make_profile import make_profile
from postgres_server import pg_url, postgres  # noqa: F401
from test_store import synthetic_record

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("recorded") / "runs.db"
    with RunStore(f"sqlite:///{path}") as store:
        store.record(synthetic_record(tag="a"))
        store.record(synthetic_record(tag="b"))
    return path


@pytest.fixture
def store(recorded: Path, tmp_path: Path) -> Path:
    path = tmp_path / "store" / "runs.db"
    path.parent.mkdir()
    path.write_bytes(recorded.read_bytes())
    return path


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "p.sqlite"
    make_profile(path, iterations=6, layers=2, kernels_per_layer=1, seed=1)
    return path


def sql(path: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        for statement in statements:
            db.execute(statement)
        db.commit()


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def one_line(code: int, err: str, *needles: str) -> str:
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith("dlprof-lite: error: ") and "unexpected" not in lines[0], err
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


READERS: tuple[tuple[str, ...], ...] = (
    ("runs", "list"), ("runs", "show", "1"), ("runs", "export", "-"), ("compare", "1", "2"),
    ("runs", "rm", "1"),
)  # fmt: skip


def every_reader_refuses(path: Path, tmp_path: Path, *needles: str) -> None:
    """Each command, each within seconds, one line; the store's folder unchanged."""
    before = digest(path.parent)
    for args in READERS:
        extra = ["-o", str(tmp_path / "cmp"), "--quiet"] if args[0] == "compare" else []
        started = time.monotonic()
        code, _, err = cli(*args, "--db", f"sqlite:///{path}", *extra)
        assert time.monotonic() - started < 20, args
        one_line(code, err, *needles)
        assert digest(path.parent) == before, args


# --- SQL of the store's own -----------------------------------------------------------------

HOSTILE_SQL: dict[str, tuple[tuple[str, ...], str]] = {
    "a trigger emptying the store on delete": ((
        "CREATE TRIGGER wipe AFTER DELETE ON runs BEGIN DELETE FROM runs; END",), "trigger 'wipe'"),
    "a trigger rewriting every run on insert": ((
        "CREATE TRIGGER tag AFTER INSERT ON runs BEGIN UPDATE runs SET tag = 'owned'; END",),
        "trigger 'tag'"),
    "runs as an endless view": ((
        "ALTER TABLE runs RENAME TO runs_real", f"CREATE VIEW runs AS {ENDLESS}"),
        "view 'runs'"),
    "the version table as an endless view": ((
        "DROP TABLE dlprof_lite_version",
        f"CREATE VIEW dlprof_lite_version AS SELECT printf('%d', x) AS version_num "
        f"FROM ({ENDLESS})"), "view 'dlprof_lite_version'"),
    "a table of someone else's": (("CREATE TABLE canary (x)",), "table 'canary'"),
    "an index on an expression": (("CREATE INDEX ix_expr ON runs (length(tag))",),
                                  "index 'ix_expr'"),
    "a generated column": ((
        "ALTER TABLE run_phases ADD COLUMN g TEXT GENERATED ALWAYS AS (upper(phase)) VIRTUAL",),
        "computed column"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE_SQL))
def test_sql_of_the_store_never_runs(case: str, store: Path, tmp_path: Path) -> None:
    statements, needle = HOSTILE_SQL[case]
    sql(store, *statements)
    every_reader_refuses(store, tmp_path, "dlprof-lite did not make", needle)


def test_a_delete_trigger_leaves_every_run(store: Path, tmp_path: Path) -> None:
    """The issue's case: ``runs rm 1`` on a store with an AFTER DELETE trigger said
    "removed 1 run(s)" and every run was gone."""
    sql(store, "CREATE TRIGGER wipe AFTER DELETE ON runs BEGIN DELETE FROM runs; END")
    one_line(*cli("runs", "rm", "1", "--db", f"sqlite:///{store}")[::2], "trigger 'wipe'")
    with contextlib.closing(sqlite3.connect(store)) as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_recording_into_a_store_with_an_insert_trigger(
    store: Path, export: Path, tmp_path: Path
) -> None:
    """The report is written, the run is not recorded (one warning), the trigger never
    fires (the tags stay as they were)."""
    sql(store, "CREATE TRIGGER tag AFTER INSERT ON runs BEGIN UPDATE runs SET tag = 'owned'; END")
    before = digest(store.parent)
    code, _, err = cli("analyze", str(export), "-o", str(tmp_path / "r"), "--quiet",
                       "--db", f"sqlite:///{store}")  # fmt: skip
    assert code == 0 and (tmp_path / "r" / "summary.json").is_file()
    warnings = [line for line in err.splitlines() if "run store" in line]
    assert len(warnings) == 1 and "trigger 'tag'" in warnings[0], err
    assert digest(store.parent) == before


def test_a_statement_past_its_time_limit_is_stopped(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_engine, "STATEMENT_TIMEOUT_S", 0.5)
    with RunStore(f"sqlite:///{store}", read_only=True) as opened:
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"ran past the 0\.5 s limit"), opened._errors(), \
                opened.engine.connect() as connection:  # fmt: skip
            connection.exec_driver_sql(ENDLESS.replace("SELECT x FROM c", "SELECT count(*) FROM c"))
        assert time.monotonic() - started < 10


# --- reading writes nothing ------------------------------------------------------------------


def test_a_missing_store_is_never_created(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'none' / 'runs.db'}"
    for args in (("runs", "list"), ("runs", "show", "1"), ("runs", "rm", "1"),
                 ("compare", "1", "2", "-o", str(tmp_path / "c"))):  # fmt: skip
        one_line(*cli(*args, "--db", db)[::2], "no run database at")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_store_gets_no_schema(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.touch()
    for args in (("runs", "list"), ("runs", "show", "1"), ("runs", "export", "-")):
        one_line(*cli(*args, "--db", f"sqlite:///{path}")[::2], "holds no runs yet")
    assert path.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_reading_a_store_changes_no_byte(store: Path, tmp_path: Path) -> None:
    before = digest(store.parent)
    for args in (("runs", "list"), ("runs", "show", "2"), ("runs", "--json"),
                 ("runs", "export", "-")):  # fmt: skip
        assert cli(*args, "--db", f"sqlite:///{store}")[0] == 0, args
    code, _, err = cli("compare", "1", "2", "--db", f"sqlite:///{store}", "-o",
                       str(tmp_path / "c"), "--quiet")  # fmt: skip
    assert code == 0, err
    assert digest(store.parent) == before


# --- values the store gives back ------------------------------------------------------------

BAD_VALUES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "a created_at that is not a time": (
        "UPDATE runs SET created_at = 'yesterday' WHERE id = 1",
        ("runs", "list"), ("run 1", "created_at")),
    "text in steps": ("UPDATE runs SET steps = 'many' WHERE id = 2", ("runs", "list"),
                      ("run 2", "steps")),
    "an infinite median": ("UPDATE runs SET step_median_ns = 9e999 WHERE id = 1",
                           ("runs", "list"), ("run 1", "step_median_ns")),
    "a command that is not a list": ("UPDATE runs SET command = '{\"a\": 1}' WHERE id = 1",
                                     ("runs", "list"), ("run 1", "command")),
    "a summary field of the wrong type": (
        "UPDATE runs SET summary = json_set(summary, '$.kernel_ns', 'x') WHERE id = 1",
        ("runs", "show", "1"), ("run 1", "summary", "kernel_ns")),
    "an unknown summary field": (
        "UPDATE runs SET summary = json_set(summary, '$.surprise', 1) WHERE id = 1",
        ("compare", "1", "2"), ("run 1", "summary", "'surprise'")),
    "a negative step time in a row": (
        "UPDATE run_iterations SET data = json_set(data, '$.wall_ns', -500000000000) "
        "WHERE run_id = 2", ("compare", "1", "2"), ("run 2", "iterations", "wall_ns",
                                                    "below 0")),
    "a row with an extra cell": (
        "UPDATE run_layers SET data = json_set(data, '$.extra', 1) WHERE run_id = 1",
        ("runs", "show", "1"), ("run 1", "layers", "cells")),
    "200k dtype entries": (
        "UPDATE runs SET tables = json_set(tables, '$.layers.columns', json((SELECT "
        "json_group_array(json_array('c' || value, 'float64')) FROM generate_series(1, 200000))))"
        " WHERE id = 1", ("compare", "1", "2"), ("run 1", "tables", "layers")),
    "100k-deep JSON in a row": (
        "UPDATE run_kernels SET data = printf('%.*c', 100000, '[') || printf('%.*c', 100000, ']')"
        " WHERE run_id = 1", ("runs", "show", "1"), ("run 1", "kernels", "nested deeper")),
    "Infinity in an integer column": (
        "UPDATE run_iterations SET data = replace(data, '\"kernels\": 4', '\"kernels\": "
        "Infinity') WHERE run_id = 1", ("runs", "show", "1"), ("run 1", "iterations")),
    "a NULL revision": (
        "DROP TABLE dlprof_lite_version; CREATE TABLE dlprof_lite_version (version_num TEXT);"
        " INSERT INTO dlprof_lite_version VALUES (NULL)", ("runs", "list"),
        ("schema version table",)),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_bad_stored_value_is_one_line(case: str, store: Path, tmp_path: Path) -> None:
    statement, args, needles = BAD_VALUES[case]
    if "generate_series" in statement:
        statement = statement.replace("generate_series(1, 200000)",
                                      "(WITH RECURSIVE s(value) AS (SELECT 1 UNION ALL SELECT "
                                      "value + 1 FROM s WHERE value < 200000) SELECT value "
                                      "FROM s)")  # fmt: skip
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.executescript(statement)
        db.commit()
        if "replace(data" in statement:
            assert db.execute("SELECT count(*) FROM run_iterations WHERE data LIKE "
                              "'%Infinity%'").fetchone()[0] > 0  # fmt: skip
    before = digest(store.parent)
    extra = ["-o", str(tmp_path / "c"), "--quiet"] if args[0] == "compare" else []
    started = time.monotonic()
    code, _, err = cli(*args, "--db", f"sqlite:///{store}", *extra)
    assert time.monotonic() - started < 20
    one_line(code, err, *needles)
    assert digest(store.parent) == before


def test_a_null_revision_costs_recording_one_warning(
    store: Path, export: Path, tmp_path: Path
) -> None:
    with contextlib.closing(sqlite3.connect(store)) as db:
        db.executescript("DROP TABLE dlprof_lite_version; CREATE TABLE dlprof_lite_version "
                         "(version_num TEXT); "
                         "INSERT INTO dlprof_lite_version VALUES (NULL)")  # fmt: skip
    code, _, err = cli("analyze", str(export), "-o", str(tmp_path / "r"), "--quiet",
                       "--db", f"sqlite:///{store}")  # fmt: skip
    assert code == 0 and "run not recorded" in err and "Traceback" not in err


def test_a_200_mb_stored_string_is_bounded(store: Path) -> None:
    sql(store, "UPDATE runs SET summary = json_set(summary, '$.source', "
               "printf('%.*c', 200000000, 'x')) WHERE id = 1")  # fmt: skip
    started = time.monotonic()
    one_line(*cli("runs", "show", "1", "--db", f"sqlite:///{store}")[::2], "run database")
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("run_id", [str(2**63), str(2**64 + 5), "9" * 30])
def test_run_ids_above_2_63(run_id: str, store: Path, tmp_path: Path) -> None:
    for args in (("runs", "show", run_id), ("runs", "rm", run_id),
                 ("compare", run_id, "1", "-o", str(tmp_path / "c"))):  # fmt: skip
        one_line(*cli(*args, "--db", f"sqlite:///{store}")[::2], f"no run {run_id}")


def test_runs_rm_of_a_missing_run_is_one_line(store: Path) -> None:
    before = digest(store.parent)
    one_line(*cli("runs", "rm", "999", "--db", f"sqlite:///{store}")[::2],
             "no run 999", "nothing removed")  # fmt: skip
    assert digest(store.parent) == before


@pytest.mark.parametrize("columns", ["400", "40"])  # a table; stacked on a narrow terminal
def test_stored_tags_reach_the_terminal_as_text(
    columns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    path = tmp_path / "runs.db"
    tag = "\x1b]0;owned\x07[red]x[/red]\x1b[2J"
    with RunStore(f"sqlite:///{path}") as opened:
        opened.record(synthetic_record(tag=tag, script="\x1b[31mtrain.py"))
    code, out, err = cli("runs", "list", "--db", f"sqlite:///{path}")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07[red]x[/red]\\x1b[2J" in out and "\\x1b[31mtrain.py" in out
    code, out, _ = cli("runs", "--json", "--db", f"sqlite:///{path}")
    assert "\x1b" not in out and json.loads(out)[0]["tag"] == tag


# --- passwords ------------------------------------------------------------------------------

SECRET_URLS = {
    "userinfo": ("postgresql://me:s3cr3tpw@127.0.0.1:9/runs", ("s3cr3tpw",)),
    "query string": ("postgresql://me@127.0.0.1:9/runs?password=s3cr3tpw", ("s3cr3tpw",)),
    "unencoded @": ("postgresql://me:s3c@r3tpw@127.0.0.1:9/runs", ("s3c@r3tpw", "r3tpw", "s3c")),
    "encoded @": ("postgresql://me:s3c%40r3tpw@127.0.0.1:9/runs", ("s3c@r3tpw", "r3tpw")),
    "sslpassword": ("postgresql://me@127.0.0.1:9/runs?sslpassword=s3cr3tpw&sslmode=disable",
                    ("s3cr3tpw",)),
}


@pytest.mark.parametrize("form", sorted(SECRET_URLS))
def test_passwords_are_never_shown(form: str, export: Path, tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    url, hidden = SECRET_URLS[form]
    parsed = parse_url(url)
    assert parsed.host == "127.0.0.1"  # the password's "@" stays in the password
    shown = [masked(parsed), masked(url), repr(parsed.render_as_string(hide_password=True))]
    outputs = [
        cli("runs", "list", "--db", url),
        cli("runs", "show", "1", "--db", url),
        cli("compare", "1", "2", "--db", url, "-o", str(tmp_path / "c")),
        cli("analyze", str(export), "-o", str(tmp_path / "r"), "--quiet", "--db", url),
    ]
    assert outputs[-1][0] == 0 and "run not recorded" in outputs[-1][2]
    for code, _, err in outputs[:-1]:
        one_line(code, err, "127.0.0.1")
    for text in [*shown[:2], *(o + e for _, o, e in outputs)]:
        for secret in hidden:
            assert secret not in text, (form, text)
    assert set(secrets(parsed)) >= {hidden[0]}


def test_a_driver_message_repeating_the_password_is_scrubbed() -> None:
    parsed = parse_url("postgresql://me:pw%2Fx@h/db?password=other")
    with pytest.raises(StoreError) as caught, store_engine.translated("h/db", secrets(parsed)):
        raise sa.exc.OperationalError("connect", {}, Exception("bad pw/x or pw%2Fx, other"))
    assert "pw/x" not in str(caught.value) and "other" not in str(caught.value)


# --- PostgreSQL -------------------------------------------------------------------------------

PG_HOSTILE: dict[str, tuple[str, str]] = {
    "a trigger": ("CREATE FUNCTION wipe() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN DELETE FROM run_phases; RETURN NULL; END $$; "
                  "CREATE TRIGGER wipe AFTER DELETE ON runs FOR EACH ROW EXECUTE FUNCTION wipe()",
                  "trigger on 'runs'"),
    "a rule": ("CREATE RULE keep AS ON DELETE TO runs DO INSTEAD NOTHING", "rule on 'runs'"),
    "a view": ("ALTER TABLE runs RENAME TO runs_real; "
               "CREATE VIEW runs AS SELECT * FROM runs_real", "view named 'runs'"),
    "a column default": ("ALTER TABLE runs ALTER COLUMN tag SET DEFAULT md5('x')",
                         "column default on 'runs'"),
    "row-level security": ("ALTER TABLE run_layers ENABLE ROW LEVEL SECURITY",
                           "row-level security on 'run_layers'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PG_HOSTILE))
def test_postgres_sql_of_the_store_never_runs(case: str, pg_url: str) -> None:  # noqa: F811
    with RunStore(pg_url) as opened:
        opened.record(synthetic_record(tag="a"))
    statement, needle = PG_HOSTILE[case]
    engine = sa.create_engine(parse_url(pg_url))
    with engine.begin() as connection:
        connection.exec_driver_sql(statement)
    code, _, err = cli("runs", "rm", "1", "--db", pg_url)
    one_line(code, err, needle, "dlprof-lite did not make")
    one_line(*cli("runs", "list", "--db", pg_url)[::2], needle)
    with engine.connect() as connection:
        table = "runs_real" if case == "a view" else "runs"
        assert connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 1
    engine.dispose()


def test_postgres_statements_have_a_time_limit(
    pg_url: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setattr(store_engine, "STATEMENT_TIMEOUT_S", 0.5)
    with RunStore(pg_url) as opened, pytest.raises(StoreError, match="ran past"), \
            opened._errors(), opened.engine.connect() as connection:  # fmt: skip
        connection.exec_driver_sql("SELECT pg_sleep(5)")


def test_postgres_reads_are_read_only(pg_url: str) -> None:  # noqa: F811
    with RunStore(pg_url) as opened:
        opened.record(synthetic_record(tag="a"))
    with RunStore(pg_url, create=False, read_only=True) as opened:
        assert [i.tag for i in opened.find()] == ["a"]
        with pytest.raises(StoreError, match="read-only"):
            opened.remove([1])

