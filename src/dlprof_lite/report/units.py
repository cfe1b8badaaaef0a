"""How the report's figures are written for people: durations, shares, and what a share is of.

Part of the report's model (``render`` and the analyses both read it): the console, the page,
the advice and ``compare`` write every duration as :mod:`dlprof_lite.durations` does and name
every share's
denominator with :func:`of_scope`, so that they say the same thing as the JSON.
"""

from __future__ import annotations

from dlprof_lite.durations import short
from dlprof_lite.report.summary_types import number

# Each ``*_scope`` value of the summary, as a sentence names it ("busy 7 % of <this>").
DENOMINATORS = {
    "session": "the session",
    "event_span": "the events' span",
    "iterations": "the analysed steps",
    "active_span": "each GPU's active span",
}


def duration(value: object) -> str:
    """A nanosecond value (any number type) as :func:`dlprof_lite.durations.short` writes it,
    '-' when unknown."""
    ns = number(value)
    return "-" if ns is None else short(ns)


def percent(value: object, scale: float = 100.0) -> str:
    """A share (0-1; ``scale=1`` for a value already in %) as '12.3%', '-' when unknown."""
    share = number(value)
    return "-" if share is None else f"{share * scale:.1f}%"


def of_scope(scope: object) -> str:
    """``the session``, ``the analysed steps``...: the denominator a ``*_scope`` value names."""
    return DENOMINATORS.get(str(scope), "an unknown span")


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def flops(value: object, unit: str = "FLOP") -> str:
    """A FLOP count (or with ``unit="FLOP/s"`` a rate) with an SI prefix: '1.23 GFLOP',
    '45.6 TFLOP/s'; '-' when unknown."""
    amount = number(value)
    if amount is None:
        return "-"
    for scale, prefix in _SI:
        if abs(amount) >= scale:
            return f"{amount / scale:.3g} {prefix}{unit}"
    return f"{amount:.3g} {unit}"


def bytes_text(value: object) -> str:
    """A byte count in binary units: '512 B', '1.5 KiB', '3.2 GiB'; '-' when unknown."""
    amount = number(value)
    if amount is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(amount) < 1024 or unit == "GiB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return "-"
