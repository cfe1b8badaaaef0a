"""The run store on a real PostgreSQL server (started by ``postgres_server.py``, one per
session, a new database per test): the same round trips and guarantees as on SQLite, and the
errors only a server has (closed port, password never shown)."""

from __future__ import annotations

import time

import pytest

from dlprof_lite.store.database import RunStore, StoreError
from postgres_server import PostgresServer, pg_url, postgres  # noqa: F401
from test_store import (
    CORPUS_EXPORTS,
    big_record,
    check_hostile_context,
    corpus_record,
    counts,
    hostile_record,
    one_line_error,
    round_trip,
    stamp_newer,
    synthetic_record,
)


@pytest.mark.corpus
def test_round_trip_of_a_real_report(pg_url: str) -> None:  # noqa: F811
    round_trip(pg_url, corpus_record(CORPUS_EXPORTS[0]))
    round_trip(pg_url, corpus_record(CORPUS_EXPORTS[2]))


def test_round_trip_of_example_and_hostile_names(pg_url: str) -> None:  # noqa: F811
    back = round_trip(pg_url, synthetic_record())
    assert back.step_ns().tolist() == [2000.0, 3000.0]
    round_trip(pg_url, hostile_record())


def test_find_and_remove(pg_url: str) -> None:  # noqa: F811
    with RunStore(pg_url) as store:
        first = store.record(synthetic_record(tag="a"))
        second = store.record(synthetic_record(tag="b", script="x/eval.py"))
        assert [i.id for i in store.find()] == [second, first]  # same time: newest id first
        assert [i.id for i in store.find(script="eval.py")] == [second]
        assert [r.run_id for r in store.runs_with_tag("a")] == [first]
        assert store.remove([first]) == 1
        assert counts(store)["run_iterations"] == 3 and counts(store)["runs"] == 1


def test_failure_in_the_middle_leaves_no_row(pg_url: str) -> None:  # noqa: F811
    with RunStore(pg_url) as store:
        with store.engine.begin() as connection:
            connection.exec_driver_sql(
                "CREATE FUNCTION fail() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'disk on fire'; END $$ LANGUAGE plpgsql"
            )
            connection.exec_driver_sql(
                "CREATE TRIGGER fail BEFORE INSERT ON run_kernels "
                "FOR EACH ROW EXECUTE FUNCTION fail()"
            )
        with pytest.raises(StoreError, match="disk on fire") as err:
            store.record(synthetic_record())
        assert "\n" not in str(err.value)
        assert set(counts(store).values()) == {0}


def test_schema_newer_than_the_tool(pg_url: str) -> None:  # noqa: F811
    stamp_newer(pg_url)
    assert "schema revision 9999_future, unknown to this dlprof-lite" in one_line_error(pg_url)


def test_shared_database_with_other_tables(pg_url: str) -> None:  # noqa: F811
    """A server database may hold other applications' tables: the store adds its own."""
    import sqlalchemy as sa

    engine = sa.create_engine(pg_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE someone_else (x int)")
    engine.dispose()
    with RunStore(pg_url) as store:
        assert store.find() == []


def test_missing_database_on_the_server(postgres: PostgresServer) -> None:  # noqa: F811
    message = one_line_error(postgres.url("no_such_db"))
    assert 'database "no_such_db" does not exist' in message


def test_unreachable_server_fails_fast_without_password() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.perf_counter()
    message = one_line_error(f"postgresql+psycopg://me:s3cret@127.0.0.1:{port}/runs")
    assert time.perf_counter() - start < 10
    assert "s3cret" not in message
    assert message.startswith("run database postgresql+psycopg://me:***@127.0.0.1:")
    assert "refused" in message.lower()


def test_unroutable_server_times_out() -> None:
    """A host that never answers (TEST-NET-1, RFC 5737): the connect timeout ends it (a
    sandbox's network may refuse it at once instead; either way one line, soon)."""
    start = time.perf_counter()
    message = one_line_error("postgresql+psycopg://me@192.0.2.1:5432/runs")
    assert time.perf_counter() - start < 20
    assert message.startswith("run database postgresql+psycopg://me@192.0.2.1:5432/runs: ")


@pytest.mark.slow
def test_big_run_records_in_seconds(pg_url: str) -> None:  # noqa: F811
    run = big_record(layers=10_000, kernels=50_000)
    with RunStore(pg_url) as store:
        start = time.perf_counter()
        run_id = store.record(run)
        record_s = time.perf_counter() - start
        start = time.perf_counter()
        back = store.get(run_id)
        get_s = time.perf_counter() - start
    print(f"PostgreSQL: record {record_s:.2f} s, get {get_s:.2f} s")
    assert len(back.kernels) == 50_000 and len(back.layers) == 10_000
    assert back.kernels["total_ns"].tolist() == run.kernels["total_ns"].tolist()


def test_hostile_context(pg_url: str) -> None:  # noqa: F811
    check_hostile_context(pg_url)


def test_bare_postgresql_url_means_psycopg(postgres: PostgresServer) -> None:  # noqa: F811
    url = postgres.new_database().replace("postgresql+psycopg://", "postgresql://")
    with RunStore(url) as store:
        assert store.engine.dialect.driver == "psycopg"
        assert store.get(store.record(synthetic_record())).run_id == 1
