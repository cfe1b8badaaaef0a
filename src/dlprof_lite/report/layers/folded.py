"""Folded modules in the layers table: marked, and listed even when the window holds no call.

Place in the pipeline: report. After the warm-up step the annotation folds the modules too
short to time into their parent (rule in :mod:`dlprof_lite.rules.folding`): they write no
ranges from then on, and their time is in the parent's self time. The ``folded`` facts name
them (:func:`dlprof_lite.report.run_facts.folded_modules`): each with its median forward
call in the warm-up step and the layer whose self time holds it.

:func:`with_folded` gives every row its ``folded_call_ns`` (empty: not folded) and adds a row
for each folded module the window has no range of (the usual case: warm-up is left out), in
network order (after the module called just before it in the warm-up step), with the layer
that holds its time as its ``parent``, its type from its ``module`` fact, no calls and zero
time; ``order`` is renumbered.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dlprof_lite.rules.gemm import is_tc_eligible


def with_folded(
    layers: pd.DataFrame, folded: pd.DataFrame, types: Mapping[str, str | None]
) -> pd.DataFrame:
    """``layers`` (sorted in network order) with ``folded_call_ns`` and the missing folded
    modules' rows; ``folded``: :data:`~dlprof_lite.report.run_facts.FOLDED_COLUMNS`;
    ``types``: each layer's type from its ``module`` fact."""
    out = layers.reset_index(drop=True)
    median = dict(zip(folded["layer"], folded["folded_call_ns"], strict=True))
    out["folded_call_ns"] = out["layer"].map(median).astype("Int64")
    missing = folded[~folded["layer"].isin(set(out["layer"]))].reset_index(drop=True)
    if missing.empty or out.empty:
        return out
    rows = _blank(out, len(missing))
    rows["layer"] = missing["layer"].to_numpy(dtype=object)
    rows["parent"] = missing["into"].to_numpy(dtype=object)
    rows["type"] = [types.get(layer) for layer in missing["layer"]]
    rows["tc_eligible"] = pd.array([is_tc_eligible(t) if t else pd.NA for t in rows["type"]],
                                   dtype="boolean")  # fmt: skip
    rows["folded_call_ns"] = missing["folded_call_ns"].astype("Int64").array
    both = pd.concat([out, rows], ignore_index=True)
    place = _network_places(list(out["layer"]), missing)
    both = both.iloc[place].reset_index(drop=True)
    both["order"] = np.arange(1, len(both) + 1, dtype=np.int64)
    return both


def _network_places(table: list[str], missing: pd.DataFrame) -> list[int]:
    """Row positions of ``table`` then ``missing`` in network order: each folded module right
    after the module called just before it, else after the layer holding its time, else
    last (in fact order, which is network order: an earlier one is placed first)."""
    rows = list(range(len(table)))
    names = list(table)
    for i, (layer, into, after) in enumerate(zip(missing["layer"], missing["into"],
                                                 missing["after"], strict=True)):  # fmt: skip
        anchor = after if after in names else into
        at = names.index(anchor) + 1 if anchor in names else len(names)
        names.insert(at, layer)
        rows.insert(at, len(table) + i)
    return rows


def _blank(like: pd.DataFrame, n: int) -> pd.DataFrame:
    """``n`` rows with ``like``'s columns and dtypes: 0 in integer columns, missing elsewhere."""
    columns = {}
    for name, dtype in like.dtypes.items():
        numpy = isinstance(dtype, np.dtype)
        if numpy and dtype.kind in "iub":
            columns[name] = pd.Series(np.zeros(n, dtype=dtype))
        else:  # object (None), float64 (NaN), Int64 and boolean (NA)
            columns[name] = pd.Series([None] * n, dtype=dtype)
    return pd.DataFrame(columns)
