"""A run store from elsewhere runs no SQL of its own: checked before any statement of ours.

Place in the pipeline: store. A database file someone sent, or a shared server database
someone else can write, may hold SQL that runs when the tool reads or writes it: a trigger
(``AFTER DELETE ON runs`` that empties the store, ``AFTER INSERT`` that rewrites every row), a
view in place of a table (an endless recursive query), a rule, a column default or check
calling a function, a policy. :func:`check` refuses each before the tool runs a statement of
its own on the store (reading the catalogs runs none):

- SQLite: every object in ``sqlite_master`` must be one of the tool's tables or their indexes
  (or SQLite's own ``sqlite_autoindex_*``/``sqlite_stat*``), and the tool's tables plain: no
  generated column, no index on an expression. Connections have ``trusted_schema`` off
  (:mod:`dlprof_lite.store.engine`), so even what the schema parses calls no function.
- PostgreSQL: each name the tool uses resolves (on the search path, as its statements would)
  to an ordinary table or to nothing; no triggers (``pg_trigger``, internal foreign-key ones
  aside), rules (``pg_rules``), row-level security, policies, checks, expression indexes or
  defaults other than the id's sequence on them. Other tables of a shared database are left
  alone.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from dlprof_lite.errors import StoreError
from dlprof_lite.store.schema import VERSION_TABLE, metadata

# More schema objects than any run store has (tables, indexes): not a store.
MAX_OBJECTS = 1000
_CHECK = re.compile(r"\bCHECK\b", re.IGNORECASE)


def our_tables() -> tuple[str, ...]:
    return (*metadata.tables, VERSION_TABLE)


def _our_indexes() -> set[str]:
    return {str(ix.name) for table in metadata.tables.values() for ix in table.indexes}


def check(connection: sa.Connection, display: str) -> None:
    """Refuse (:class:`StoreError`) a store holding SQL or objects that are not the tool's."""
    if connection.dialect.name == "sqlite":
        _check_sqlite(connection, display)
    elif connection.dialect.name == "postgresql":
        _check_postgres(connection, display)


def _refuse(display: str, what: str) -> StoreError:
    return StoreError(f"run database {display} holds {what}, which dlprof-lite did not make; "
                      "a store from elsewhere runs no SQL of its own: refused")  # fmt: skip


def _check_sqlite(connection: sa.Connection, display: str) -> None:
    rows = connection.exec_driver_sql(
        f"SELECT type, name, tbl_name, sql FROM sqlite_master LIMIT {MAX_OBJECTS + 1}"
    ).all()
    if len(rows) > MAX_OBJECTS:
        raise StoreError(f"{display}: more than {MAX_OBJECTS} schema objects; not a "
                         "dlprof-lite run store")  # fmt: skip
    tables, indexes = set(our_tables()), _our_indexes()
    present = {str(name) for kind, name, _, _ in rows if kind == "table"}
    sql = {str(name): str(text) for kind, name, _, text in rows if kind == "table"}
    others = sorted(present - tables - {n for n in present if n.startswith("sqlite_")})
    if others and not present & tables:
        listed = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise StoreError(f"{display} is a database but not a dlprof-lite run store "
                         f"(tables {listed}); name another file with --db")  # fmt: skip
    # Triggers and views first: what would run is the better thing to name.
    for kind, name, table, _ in sorted(rows, key=lambda r: r[0] not in ("trigger", "view")):
        name, table = str(name), str(table)
        if kind == "table" and (name in tables or name.startswith("sqlite_stat")):
            continue
        if kind == "index" and table in tables and (
            name in indexes or name.startswith("sqlite_autoindex_")
        ):
            continue
        raise _refuse(display, f"{kind} {name[:60]!r}")
    for table in sorted(present & tables):
        quoted = '"' + table + '"'
        columns = connection.exec_driver_sql(f"PRAGMA table_xinfo({quoted})").all()
        if any(row[6] for row in columns):  # hidden 2, 3: a generated column; 1: virtual
            raise _refuse(display, f"a computed column in {table!r}")
        if any(row[4] is not None for row in columns):  # the tool's tables have no default
            raise _refuse(display, f"a column default in {table!r}")
        if _CHECK.search(sql.get(table) or ""):
            raise _refuse(display, f"a check constraint in {table!r}")
        for index in connection.exec_driver_sql(f"PRAGMA index_list({quoted})").all():
            name = '"' + str(index[1]).replace('"', '""') + '"'
            columns = connection.exec_driver_sql(f"PRAGMA index_xinfo({name})").all()
            if index[4] or any(row[1] == -2 for row in columns):  # partial, on an expression
                raise _refuse(display, f"index {str(index[1])[:60]!r} with an expression")


# One row per name the tool uses: what it resolves to and what could run SQL there.
_PG_CHECK = sa.text("""
SELECT c.relkind::text AS kind, c.relrowsecurity AS rls,
  (SELECT count(*) FROM pg_catalog.pg_trigger t
     WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) AS triggers,
  (SELECT count(*) FROM pg_catalog.pg_rules r JOIN pg_catalog.pg_namespace n
     ON n.nspname = r.schemaname WHERE n.oid = c.relnamespace AND r.tablename = c.relname)
     AS rules,
  (SELECT count(*) FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid) AS policies,
  (SELECT count(*) FROM pg_catalog.pg_constraint k
     WHERE k.conrelid = c.oid AND k.contype NOT IN ('p', 'f', 'u', 'n')) AS checks,
  (SELECT count(*) FROM pg_catalog.pg_index i
     WHERE i.indrelid = c.oid AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL))
     AS expressions,
  (SELECT count(*) FROM pg_catalog.pg_attrdef d
     WHERE d.adrelid = c.oid AND pg_catalog.pg_get_expr(d.adbin, d.adrelid)
       !~ '^nextval\\(''[a-z_]*''::regclass\\)$') AS defaults
FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass(:name)
""")


def _check_postgres(connection: sa.Connection, display: str) -> None:
    for table in our_tables():
        found = connection.execute(_PG_CHECK, {"name": table}).first()
        if found is None:
            continue
        row = found._mapping
        if row["kind"] != "r":
            what = {"v": "view", "m": "materialized view", "f": "foreign table",
                    "p": "partitioned table"}.get(row["kind"], "relation")  # fmt: skip
            raise _refuse(display, f"a {what} named {table!r}")
        for key, word in (("triggers", "trigger"), ("rules", "rule"), ("policies", "policy"),
                          ("checks", "check constraint"), ("expressions", "expression index"),
                          ("defaults", "column default")):  # fmt: skip
            if row[key]:
                raise _refuse(display, f"a {word} on {table!r}")
        if row["rls"]:
            raise _refuse(display, f"row-level security on {table!r}")
