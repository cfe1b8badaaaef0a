"""The JSON writer's fast row path: what it writes parses back to the frame."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dlprof_lite.render.writers import JsonWriter, Table


def test_rows_round_trip_through_the_fast_encoder() -> None:
    frame = pd.DataFrame({
        "path": ["a/b", "c\\/d", "\\", "/", "前向/ü"],
        "n": pd.array([1, None, 3, 4, 5], dtype="Int64"),
        "x": [np.inf, 1.5, np.nan, 2 / 3, 1e15 + 0.5],
        "flag": [True, False, True, False, True],
        "cat": pd.Categorical(["k", "k", "m", "k", "m"]),
    })  # fmt: skip
    doc = json.loads(JsonWriter().render(Table("kernels", frame)))
    assert doc["schema"] == "dlprof-lite/1" and doc["table"] == "kernels"
    rows = doc["rows"]
    assert [r["path"] for r in rows] == list(frame["path"])
    assert [r["n"] for r in rows] == [1, None, 3, 4, 5]
    # Floats keep 15 decimals (pandas' limit), ample for nanosecond averages.
    x = [r["x"] for r in rows]
    assert x[0] is None and x[2] is None
    np.testing.assert_allclose([x[1], x[3], x[4]], [1.5, 2 / 3, 1e15 + 0.5], rtol=1e-14)
    assert [r["flag"] for r in rows] == list(frame["flag"])
    assert [r["cat"] for r in rows] == ["k", "k", "m", "k", "m"]


def test_empty_table_has_an_empty_rows_list() -> None:
    doc = json.loads(JsonWriter().render(Table("kernels", pd.DataFrame({"a": []}))))
    assert doc["rows"] == []
