"""report.frames.groups against its oracle, pandas' own groupby(sort=False, dropna=False).

groups numbers the distinct combinations of a frame's columns on their codes (no hash
table sized for every row); the numbering, the first row of each group and the handling of
missing values must be exactly pandas'. Random frames mix the column kinds the report
groups on: categoricals with missing values, int64 ids over wide and narrow spans,
nullable integers, constant columns (one process, one GPU) and plain text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlprof_lite.report.frames import groups

KINDS = ("layer", "pid", "iteration", "constant", "constant_nullable", "text")


def random_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "layer": pd.Categorical(rng.choice(["conv1", "fc", None, "relu"], n)),
            # Spans from a few values to far beyond the dense table (10**11 apart).
            "pid": rng.integers(-3, 5, n) * 10 ** int(rng.integers(0, 12)),
            "iteration": pd.array(
                np.where(rng.random(n) < 0.2, None, rng.integers(0, 4, n)), dtype="Int64"
            ),
            "constant": np.full(n, 7),
            "constant_nullable": pd.array(np.full(n, 3), dtype="Int32"),
            "text": rng.choice(["a", "b"], n),
        }
    )


def oracle(
    frame: pd.DataFrame, columns: list[str], rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    chosen = frame[rows]
    grouped = chosen.groupby(columns, sort=False, dropna=False, observed=True)
    number = grouped.ngroup().to_numpy()
    first = np.flatnonzero(rows)[np.unique(number, return_index=True)[1]]
    return number, first


@pytest.mark.parametrize("seed", range(40))
def test_groups_number_as_pandas_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frame = random_frame(rng, int(rng.integers(1, 3000)))
    rows = rng.random(len(frame)) < 0.7
    columns = list(rng.permutation(KINDS)[: int(rng.integers(1, len(KINDS) + 1))])
    number, first = groups(frame, columns, rows)
    want_number, want_first = oracle(frame, columns, rows)
    assert number.tolist() == want_number.tolist(), columns
    assert first.tolist() == want_first.tolist(), columns


def test_no_rows_and_one_group() -> None:
    frame = random_frame(np.random.default_rng(0), 50)
    number, first = groups(frame, ["layer"], np.zeros(50, dtype=bool))
    assert number.size == 0 and first.size == 0
    rows = np.zeros(50, dtype=bool)
    rows[[3, 9, 40]] = True
    number, first = groups(frame, ["constant", "constant_nullable"], rows)
    assert number.tolist() == [0, 0, 0] and first.tolist() == [3]
