"""Alembic revisions of the run store, oldest first (``0001``: the first schema)."""
