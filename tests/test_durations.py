"""Every duration format of dlprof-lite (dlprof_lite/durations.py), against hand-written text."""

from __future__ import annotations

import pytest

from dlprof_lite import durations as d


@pytest.mark.parametrize(
    ("form", "ns", "text"),
    [
        (d.short, 850, "850 ns"), (d.short, 12_340, "12.3 µs"), (d.short, 4_561_000, "4.56 ms"),
        (d.short, 1_234_000_000, "1.23 s"), (d.short, -2_500_000, "-2.50 ms"),
        (d.signed, 1_200_000, "+1.20 ms"), (d.signed, -1_200_000, "-1.20 ms"),
        (d.signed, 0, "0 ns"),
        (d.long, 12_300_000_000, "12.3 s"), (d.long, 270e9, "4.5 min"), (d.long, 3600e9, "1.0 h"),
        (d.in_ms, 12_345_678, "12.35 ms"), (d.coarse, 12_340_000, "12.3 ms"),
        (d.coarse, 850, "850 ns"), (d.significant, 4_561_000, "4.56 ms"),
        (d.significant, 1_000, "1 µs"), (d.ms_from_100us, 250_000, "0.25 ms"),
        (d.ms_from_100us, 85_000, "85.0 µs"),
    ],
)  # fmt: skip
def test_each_form_writes_what_its_docstring_says(form: object, ns: float, text: str) -> None:
    assert form(ns) == text  # type: ignore[operator]


def test_in_ms_takes_its_digits_and_span_shares_the_larger_unit() -> None:
    assert d.in_ms(12_345_678, 3) == "12.346 ms"
    assert d.span(11.9e9, 12.8e9) == "11.9–12.8 s"
    assert d.span(500e6, 2e9) == "0.5–2.0 s"
