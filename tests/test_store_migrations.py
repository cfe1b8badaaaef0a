"""The run store's Alembic revisions: an empty database upgraded to head is exactly the
schema module's ``MetaData`` (Alembic's own ``compare_metadata`` is the oracle: types,
nullability, indexes, foreign keys), on SQLite and on the real PostgreSQL server; the
history is one line; a downgrade to base leaves nothing of ours."""

from __future__ import annotations

import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from dlprof_lite.store.database import RunStore
from dlprof_lite.store.migrate import HEAD, alembic_config, head
from dlprof_lite.store.schema import VERSION_TABLE, metadata
from postgres_server import pg_url, postgres  # noqa: F401

OURS = {t.name for t in metadata.sorted_tables}


def differences(url: str) -> list[object]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "version_table": VERSION_TABLE}
            )
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names())
    finally:
        engine.dispose()


def check_upgrade_from_empty(url: str) -> None:
    assert differences(url) != []  # the oracle sees an empty database as different
    with RunStore(url) as store:
        assert store.upgraded
    assert differences(url) == []
    assert tables(url) == OURS | {VERSION_TABLE}
    with RunStore(url) as store:
        assert not store.upgraded  # at head: nothing to do


def check_downgrade_to_base(url: str) -> None:
    RunStore(url).close()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            command.downgrade(alembic_config(connection), "base")
    finally:
        engine.dispose()
    assert tables(url) == {VERSION_TABLE}


def test_one_linear_history() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == [head()]
    revisions = list(script.walk_revisions())
    assert revisions[-1].down_revision is None
    assert all(r.down_revision == n.revision for r, n in pairwise(revisions))
    # The revision a store is checked against without Alembic is the scripts' head.
    assert head() == HEAD


def test_a_store_at_head_opens_without_alembic(tmp_path: Path) -> None:
    """Opening a store already at head is one query: Alembic is imported only to create or
    upgrade (a fresh process, since this one has imported it)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    RunStore(url).close()  # created (and upgraded) here
    code = (
        "import sys\n"
        "from dlprof_lite.store.database import RunStore\n"
        f"store = RunStore({url!r})\n"
        "store.close()\n"
        "print(store.upgraded, 'alembic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_upgrade_from_empty_sqlite(tmp_path: Path) -> None:
    check_upgrade_from_empty(f"sqlite:///{tmp_path / 'runs.db'}")


def test_downgrade_to_base_sqlite(tmp_path: Path) -> None:
    check_downgrade_to_base(f"sqlite:///{tmp_path / 'runs.db'}")


def test_upgrade_from_empty_postgres(pg_url: str) -> None:  # noqa: F811
    check_upgrade_from_empty(pg_url)


def test_downgrade_to_base_postgres(pg_url: str) -> None:  # noqa: F811
    check_downgrade_to_base(pg_url)


def test_a_schema_change_without_revision_is_seen(tmp_path: Path) -> None:
    """The oracle is not blind: a column the revisions lack is reported."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    RunStore(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql("ALTER TABLE runs ADD COLUMN extra TEXT")
    engine.dispose()
    diff = differences(url)
    assert [d[0] for d in diff] == ["remove_column"]  # type: ignore[index]


@pytest.mark.parametrize("name", ["env.py", "script.py.mako", "versions/0001_runs.py"])
def test_scripts_ship_in_the_package(name: str) -> None:
    import dlprof_lite.store

    folder = Path(dlprof_lite.store.__file__).parent / "migrations"
    assert (folder / name).is_file()
