"""Exact integer arithmetic over numpy arrays that more than one stage needs.

A shared leaf (``tests/test_stages.py``): it imports numpy only.
"""

from __future__ import annotations

import numpy as np


def sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group number (``n`` groups; bincount's float
    weights would round past 2**53)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, values)
    return out
