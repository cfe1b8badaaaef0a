"""Rows no capture can hold, found at read time: dropped with a counted warning, never silently.

nsys writes every GPU op, API call and range with ``start <= end`` on one session clock, so a
row ending before it starts, or a timestamp beyond :data:`TIME_LIMIT_NS` of the clock's
origin, comes from a damaged or edited export (issue 13, item 5). Dropping such rows keeps
every duration downstream >= 0 and every sum inside int64; the rest of the file is still
analysed, and the profile's warnings say how many rows went and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError

# 2**53 ns is 104 days: longer than any capture, and every time within it is exact in
# float64 (the report's means and shares). Real exports start slightly before 0 at most
# (-0.67 s in the corpus).
TIME_LIMIT_NS = 2**53
# Sums of durations or bytes past this would overflow the report's int64 totals.
SUM_LIMIT = 2**62


class Repairs:
    """Warnings about what the reader dropped or renamed, in the order they happened."""

    def __init__(self) -> None:
        self._notes: list[str] = []

    def note(self, message: str) -> None:
        self._notes.append(message)

    def warnings(self) -> tuple[str, ...]:
        return tuple(self._notes)


def sane_ops(frame: pd.DataFrame, what: str, repairs: Repairs) -> pd.DataFrame:
    """``frame`` without rows whose end is before their start or whose times are extreme.

    ``end_ns`` may be nullable (an NVTX range never closed): such a row is kept.
    """
    if frame.empty:
        return frame
    start = frame["start_ns"].to_numpy(dtype=np.int64)
    end_col = frame["end_ns"]
    if isinstance(end_col.dtype, pd.Int64Dtype):
        open_ = end_col.isna().to_numpy()
        end = np.where(open_, start, end_col.to_numpy(dtype=np.int64, na_value=0))
    else:
        end = end_col.to_numpy(dtype=np.int64)
    # Compared, not abs(): abs(INT64_MIN) overflows.
    extreme = (start < -TIME_LIMIT_NS) | (start > TIME_LIMIT_NS)
    extreme |= (end < -TIME_LIMIT_NS) | (end > TIME_LIMIT_NS)
    backwards = ~extreme & (end < start)
    negative = np.zeros(len(frame), dtype=bool)
    if "bytes" in frame.columns:  # a copy or set of fewer than 0 bytes
        negative = ~extreme & ~backwards & (frame["bytes"].to_numpy(dtype=np.int64) < 0)
    bad = extreme | backwards | negative
    if not bad.any():
        return frame
    parts = []
    if backwards.any():
        parts.append(f"{int(backwards.sum())} end before they start")
    if extreme.any():
        parts.append(f"{int(extreme.sum())} have a time beyond ±{TIME_LIMIT_NS} ns (104 days)")
    if negative.any():
        parts.append(f"{int(negative.sum())} have a negative byte count")
    repairs.note(
        f"{int(bad.sum())} of {len(frame)} {what} dropped as impossible "
        f"({'; '.join(parts)}): the export is damaged or was edited"
    )
    return frame.loc[~bad].reset_index(drop=True)


def sane_totals(path: Path, frames: dict[str, pd.DataFrame]) -> None:
    """Refuse an export whose durations or byte counts add up past int64 (sums wrap there).

    Every sum ingest and the report take is over a subset of one of these columns (range
    times over nested ranges: at most depth x the ranges' total), so none can wrap once the
    whole column's total is within :data:`SUM_LIMIT`.
    """
    for what, frame in frames.items():
        for column in ("dur_ns", "bytes"):
            if frame.empty or column not in frame.columns:
                continue
            values = frame[column].to_numpy(dtype=np.float64, na_value=0.0)
            total = float(np.abs(values).sum())
            if total >= SUM_LIMIT:
                unit = "bytes" if column == "bytes" else "times"
                raise InputError(
                    f"{path}: {what} {unit} add up to {total:.3g}, past what 64-bit totals "
                    "hold: not the values of one capture; the export is damaged or was edited"
                )


def as_text(values: Any) -> tuple[Any, int]:
    """A text column as text, and how many BLOBs it held: a categorical or all-``str`` array
    as it is; otherwise bytes (a BLOB where text belongs) decoded with U+FFFD replacements,
    NULL as '', numbers as their digits."""
    text_kinds = ("string", "empty")
    if isinstance(values, pd.Categorical) and (
        pd.api.types.infer_dtype(values.categories, skipna=False) in text_kinds
    ):
        return values, 0
    values = np.asarray(values, dtype=object)
    if pd.api.types.infer_dtype(values, skipna=False) in text_kinds:
        return values, 0
    blobs = sum(isinstance(v, (bytes, bytearray, memoryview)) for v in values)
    out = np.empty(len(values), dtype=object)
    out[:] = [_text(v) for v in values]
    return out, blobs


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode(errors="replace")
    return "" if value is None else str(value)
