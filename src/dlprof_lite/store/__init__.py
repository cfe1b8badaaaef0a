"""The run store: every analysed report recorded through SQLAlchemy (stage after report).

``record`` (:class:`RunRecord`, :class:`RunContext`: the contract with ``compare``),
``database`` (:class:`RunStore`, :class:`RunInfo`, ``default_url``), ``engine`` (URLs, the
engine, one-line :class:`StoreError`), ``schema`` (the tables), ``rows`` (report tables as
JSON rows and back), ``migrate`` and ``migrations/`` (Alembic, configured in code). Import
the modules, not this package: reading a record needs neither SQLAlchemy nor Alembic.
"""
