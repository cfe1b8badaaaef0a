"""Alembic's environment for the run store: online only, on the connection (and inside the
transaction) that :func:`dlprof_lite.store.migrate.upgrade` opened and locked."""

from __future__ import annotations

from alembic import context

from dlprof_lite.store.schema import VERSION_TABLE, metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the run store's migrations run through dlprof_lite.store.RunStore")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    # SQLite alters a table by copying it: later revisions' op.batch_alter_table needs this.
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
