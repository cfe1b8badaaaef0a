"""Every way dlprof-lite writes a duration, in one place (nanoseconds in, text out).

A shared leaf (``tests/test_stages.py``): ingest's warnings, the report's advice, the console,
the page, the graph and ``compare`` all write durations with these. Each form has its use:

- :func:`short` (``850 ns``, ``12.3 µs``, ``4.56 ms``, ``1.23 s``): the default, in the
  largest unit it reaches with two decimals in ms and s; :func:`signed` with its sign (a
  change: ``+1.20 ms``);
- :func:`long` (up to hours: ``12.3 s``, ``4.5 min``, ``1.0 h``) and :func:`span` (two in the
  unit of the larger): projected training times;
- :func:`in_ms` (fixed milliseconds, ``12.35 ms``): tables whose rows are read down a column;
- :func:`coarse` (one decimal, ``12.3 ms``): warnings that name a guess's step time;
- :func:`significant` (three significant digits, ``4.56 ms``): the layer graph's labels;
- :func:`ms_from_100us` (``0.25 ms``, ``85.0 µs``): per-step communication in the advice.
"""

from __future__ import annotations

# Units for long durations, largest first: (nanoseconds per unit, name, decimals).
_UNITS = ((3600e9, "h", 1), (60e9, "min", 1), (1e9, "s", 1), (1e6, "ms", 2), (1e3, "µs", 1),
          (1.0, "ns", 0))  # fmt: skip
_SHORT = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))


def short(ns: float) -> str:
    """``850 ns``, ``12.3 µs``, ``4.56 ms``, ``1.23 s``."""
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def signed(ns: float) -> str:
    """:func:`short` with a ``+`` before a positive duration (a change)."""
    return ("+" if ns > 0 else "") + short(ns)


def _unit(ns: float) -> tuple[float, str, int]:
    return next((u for u in _UNITS if abs(ns) >= u[0]), _UNITS[-1])


def long(ns: float) -> str:
    """A duration up to hours, in the largest unit it reaches: ``12.3 s``, ``1.0 h``."""
    scale, name, digits = _unit(ns)
    return f"{ns / scale:.{digits}f} {name}"


def span(low: float, high: float) -> str:
    """Two durations in the unit of the larger: ``11.9–12.8 s``."""
    scale, name, digits = _unit(max(abs(low), abs(high)))
    return f"{low / scale:.{digits}f}–{high / scale:.{digits}f} {name}"


def in_ms(ns: float, digits: int = 2) -> str:
    """Milliseconds with ``digits`` decimals: ``12.35 ms``."""
    return f"{ns / 1e6:.{digits}f} ms"


def coarse(ns: float) -> str:
    """One decimal in the largest unit it reaches: ``12.3 ms``, ``850 ns``."""
    for scale, unit in _SHORT:
        if ns >= scale:
            return f"{ns / scale:.1f} {unit}"
    return f"{ns:.0f} ns"


def significant(ns: float) -> str:
    """Three significant digits in the largest unit it reaches: ``4.56 ms``, ``850 ns``."""
    for scale, unit in _SHORT:
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def ms_from_100us(ns: float) -> str:
    """Milliseconds with two decimals from 0.1 ms up (``0.25 ms``), else microseconds."""
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 1e5 else f"{ns / 1e3:.1f} µs"
