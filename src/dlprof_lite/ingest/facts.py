"""Run facts parsed once: the ``facts`` frame of a Profile, from its ``marks``.

The annotation writes each fact as an NVTX mark of the ``dlprof-lite`` domain whose text is
``fact:`` and a JSON object (the codec: :mod:`dlprof_lite.rules.facts`). Here every such mark
is parsed, once, when a Profile is built; the report reads the frame (data-loader settings,
annotation cost, ranks, module shapes, folded modules, DDP buckets, the projection's
epochs), never the mark texts. Malformed facts and marks of other domains are left out.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.rules.facts import parse_fact
from dlprof_lite.rules.names import DOMAIN, FACT_PREFIX

# One row per fact, in time order (a stable sort keeps the order of facts written at once);
# ``tid`` the thread that wrote it (-1 where the marks have none).
FACT_COLUMNS = ("start_ns", "pid", "tid", "key", "value")


def facts_of(marks: pd.DataFrame) -> pd.DataFrame:
    """The run facts among ``marks``: ``start_ns``, ``pid`` and ``tid`` (int64), ``key`` (a
    :data:`~dlprof_lite.rules.names.FACT_KEYS` name) and ``value`` (its dict)."""
    rows: list[tuple[int, int, int, str, dict[str, object]]] = []
    if len(marks):
        ours = cat_mask(marks["name"], lambda s: s.str.startswith(FACT_PREFIX)) & (
            marks["domain"].astype(object) == DOMAIN).to_numpy(dtype=bool)  # fmt: skip
        found = marks[ours].sort_values("start_ns", kind="stable")
        tids = found["tid"].to_numpy() if "tid" in found.columns else [-1] * len(found)
        for text, start, pid, tid in zip(found["name"].astype(str), found["start_ns"].to_numpy(),
                                         found["pid"].to_numpy(), tids, strict=True):  # fmt: skip
            fact = parse_fact(text)
            if fact is not None:
                rows.append((int(start), int(pid), int(tid), fact[0], fact[1]))
    frame = pd.DataFrame(rows, columns=list(FACT_COLUMNS))
    return frame.astype({"start_ns": "int64", "pid": "int64", "tid": "int64", "key": object,
                         "value": object})  # fmt: skip
