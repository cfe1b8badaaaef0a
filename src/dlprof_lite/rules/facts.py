"""Run facts: what the profiled process knows and the trace cannot show, as NVTX mark texts.

A fact is one mark in the ``dlprof-lite`` domain whose text is ``fact:`` followed by a JSON
object with one top-level key from :data:`~dlprof_lite.rules.names.FACT_KEYS`, e.g.
``fact:{"dataloader": {"num_workers": 4, "batch_size": 64}}``. The codec both sides share:
annotate writes with :func:`fact_text` (:mod:`dlprof_lite.annotate.facts`), the analysis
reads the ``marks`` frame with :func:`parse_fact`.
"""

from __future__ import annotations

import json
from typing import Any

from dlprof_lite.rules.names import FACT_KEYS, FACT_PREFIX


def fact_text(key: str, value: dict[str, Any]) -> str:
    """The mark text of one fact; ``ValueError`` for a key that is not documented."""
    if key not in FACT_KEYS:
        raise ValueError(f"fact key must be one of {', '.join(FACT_KEYS)}, not {key!r}")
    return FACT_PREFIX + json.dumps({key: value}, separators=(",", ":"), default=str)


def parse_fact(text: str) -> tuple[str, dict[str, Any]] | None:
    """``(key, value)`` of a fact mark's text; ``None`` for any other or a malformed mark."""
    if not text.startswith(FACT_PREFIX):
        return None
    try:
        data = json.loads(text[len(FACT_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(data, dict) or len(data) != 1:
        return None
    ((key, value),) = data.items()
    if key not in FACT_KEYS or not isinstance(value, dict):
        return None
    return key, value
