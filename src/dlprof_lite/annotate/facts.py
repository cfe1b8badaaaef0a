"""Run facts written by the profiled process: one NVTX mark each (the text's codec is
:mod:`dlprof_lite.rules.facts`); nothing here imports torch or pandas.
"""

from __future__ import annotations

from typing import Any

from dlprof_lite.annotate.backend import get_backend
from dlprof_lite.rules.facts import fact_text


def record(key: str, value: dict[str, Any]) -> None:
    """Write one fact mark (nothing when annotation is off)."""
    text = fact_text(key, value)
    backend = get_backend()
    if backend is not None:
        backend.mark(text)
