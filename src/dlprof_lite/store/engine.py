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
``pg_advisory_xact_lock``; in both the DDL runs inside that transaction. Commands that only
read open an SQLite file read-only (``mode=ro``: a missing or empty file is never created or
written). A store may come from elsewhere (issue 40): every connection has SQLite's
``trusted_schema`` off and limits (:data:`SQLITE_LIMITS`), every statement a time limit
(:data:`STATEMENT_TIMEOUT_S`), and :mod:`dlprof_lite.store.trust` refuses triggers, views and
anything else not the tool's own before the tool runs a statement of its own. Every failure is
a :class:`StoreError` of one line that never shows a password, wherever the URL carries one
(:func:`masked`, :func:`secrets`).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, make_url

from dlprof_lite.errors import StoreError

DEFAULT_DB_ENV = "DLPROF_LITE_DB"
# A writer waits this long for another process's write to finish (SQLite busy timeout).
BUSY_TIMEOUT_S = 60.0
# An unreachable server fails after this long (PostgreSQL connect_timeout).
CONNECT_TIMEOUT_S = 5
# The advisory lock that serializes schema upgrades on PostgreSQL: any fixed 64-bit key.
_PG_LOCK_KEY = 0x646C70726F66  # "dlprof"
_WRITE = "dlprof_lite_write"  # execution option: this transaction writes (SQLite IMMEDIATE)
# Any one statement of the store (a read, a run's insert, a schema upgrade) ends within this;
# the largest real one, recording 50,000 kernel rows, takes a few seconds.
STATEMENT_TIMEOUT_S = 60.0
_DEADLINE = "dlprof_lite_deadline"  # connection record info: when the statement must end
MiB = 1 << 20
# Per-connection SQLite limits: no value beyond what a report file may hold (a stored summary
# or row is at most that), no attached database, triggers (none are allowed) not nested.
SQLITE_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: 128 * MiB,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
}
# Query parameters that carry a secret (psycopg's password, sslpassword, ...).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)


def default_path() -> Path:
    """The per-user SQLite file (see the module docstring)."""
    from dlprof_lite.user_dirs import user_dir

    return user_dir("data") / "runs.db"


def default_url() -> str:
    """``$DLPROF_LITE_DB`` when set, else the per-user SQLite file's URL."""
    return os.environ.get(DEFAULT_DB_ENV) or f"sqlite:///{default_path()}"


def masked(url: str | URL) -> str:
    """The URL as it may be shown: no password, neither the userinfo's (with an unencoded
    ``@`` in it too) nor a query parameter's (``?password=``); an SQLite file as its path."""
    if isinstance(url, URL):
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            return str(url.database)
        shown = url.set(query={}).render_as_string(hide_password=True)
        query = "&".join(f"{k}={'***' if _SECRET_KEY.search(k) else v}"
                         for k, v in url.query.items())  # fmt: skip
        return shown + (f"?{query}" if query else "")
    # Text that did not parse: the userinfo up to the last "@" hidden, and secret parameters.
    text = re.sub(r"(://[^/?#@:]*:).*@", r"\1***@", url)
    return re.sub(r"([?&][^=&]*(?:pass|pwd|secret|token)[^=&]*=)[^&]*", r"\1***", text,
                  flags=re.IGNORECASE)  # fmt: skip


def secrets(url: URL) -> tuple[str, ...]:
    """Every secret the URL carries, for scrubbing them from a driver's messages."""
    found = [url.password] + [v for k, v in url.query.items() if _SECRET_KEY.search(k)]
    out: list[str] = []
    for value in found:
        for item in value if isinstance(value, tuple) else (value,):
            if item:
                out += [str(item), quote(str(item), safe="")]
    return tuple(dict.fromkeys(out))


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
    if parsed.host and "@" in parsed.host:  # "user:p@ss@host": the password holds an "@"
        extra, host = parsed.host.rsplit("@", 1)
        if parsed.password is not None:
            parsed = parsed.set(password=f"{parsed.password}@{extra}", host=host)
        else:
            parsed = parsed.set(username=f"{parsed.username or ''}@{extra}", host=host)
    if parsed.get_backend_name() == "sqlite" and (parsed.database or "").startswith("~"):
        parsed = parsed.set(database=os.path.expanduser(str(parsed.database)))
    return parsed


def create_engine(url: URL, *, create: bool, read_only: bool = False) -> sa.Engine:
    """The engine for ``url``: SQLite with a busy timeout, explicit BEGINs, its limits and
    ``trusted_schema`` off, PostgreSQL with a connect timeout; both with a time limit per
    statement. ``create``: an SQLite file (and its folder) may be made; ``read_only``: an
    SQLite file is opened read-only (it must exist)."""
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        path = _sqlite_file(url, create and not read_only)
        kwargs["connect_args"] = {"timeout": BUSY_TIMEOUT_S}
        if read_only and path is not None:
            url = URL.create("sqlite", database=path.absolute().as_uri(),
                             query={"mode": "ro", "uri": "true"})  # fmt: skip
    elif backend == "postgresql":
        kwargs["connect_args"] = _postgres_args(url, read_only=read_only)
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


def _postgres_args(url: URL, *, read_only: bool) -> dict[str, Any]:
    """A connect timeout (unless the URL sets one), the statement time limit and, for
    ``read_only``, read-only transactions, added to any ``options`` the URL gives."""
    args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    given = url.query.get("options", "")
    given = " ".join(given) if isinstance(given, tuple) else given
    limit = f"-c statement_timeout={int(STATEMENT_TIMEOUT_S * 1000)}"
    if read_only:
        limit += " -c default_transaction_read_only=on"
    args["options"] = f"{given} {limit}".strip()
    return args


def _sqlite_file(url: URL, create: bool) -> Path | None:
    if url.database in (None, "", ":memory:"):
        return None
    path = Path(url.database)
    if path.is_dir():
        raise StoreError(f"run database {path}: is a folder, not a database file")
    if path.exists():
        return path
    if not create:
        raise StoreError(f"no run database at {path} (no run recorded yet)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create the run database's folder {path.parent}: "
                         f"{err.strerror or err}") from err  # fmt: skip
    return path


def _sqlite_events(engine: sa.Engine) -> None:
    """pysqlite's own transaction handling issues no BEGIN before DDL and only a deferred
    BEGIN before DML; the store needs BEGIN IMMEDIATE for writes (the write lock taken up
    front, so two writers wait instead of failing to upgrade a read lock) and foreign keys
    on (ON DELETE CASCADE). Each connection gets the limits and ``trusted_schema`` off, and a
    progress handler that interrupts a statement running past its deadline (set before
    each statement)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        for limit, value in SQLITE_LIMITS.items():
            dbapi_connection.setlimit(limit, value)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA trusted_schema = OFF")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()
        deadline = record.info.setdefault(_DEADLINE, [math.inf])
        dbapi_connection.set_progress_handler(lambda: time.monotonic() > deadline[0], 10_000)

    @event.listens_for(engine, "before_cursor_execute")
    def _start(connection: sa.Connection, *_args: Any) -> None:
        deadline = connection.connection.info.get(_DEADLINE)
        if deadline is not None:
            deadline[0] = time.monotonic() + STATEMENT_TIMEOUT_S

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
def translated(display: str, hidden: Sequence[str] = ()) -> Iterator[None]:
    """Database errors as one-line :class:`StoreError` naming the (masked) database; any of
    ``hidden`` (the URL's secrets) a driver's message repeats is shown as ``***``."""
    try:
        yield
    except exc.DBAPIError as err:
        raise StoreError(f"run database {display}: {_first_line(err.orig, hidden)}") from err
    except exc.SQLAlchemyError as err:
        raise StoreError(f"run database {display}: {_first_line(err, hidden)}") from err
    except OSError as err:  # the file vanished, a disk failed under SQLite
        raise StoreError(f"run database {display}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:  # sqlite3 decoding a damaged file's text
        raise StoreError(f"run database {display}: text that is not UTF-8 at byte "
                         f"{err.start} of a value (a damaged or foreign file)") from err


def _first_line(err: BaseException | None, hidden: Sequence[str] = ()) -> str:
    text = str(err).strip() if err is not None else ""
    line = text.splitlines()[0].strip() if text else type(err).__name__
    if line in ("interrupted", "canceling statement due to statement timeout"):
        line = f"a statement ran past the {STATEMENT_TIMEOUT_S:g} s limit and was stopped"
    for secret in sorted(hidden, key=len, reverse=True):
        line = line.replace(secret, "***")
    return line.removeprefix("(psycopg.OperationalError) ")


def lock_schema(connection: sa.Connection) -> None:
    """Inside a write transaction: wait for any other process upgrading the schema."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
    # SQLite: the transaction's BEGIN IMMEDIATE is the lock. Others: no lock (documented).
