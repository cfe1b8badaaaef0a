"""Writers at the same moment: 8 processes (spawned, so nothing is shared but the database)
open one NEW database and record runs at once, released by a barrier. Every run lands with
its own id, no process sees an error, and the schema is created by exactly one of them (the
others wait for its lock and find it at head). On SQLite and on the real PostgreSQL server.
"""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path
from typing import Any

import pytest

from dlprof_lite.store.database import RunStore
from dlprof_lite.store.migrate import head
from dlprof_lite.store.record import RunRecord
from postgres_server import pg_url, postgres  # noqa: F401
from test_store import counts, synthetic_record

WRITERS = 8
RUNS_EACH = 3


def _writer(url: str, run: RunRecord, barrier: Any, out: Any, index: int) -> None:
    """One process: wait for the others, then open the store and record its runs."""
    try:
        barrier.wait(timeout=300)
        with RunStore(url) as store:
            ids = [store.record(run) for _ in range(RUNS_EACH)]
        out.put((index, store.upgraded, ids, None))
    except BaseException as err:  # reported to the test, which fails with it
        out.put((index, None, [], f"{type(err).__name__}: {err}"))


def concurrent_writers(url: str) -> list[tuple[int, bool, list[int], str | None]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    out = ctx.Queue()
    run = synthetic_record()
    workers = [
        ctx.Process(target=_writer, args=(url, run, barrier, out, i)) for i in range(WRITERS)
    ]
    for worker in workers:
        worker.start()
    results = []
    try:
        for _ in workers:
            results.append(out.get(timeout=300))
    except queue.Empty:
        pytest.fail(f"only {len(results)} of {WRITERS} writers reported: {results}")
    finally:
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.kill()
    return results


def check(url: str) -> None:
    results = concurrent_writers(url)
    errors = [r[3] for r in results if r[3] is not None]
    assert errors == []
    ids = [i for r in results for i in r[2]]
    assert len(ids) == WRITERS * RUNS_EACH == len(set(ids))
    assert sum(bool(r[1]) for r in results) == 1  # the schema created once
    with RunStore(url) as store:
        assert not store.upgraded
        assert sorted(i.id for i in store.find()) == sorted(ids)
        assert counts(store)["run_iterations"] == 3 * len(ids)
        with store.engine.connect() as connection:
            versions = connection.exec_driver_sql("SELECT version_num FROM dlprof_lite_version")
            assert versions.scalars().all() == [head()]


@pytest.mark.slow
def test_concurrent_writers_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "new" / "runs.db"
    check(f"sqlite:///{path}")


@pytest.mark.slow
def test_concurrent_writers_postgres(pg_url: str) -> None:  # noqa: F811
    check(pg_url)
