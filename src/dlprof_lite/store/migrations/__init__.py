"""Alembic scripts of the run store (``env.py``, ``versions/``), shipped in the package and
run by :mod:`dlprof_lite.store.migrate`; no ``alembic.ini`` is needed."""
