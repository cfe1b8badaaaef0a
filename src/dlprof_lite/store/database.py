"""The run store: :class:`RunStore` records a :class:`RunRecord` and gives it back equal.

Place in the pipeline: store (right of report; ``compare`` and the ``runs`` command read it).
The database is any SQLAlchemy URL; the default is an SQLite file per user,
``$XDG_DATA_HOME/dlprof-lite/runs.db`` (``~/.local/share/dlprof-lite/runs.db``) on Linux
(:func:`default_url`; :mod:`dlprof_lite.store.engine` lists the other systems), and
``$DLPROF_LITE_DB`` names another. Tables and the choice of JSON rows:
:mod:`dlprof_lite.store.schema`.

A run is written in one transaction, a bulk insert per table: it is in the database whole or
not at all. Times are stored in UTC; a naive ``datetime`` given to :meth:`RunStore.find` is
local time. A store may come from elsewhere: opening checks that it holds no SQL of its own
(:mod:`dlprof_lite.store.trust`), and what it gives back is checked like a report folder
(:mod:`dlprof_lite.store.stored`).
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import sqlalchemy as sa

from dlprof_lite.errors import StoreError
from dlprof_lite.store import trust
from dlprof_lite.store.engine import (
    DEFAULT_DB_ENV,
    create_engine,
    default_url,
    masked,
    parse_url,
    secrets,
    translated,
    writing,
)
from dlprof_lite.store.migrate import upgrade
from dlprof_lite.store.prepared import PreparedRun, Row, utc
from dlprof_lite.store.schema import ROW_TABLES, run_phases, runs

if TYPE_CHECKING:
    from dlprof_lite.store.record import RunRecord

__all__ = ["DEFAULT_DB_ENV", "RunInfo", "RunStore", "StoreError", "default_url"]



@dataclass(frozen=True)
class RunInfo:
    """One run as ``runs list`` shows it: no summary, no tables."""

    id: int
    created_at: datetime
    tag: str | None
    group: str | None
    script: str | None
    command: tuple[str, ...]
    host: str | None
    gpus: str | None
    git_commit: str | None
    git_dirty: bool | None
    steps: int
    step_median_ns: float | None
    step_mean_ns: float | None
    report_dir: str | None
    source: str | None

    def row(self) -> dict[str, object]:
        """Plain JSON-ready values (time as ISO 8601, the command as a list)."""
        out = asdict(self)
        out["created_at"] = self.created_at.isoformat()
        out["command"] = list(self.command)
        return out


_INFO_COLUMNS = {f.name: ("run_group" if f.name == "group" else f.name) for f in fields(RunInfo)}


class RunStore:
    """The run database at ``url`` (default: :func:`default_url`), its schema brought to the
    newest revision when opened. ``create`` False: a missing SQLite file or an empty database
    is a :class:`StoreError` instead of being created (for commands that only read);
    ``read_only``: nothing is written (an SQLite file is opened read-only; a schema not at the
    newest revision is an error, not upgraded). Either way, a store holding triggers, views
    or anything else that is not the tool's own is refused before any statement of ours.
    ``upgraded``: this open created or upgraded the schema (another process may have)."""

    def __init__(self, url: str | None = None, *, create: bool = True,
                 read_only: bool = False) -> None:  # fmt: skip
        parsed = parse_url(url or default_url())
        self.display = masked(parsed)
        self._secrets = secrets(parsed)
        self.engine = create_engine(parsed, create=create, read_only=read_only)
        try:
            with self._errors():
                with self.engine.connect() as connection:
                    trust.check(connection, self.display)
                self.upgraded = upgrade(self.engine, self.display, create=create,
                                        read_only=read_only)  # fmt: skip
        except BaseException:
            self.engine.dispose()
            raise

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return translated(self.display, self._secrets)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"RunStore({self.display!r})"

    def record(self, run: RunRecord) -> int:
        """Write ``run`` (its ``run_id`` is ignored) in one transaction; returns its new id."""
        from dlprof_lite.store.rows import prepare

        return self.insert(prepare(run))

    def insert(self, run: PreparedRun) -> int:
        """:meth:`record` of a run already made plain values (:mod:`~.prepared`)."""
        with self._errors(), writing(self.engine) as connection:
            result = connection.execute(runs.insert().values(**_fitted(run["run"])))
            run_id = int(result.inserted_primary_key[0])  # type: ignore[index]  # one PK
            for name, (table, keys) in ROW_TABLES.items():
                rows = _keyed(run["tables"][name], [table.c[k] for k in keys])
                _insert(connection, table, run_id, rows)
            _insert(connection, run_phases, run_id, run["phases"])
        return run_id

    def get(self, run_id: int) -> RunRecord:
        """The run recorded as ``run_id``, its summary and tables equal to those recorded;
        every value checked (:mod:`dlprof_lite.store.stored`)."""
        from dlprof_lite.store import stored
        from dlprof_lite.store.record import RunRecord

        if not stored.valid_id(run_id):
            raise StoreError(f"no run {run_id} in {self.display}")
        query = sa.select(*stored.run_columns(),
                          stored.text(runs.c.summary, stored.SMALL_LIMIT).label("summary"),
                          stored.text(runs.c.tables, stored.SMALL_LIMIT).label("tables"),
                          ).where(runs.c.id == run_id)  # fmt: skip
        with self._errors(), self.engine.connect() as connection:
            found = connection.execute(query).first()
            if found is None:
                raise StoreError(f"no run {run_id} in {self.display}")
            row = found._mapping
            values = stored.checked_row(row, self.display)
            where = f"run database {self.display}, run {run_id}"
            summary = stored.summary(row["summary"], where)
            layouts = stored.layouts(row["tables"], where)
            frames = {name: stored.table(name, layouts[name],
                                         _stored_rows(connection, table, run_id, where), where)
                      for name, (table, _) in ROW_TABLES.items()}  # fmt: skip
        return RunRecord(stored.context(values), summary, **frames, run_id=run_id)

    def find(
        self,
        *,
        tag: str | None = None,
        script: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        group: str | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs newest first. ``script`` matches the recorded path or its last part(s)
        (``train.py`` finds ``/home/me/proj/train.py``); ``since`` is inclusive, ``until``
        exclusive."""
        from dlprof_lite.store import stored

        query = sa.select(*stored.run_columns())
        if tag is not None:
            query = query.where(runs.c.tag == sql_text(tag))
        if group is not None:
            query = query.where(runs.c.run_group == sql_text(group))
        if script is not None:
            script = str(sql_text(script))
            suffix = "/" + script.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            query = query.where(
                sa.or_(runs.c.script == script, runs.c.script.like("%" + suffix, escape="\\"))
            )
        if since is not None:
            query = query.where(runs.c.created_at >= utc(since))
        if until is not None:
            query = query.where(runs.c.created_at < utc(until))
        query = query.order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)
        with self._errors(), self.engine.connect() as connection:
            return [_info(stored.checked_row(r._mapping, self.display))
                    for r in connection.execute(query)]  # fmt: skip

    def runs_with_tag(self, tag: str) -> list[RunRecord]:
        """Every run whose tag or ``--repeat`` group is ``tag``, oldest first (compare pools
        them)."""
        from dlprof_lite.store import stored

        query = (
            sa.select(stored.raw(runs.c.id))
            .where(sa.or_(runs.c.tag == sql_text(tag), runs.c.run_group == sql_text(tag)))
            .order_by(runs.c.created_at, runs.c.id)
        )
        with self._errors(), self.engine.connect() as connection:
            ids = connection.execute(query).scalars().all()
        if not all(type(i) is int for i in ids):
            raise StoreError(f"run database {self.display}: a run id that is not an integer")
        return [self.get(run_id) for run_id in ids]

    def remove(self, run_ids: Sequence[int]) -> int:
        """Delete these runs with all their rows (ON DELETE CASCADE); returns how many. A
        run id that is not there is a :class:`StoreError`, and then nothing is removed."""
        from dlprof_lite.store import stored

        wanted = sorted(set(run_ids))
        if not wanted:
            return 0
        with self._errors(), writing(self.engine) as connection:
            there = set()
            if all(stored.valid_id(i) for i in wanted):
                query = sa.select(stored.raw(runs.c.id)).where(runs.c.id.in_(wanted))
                there = set(connection.execute(query).scalars())
            missing = [i for i in wanted if i not in there]
            if missing:
                listed = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
                raise StoreError(f"no run {listed} in {self.display}; nothing removed")
            result = connection.execute(runs.delete().where(runs.c.id.in_(wanted)))
        return int(result.rowcount)

    def export_csv(self, infos: Sequence[RunInfo], target: str | Path | IO[str]) -> None:
        """``infos`` as CSV (the command as one shell-quoted string; text cells that a
        spreadsheet would run as formulas quoted, as in the report's CSV files)."""
        export_csv(infos, target)


def export_csv(infos: Sequence[RunInfo], target: str | Path | IO[str]) -> None:
    import pandas as pd

    from dlprof_lite.render.writers import formula_safe

    rows = [{**info.row(), "command": shlex.join(info.command)} for info in infos]
    table = pd.DataFrame(rows, columns=[f.name for f in fields(RunInfo)])
    text = formula_safe(table).to_csv(index=False, lineterminator="\n")
    if isinstance(target, str | Path):
        try:
            Path(target).write_text(text, encoding="utf-8")
        except OSError as err:
            raise StoreError(f"cannot write {target}: {err.strerror or err}") from err
    else:
        target.write(text)


def _insert(
    connection: sa.Connection, table: sa.Table, run_id: int, rows: list[dict[str, object]]
) -> None:
    if rows:  # executemany: one statement, many parameter sets
        connection.execute(table.insert(), [{**r, "run_id": run_id} for r in rows])


def _stored_rows(
    connection: sa.Connection, table: sa.Table, run_id: int, where: str
) -> list[str | None]:
    """A run's rows of ``table`` as JSON text, counted and measured before they are fetched
    (at most a report table's rows and bytes)."""
    from dlprof_lite.render import read_schema as rs
    from dlprof_lite.store import stored

    size = sa.func.length(sa.cast(table.c.data, sa.Text))
    count, total = connection.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(size), 0))
        .where(table.c.run_id == run_id)
    ).one()
    if count > rs.MAX_ROWS or total > rs.MAX_TABLE_BYTES:
        raise StoreError(f"{where}: {table.name} holds {count} rows of {total} characters, "
                         "more than dlprof-lite writes")  # fmt: skip
    query = (sa.select(stored.text(table.c.data, stored.ROW_LIMIT))
             .where(table.c.run_id == run_id).order_by(table.c.position))  # fmt: skip
    return list(connection.execute(query).scalars())


def _fitted(values: Mapping[str, object]) -> dict[str, object]:
    """The runs row's values, text made to fit a text column (:func:`sql_text`)."""
    return {k: sql_text(v) if isinstance(runs.c[k].type, sa.String) else v
            for k, v in values.items()}  # fmt: skip


def _keyed(rows: Sequence[Mapping[str, object]], keys: Sequence[sa.Column[Any]]) -> list[Row]:
    """One store row per table row: ``position``, the key columns, and ``data`` (all)."""
    convert = [(c.name, _converter(c.type)) for c in keys]
    out: list[Row] = []
    for position, data in enumerate(rows):
        row: Row = {"position": position, "data": data}
        for name, to_sql in convert:
            row[name] = to_sql(data.get(name))
        out.append(row)
    return out


def _converter(sql_type: sa.types.TypeEngine[Any]) -> Callable[[object], object]:
    """A cell to a key column's type, None when it is not one (the cell stays in ``data``):
    a strict server refuses 'n/a' in a number column."""
    if isinstance(sql_type, sa.Boolean):
        return lambda v: v if isinstance(v, bool) else None
    if isinstance(sql_type, sa.Integer):
        return lambda v: int(n) if (n := _number(v)) is not None and n == int(n) else None
    if isinstance(sql_type, sa.Float):
        return _number
    return sql_text


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def sql_text(value: object) -> str | None:
    """Text a text column takes: NUL (PostgreSQL refuses it) as U+FFFD, a lone surrogate
    (a non-UTF-8 file name decoded by Python; no driver encodes it) as '?'. A row's exact
    text stays in its JSON ``data``."""
    if value is None:
        return None
    text = str(value).replace("\x00", "\ufffd")
    return text.encode("utf-8", "replace").decode("utf-8")


def _info(values: Mapping[str, Any]) -> RunInfo:
    return RunInfo(**{field: values[column] for field, column in _INFO_COLUMNS.items()})
