"""A run as the store writes it: plain Python values, no pandas and no SQLAlchemy.

:func:`dlprof_lite.store.rows.prepare` makes one from a :class:`RunRecord` (the pandas side);
:meth:`dlprof_lite.store.database.RunStore.insert` writes it, fitting each value to its
column (the SQL side). Neither side imports the other's libraries, so the run store's own
process (:mod:`dlprof_lite.store.beside`) records a run without importing pandas.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypedDict

Row = dict[str, object]

# The report tables a run keeps, each in its table of rows (store/schema.py ROW_TABLES).
ROW_TABLE_NAMES = ("iterations", "layers", "kernels")


class PreparedRun(TypedDict):
    """``run``: the runs row, text as it came (the writer makes it fit a text column);
    ``tables``: each report table's rows as plain JSON objects, in order; ``phases``: the
    phases per analysed step (``RunRecord.phases``), one object each."""

    run: Row
    tables: dict[str, list[Row]]
    phases: list[Row]


def utc(moment: datetime) -> datetime:
    """An aware UTC time; naive is local time (``datetime.astimezone``'s rule)."""
    return moment.astimezone(UTC)
