"""Opening the run database: its URL, the engine, one-line errors, the schema brought to head.

Place in the pipeline: store. The default database is an SQLite file per user:
``$XDG_DATA_HOME/dlprof-lite/runs.db`` (``~/.local/share/dlprof-lite/runs.db`` when
``XDG_DATA_HOME`` is unset) on Linux and other Unix systems,
``~/Library/Application Support/dlprof-lite/runs.db`` on macOS and
``%LOCALAPPDATA%\\dlprof-lite\\runs.db`` on Windows. ``$DLPROF_LITE_DB`` (or ``--db``) names any
SQLAlchemy URL instead, e.g. ``postgresql+psycopg://user@host/dbname`` (a bare
``postgresql://`` means the same driver, psycopg 3, installed by ``dlprof-lite[postgres]``).

Opening brings the schema to Alembic's head under a lock, so that processes opening one new
database at the same moment create it once and all succeed: SQLite takes the write lock with
``BEGIN IMMEDIATE`` (others wait up to the busy timeout), PostgreSQL
``pg_advisory_xact_lock``; in both the DDL runs inside that transaction. Every failure is a
:class:`StoreError` of one line that never shows the URL's password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, make_url

from dlprof_lite.errors import DlprofError

DEFAULT_DB_ENV = "DLPROF_LITE_DB"
# A writer waits this long for another process's write to finish (SQLite busy timeout).
BUSY_TIMEOUT_S = 60.0
# An unreachable server fails after this long (PostgreSQL connect_timeout).
CONNECT_TIMEOUT_S = 5
# The advisory lock that serializes schema upgrades on PostgreSQL: any fixed 64-bit key.
_PG_LOCK_KEY = 0x646C70726F66  # "dlprof"
_WRITE = "dlprof_lite_write"  # execution option: this transaction writes (SQLite IMMEDIATE)


class StoreError(DlprofError):
    """The run database cannot be opened, read or written: a bad URL, a missing driver, an
    unreachable server, a file that is not a database, a schema newer than this tool.

    Exit code 2 as for other bad inputs (``compare --gate`` keeps 1 for a regression).
    """


def default_path() -> Path:
    """The per-user SQLite file (see the module docstring)."""
    from dlprof_lite.user_dirs import user_dir

    return user_dir("data") / "runs.db"


def default_url() -> str:
    """``$DLPROF_LITE_DB`` when set, else the per-user SQLite file's URL."""
    return os.environ.get(DEFAULT_DB_ENV) or f"sqlite:///{default_path()}"


def masked(url: str | URL) -> str:
    """The URL as it may be shown: password hidden; an SQLite file as its path."""
    if isinstance(url, URL):
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            return str(url.database)
        return url.render_as_string(hide_password=True)
    return re.sub(r"(//[^/@:]*:)[^@/]*@", r"\1***@", url)


def parse_url(url: str) -> URL:
    """The URL parsed; a bare ``postgresql://`` means psycopg 3 (the ``[postgres]`` extra),
    not SQLAlchemy's default psycopg2; an SQLite path may start with ``~``."""
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as err:
        raise StoreError(
            f"not a database URL: {masked(url)!r} (expected e.g. sqlite:///path/runs.db or "
            "postgresql+psycopg://user@host/dbname)"
        ) from err
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite" and (parsed.database or "").startswith("~"):
        parsed = parsed.set(database=os.path.expanduser(str(parsed.database)))
    return parsed


def create_engine(url: URL, *, create: bool) -> sa.Engine:
    """The engine for ``url``: SQLite with a busy timeout and explicit BEGINs, PostgreSQL
    with a connect timeout. ``create``: an SQLite file (and its folder) may be made."""
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        _sqlite_file(url, create)
        kwargs["connect_args"] = {"timeout": BUSY_TIMEOUT_S}
    elif backend == "postgresql" and "connect_timeout" not in url.query:
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        engine = sa.create_engine(url, **kwargs)
    except exc.NoSuchModuleError as err:
        raise StoreError(f"unknown database kind {url.drivername!r} in {masked(url)}") from err
    except ImportError as err:
        hint = " (pip install 'dlprof-lite[postgres]')" if backend == "postgresql" else ""
        raise StoreError(
            f"the database driver for {url.drivername} is not installed: {err}{hint}"
        ) from err
    if backend == "sqlite":
        _sqlite_events(engine)
    return engine


def _sqlite_file(url: URL, create: bool) -> None:
    if url.database in (None, "", ":memory:"):
        return
    path = Path(url.database)
    if path.is_dir():
        raise StoreError(f"run database {path}: is a folder, not a database file")
    if path.exists():
        return
    if not create:
        raise StoreError(f"no run database at {path} (no run recorded yet)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create the run database's folder {path.parent}: "
                         f"{err.strerror or err}") from err  # fmt: skip


def _sqlite_events(engine: sa.Engine) -> None:
    """pysqlite's own transaction handling issues no BEGIN before DDL and only a deferred
    BEGIN before DML; the store needs BEGIN IMMEDIATE for writes (the write lock taken up
    front, so two writers wait instead of failing to upgrade a read lock) and foreign keys
    on (ON DELETE CASCADE)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        write = connection.get_execution_options().get(_WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


@contextmanager
def writing(engine: sa.Engine) -> Iterator[sa.Connection]:
    """One write transaction: committed when the block ends, rolled back on any error."""
    with engine.connect() as connection:
        connection.execution_options(**{_WRITE: True})
        with connection.begin():
            yield connection


@contextmanager
def translated(display: str) -> Iterator[None]:
    """Database errors as one-line :class:`StoreError` naming the (masked) database."""
    try:
        yield
    except exc.DBAPIError as err:
        raise StoreError(f"run database {display}: {_first_line(err.orig)}") from err
    except exc.SQLAlchemyError as err:
        raise StoreError(f"run database {display}: {_first_line(err)}") from err
    except OSError as err:  # the file vanished, a disk failed under SQLite
        raise StoreError(f"run database {display}: {err.strerror or err}") from err


def _first_line(err: BaseException | None) -> str:
    text = str(err).strip() if err is not None else ""
    line = text.splitlines()[0].strip() if text else type(err).__name__
    return line.removeprefix("(psycopg.OperationalError) ")


def lock_schema(connection: sa.Connection) -> None:
    """Inside a write transaction: wait for any other process upgrading the schema."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
    # SQLite: the transaction's BEGIN IMMEDIATE is the lock. Others: no lock (documented).
