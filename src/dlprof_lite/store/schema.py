"""The run store's tables, declared once as SQLAlchemy Core ``MetaData``.

Place in the pipeline: store. Alembic revision ``0001`` (``store/migrations/versions``) creates
exactly these tables; ``tests/test_store_migrations.py`` checks that an upgrade from empty gives
this ``MetaData`` (Alembic's ``compare_metadata`` finds no difference), so a change here needs a
new revision.

Design choice: report rows as JSON beside a few key columns. The report tables gain columns
between releases (the layers table went from 20 to 44 in a few issues); mapping every registry
column would need a migration for each new metric, and a database written by one release
could not hold the rows of the next. So each row of ``run_iterations``, ``run_layers`` and
``run_kernels`` keeps its full data in ``data`` (a JSON object: column -> plain value, the
form ``summary.json`` and the table JSON files use), and beside it only what SQL filters,
joins or sorts on: the run id, the row's position in the report table, its name (iteration,
layer, kernel) and the numbers ``compare`` and ``runs`` read. The dtypes of each table's
columns (and the categories of categorical ones) are kept once per run in ``runs.tables``, so
:func:`dlprof_lite.store.stored.table` gives back a DataFrame equal to the report's, dtypes
included. ``runs.summary`` is the ``Summary.document()``; ``run_phases`` is
``RunRecord.phases()``, kept for SQL only (``get`` recomputes it from the iterations).

Every child row goes with its run: ``ON DELETE CASCADE`` (SQLite enforces it because the
store turns ``PRAGMA foreign_keys`` on for each connection).
"""

from __future__ import annotations

import sqlalchemy as sa

from dlprof_lite.store.prepared import ROW_TABLE_NAMES

metadata = sa.MetaData()

# Alembic's version table, named for us: a PostgreSQL database shared with another
# Alembic-managed application must not mix its revisions with ours.
VERSION_TABLE = "dlprof_lite_version"

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("tag", sa.Text, index=True),
    sa.Column("run_group", sa.Text, index=True),
    sa.Column("repeat_index", sa.Integer),
    sa.Column("command", sa.JSON, nullable=False),
    sa.Column("cwd", sa.Text),
    sa.Column("script", sa.Text, index=True),
    sa.Column("host", sa.Text),
    sa.Column("gpus", sa.Text),
    sa.Column("driver_version", sa.Text),
    sa.Column("nsys_version", sa.Text),
    sa.Column("torch_version", sa.Text),
    sa.Column("cuda_version", sa.Text),
    sa.Column("python_version", sa.Text),
    sa.Column("tool_version", sa.Text),
    sa.Column("git_commit", sa.Text),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("source", sa.Text),
    sa.Column("report_dir", sa.Text),
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("step_mean_ns", sa.Float),
    sa.Column("step_median_ns", sa.Float),
    sa.Column("summary", sa.JSON, nullable=False),
    sa.Column("tables", sa.JSON, nullable=False),
)


def _run_id() -> sa.Column[int]:
    return sa.Column(
        "run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )


run_iterations = sa.Table(
    "run_iterations",
    metadata,
    _run_id(),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("iteration", sa.BigInteger),
    sa.Column("wall_ns", sa.Float),
    sa.Column("warmup", sa.Boolean),
    sa.Column("in_window", sa.Boolean),
    sa.Column("data", sa.JSON, nullable=False),
)

run_layers = sa.Table(
    "run_layers",
    metadata,
    _run_id(),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("layer", sa.Text),
    sa.Column("forward_gpu_ns", sa.Float),
    sa.Column("backward_gpu_ns", sa.Float),
    sa.Column("forward_wall_ns", sa.Float),
    sa.Column("backward_wall_ns", sa.Float),
    sa.Column("data", sa.JSON, nullable=False),
)

run_kernels = sa.Table(
    "run_kernels",
    metadata,
    _run_id(),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("instances", sa.BigInteger),
    sa.Column("total_ns", sa.Float),
    sa.Column("data", sa.JSON, nullable=False),
)

run_phases = sa.Table(
    "run_phases",
    metadata,
    _run_id(),
    sa.Column("phase", sa.Text, primary_key=True),
    sa.Column("gpu_ns", sa.Float),
    sa.Column("wall_ns", sa.Float),
    sa.Column("host_gap_ns", sa.Float),
)

# The report tables kept as JSON rows, by RunRecord attribute, with their key columns
# (store column -> report column; the store's names are the report's).
def _keys(table: sa.Table) -> tuple[str, ...]:
    """A row table's key columns: all but the run id, the position and the JSON row."""
    return tuple(c.name for c in table.columns if c.name not in ("run_id", "position", "data"))


# Each report table a run keeps (store/prepared.py names them) and its table of rows.
_ROW_TABLES = (run_iterations, run_layers, run_kernels)
ROW_TABLES: dict[str, tuple[sa.Table, tuple[str, ...]]] = {
    name: (table, _keys(table)) for name, table in zip(ROW_TABLE_NAMES, _ROW_TABLES, strict=True)
}
