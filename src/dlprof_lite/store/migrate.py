"""The run store's schema versions: Alembic, configured in code (no ``alembic.ini``).

Place in the pipeline: store. The scripts ship in the package (``store/migrations``);
:func:`upgrade` brings a database to the newest revision this tool knows, under the lock of
:mod:`dlprof_lite.store.engine`, and refuses a database that is not a run store or whose
revision this tool does not know (written by a newer dlprof-lite). A store already at
:data:`HEAD` is checked with one plain query, without importing Alembic (0.2 s of start-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from dlprof_lite.errors import StoreError
from dlprof_lite.store.engine import lock_schema, writing
from dlprof_lite.store.schema import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = "dlprof_lite.store:migrations"
# The newest revision the package ships, named here so that opening a store already at it
# needs no Alembic (importing it costs 0.2 s per run); test_store_migrations checks that it
# is the head of the scripts in store/migrations.
HEAD = "0001"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Alembic's configuration for our scripts; ``connection`` is the one ``env.py`` uses."""
    from alembic.config import Config

    config = Config(attributes={"connection": connection} if connection is not None else {})
    config.set_main_option("script_location", SCRIPT_LOCATION)
    return config


def head() -> str:
    """The newest revision of the scripts (Alembic's reading of them)."""
    from alembic.script import ScriptDirectory

    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None  # the package ships revision 0001
    return revision


@dataclass(frozen=True)
class SchemaState:
    revisions: tuple[str, ...]  # the database's current revision(s); () for none
    tables: frozenset[str]


# More revision rows than Alembic ever writes (one per branch head; ours is linear).
MAX_REVISIONS = 8


def stored_revisions(connection: sa.Connection, display: str = "") -> tuple[str, ...]:
    """The database's revision(s) as Alembic records them in its version table; () for none.
    A row that is not short text (NULL, a number, a long string) is a :class:`StoreError`."""
    if not sa.inspect(connection).has_table(VERSION_TABLE):
        return ()
    version = sa.table(VERSION_TABLE, sa.column("version_num", sa.types.NullType()))
    query = sa.select(sa.func.substr(version.c.version_num, 1, 65)).limit(MAX_REVISIONS + 1)
    found = tuple(connection.execute(query).scalars())
    if len(found) > MAX_REVISIONS or not all(isinstance(r, str) and 0 < len(r) <= 64
                                              for r in found):  # fmt: skip
        raise StoreError(f"run database {display}: its schema version table holds something "
                         "dlprof-lite never writes there (not one short revision name)")
    return found


def state(connection: sa.Connection, display: str = "") -> SchemaState:
    tables = frozenset(sa.inspect(connection).get_table_names())
    return SchemaState(stored_revisions(connection, display), tables)


def upgrade(engine: sa.Engine, display: str, *, create: bool, read_only: bool = False) -> bool:
    """The database at the newest revision; a no-op (one read) when it already is. True
    when this call changed the schema (created it, or upgraded it).

    ``create`` False: an empty database is an error (nothing recorded there yet);
    ``read_only``: nothing is written, a store not at the newest revision is an error.
    """
    newest = HEAD
    file = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if stored_revisions(connection, display) == (newest,):
            return False  # the usual case: one query, no Alembic
        current = state(connection, display)
        if _checked(current, display, newest, create=create and not read_only, file=file):
            return False
    if read_only:
        raise StoreError(f"run database {display} has schema revision "
                         f"{', '.join(current.revisions)}, older than this dlprof-lite's "
                         f"{newest}: record a run into it (that upgrades it) and read it again")
    with writing(engine) as connection:
        lock_schema(connection)
        # Another process may have upgraded it while this one waited for the lock.
        if _checked(state(connection, display), display, newest, create=create, file=file):
            return False
        from alembic import command

        command.upgrade(alembic_config(connection), "head")
    return True


def _checked(current: SchemaState, display: str, newest: str, *, create: bool, file: bool) -> bool:
    """True when at ``newest``; False when an upgrade is due; StoreError when it cannot be.

    ``file``: an SQLite file with other tables is someone else's (an nsys export named by
    mistake) and is never written; a server database may be shared with other tables.
    """
    if current.revisions == (newest,):
        return True
    from alembic.script import ScriptDirectory

    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    unknown = [r for r in current.revisions if r not in known]
    if unknown:
        raise StoreError(
            f"run database {display} has schema revision {', '.join(unknown)}, unknown to this "
            f"dlprof-lite (it knows up to {newest}): it was written by a newer version; "
            "upgrade dlprof-lite or use another database (--db)"
        )
    if not current.revisions:
        if not create:
            raise StoreError(f"run database {display} holds no runs yet")
        if file and current.tables:
            names = sorted(current.tables)
            listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise StoreError(f"{display} is a database but not a dlprof-lite run store "
                             f"(tables {listed}); name another file with --db")  # fmt: skip
    return False
