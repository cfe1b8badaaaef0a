"""A real PostgreSQL server for the run store's tests, started once per test session.

Debian's ``postgresql`` package (``scripts/setup.sh`` installs it) provides ``initdb`` and
``pg_ctl`` under ``/usr/lib/postgresql/<version>/bin``. The server runs from a temporary
folder: data there, its Unix socket there, TCP on a free port of 127.0.0.1, trust
authentication, no fsync (a test server: speed over durability). PostgreSQL refuses to run
as root, so under root it runs as the ``postgres`` system user (``runuser``), with the folder
given to that user. It is stopped (``pg_ctl stop -m fast``) and the folder removed when the
session ends. Each test gets its own database (:func:`PostgresServer.new_database`).

Absent PostgreSQL or psycopg: the tests skip with the reason; under ``CI=true`` they fail.

Test modules use it with ``from postgres_server import postgres, pg_url  # noqa: F401``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import missing


def find_bin(name: str) -> Path | None:
    """``name`` from PATH, else from the newest ``/usr/lib/postgresql/<version>/bin``."""
    found = shutil.which(name)
    if found:
        return Path(found)
    roots = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    return roots[-1] if roots else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One running server; :meth:`url` names a database on it."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="dlprof-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            shutil.chown(self.root, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._names = itertools.count()
        self.started = False

    def _run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self.as_user, *args], capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust",
                  "-U", "postgres", "--no-sync", "-E", "UTF8")  # fmt: skip
        options = f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 -F"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")  # fmt: skip
        self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            # The folder goes anyway; a server left behind dies with its files.
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        return self.url(name)


_shared: PostgresServer | None = None
_users = 0


def _acquire() -> PostgresServer:
    """The session's one server: each test module imports the fixture (one definition per
    module to pytest), so the server is shared and counted, stopped by the last release."""
    global _shared, _users
    if _shared is None:
        bindir = find_bin("initdb")
        if bindir is None:
            missing("PostgreSQL is not installed (no initdb; scripts/setup.sh installs it)")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            missing("psycopg is not installed (pip install -e '.[postgres]')")
        if os.geteuid() == 0 and shutil.which("runuser") is None:
            missing("running as root without runuser: cannot start PostgreSQL as postgres")
        server = PostgresServer(bindir.parent)  # type: ignore[union-attr]
        atexit.register(server.stop)  # also when the session ends without teardown
        server.start()
        _shared = server
    _users += 1
    return _shared


def _release() -> None:
    global _shared, _users
    _users -= 1
    if _users == 0 and _shared is not None:
        _shared.stop()
        _shared = None


@pytest.fixture(scope="session")
def postgres():
    server = _acquire()
    yield server
    _release()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """A fresh database on the session's server, for one test."""
    return postgres.new_database()
