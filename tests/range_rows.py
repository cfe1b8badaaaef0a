"""A hand-built ``ranges`` table from compact rows, shared by the analysis tests."""

from __future__ import annotations

import pandas as pd

from dlprof_lite.ingest.columns import base_columns, check_frame, coerce


def ranges(rows: list[tuple]) -> pd.DataFrame:
    """Rows ``(name, start, end, parent_index[, extras])`` in start order.

    Depth and path follow the parent chain; pid 1, tid 1, push/pop, default domain, closed,
    unless the ``extras`` dict says otherwise.
    """
    out: list[dict] = []
    for i, (name, start, end, parent, *more) in enumerate(rows):
        depth = 0 if parent < 0 else out[parent]["depth"] + 1
        path = name if parent < 0 else f"{out[parent]['path']}/{name}"
        rec = {
            "range_id": i, "name": name, "domain": "", "style": "push_pop", "pid": 1,
            "tid": 1, "end_tid": pd.NA, "start_ns": start, "end_ns": end, "closed": True,
            "depth": depth, "parent_id": parent, "path": path,
        }  # fmt: skip
        rec.update(more[0] if more else {})
        out.append(rec)
    frame = coerce(pd.DataFrame(out, columns=[c.name for c in base_columns("ranges")]), "ranges")
    check_frame(frame, "ranges", derived=False)
    return frame
