"""The compare study replayed from its committed fixtures: no live timing here.

The fixtures (tests/fixtures/compare_study: ``runs.tar.xz``, ``manifest.tsv``) are the report
tables of real runs of the bundled LeNet made on one machine at different times and loads by
``scripts/compare_study.py record``: unchanged code, and code with a known slowdown injected
into one layer. The oracle is what each run was: unchanged pairs must rarely be called a
change, the injected layer must be found, and docs/compare.md must state the rates measured here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from compare_study import (
    DESIGNS,
    FIXTURE,
    RESAMPLED_PAIRS,
    SIZES_PCT,
    Outcome,
    _manifest,
    compare_pairs,
    fixture_records,
    markdown,
    resampled_false_rates,
    resampled_markdown,
    study_pairs,
)

if TYPE_CHECKING:
    from dlprof_lite.store.record import RunRecord

PAGE = Path(__file__).resolve().parents[1] / "docs" / "compare.md"


@pytest.fixture(scope="module")
def records() -> dict[str, RunRecord]:
    return fixture_records(FIXTURE)


@pytest.fixture(scope="module")
def outcomes(records: dict[str, RunRecord]) -> list[Outcome]:
    return compare_pairs(records, _manifest(FIXTURE))


def _rows(outcomes: list[Outcome], design: str, pct: int) -> list[Outcome]:
    return [o for o in outcomes if o.design == design and o.pct == pct]


def test_the_pairs_are_disjoint_and_enough() -> None:
    pairs = study_pairs(_manifest(FIXTURE))
    for design in DESIGNS:
        for pct in (0, *SIZES_PCT):
            chosen = [(a, b) for d, p, a, b in pairs if d == design and p == pct]
            assert len(chosen) >= 20, (design, pct)
            for a, b in chosen:
                assert not set(a) & set(b)  # a run is never on both sides of a pair
            if pct == 0:  # unchanged pairs: no run in two pairs of a design
                used = [n for a, b in chosen for n in (*a, *b)]
                assert len(used) == len(set(used)), design


def test_runs_as_samples_call_far_fewer_unchanged_pairs_different_than_pooled_steps(
    outcomes: list[Outcome],
) -> None:
    """The oracle is what the runs were: unchanged code. A test over pooled steps (the rule
    before) calls most of these pairs different; with runs as the samples one run a side
    never claims a change and three a side claim one in at most a quarter as many pairs."""
    one = _rows(outcomes, DESIGNS[0], 0)
    assert one and not any(o.verdict in ("slower", "faster") for o in one)  # never tested
    assert sum(o.pooled_differ for o in one) > len(one) / 2  # the old rule: most of them
    for design in DESIGNS[1:]:
        rows = _rows(outcomes, design, 0)
        claimed = sum(o.verdict in ("slower", "faster") for o in rows)
        pooled = sum(o.pooled_differ for o in rows)
        assert pooled > len(rows) / 2 and 4 * claimed <= pooled, (design, claimed, pooled)


def test_three_runs_a_side_call_at_most_5_percent_of_unchanged_pairs_changed(
    outcomes: list[Outcome],
) -> None:
    """Back to back and spread in time: neither the step nor any layer of unchanged code is
    called slower or faster in more than 5 % of the disjoint pairs."""
    for design in DESIGNS[1:]:
        rows = _rows(outcomes, design, 0)
        claimed = sum(o.verdict in ("slower", "faster") for o in rows)
        flagged = sum(o.layer_flagged for o in rows)
        assert claimed <= 0.05 * len(rows) and flagged <= 0.05 * len(rows), (design, claimed,
                                                                                flagged)


def test_overlapping_unchanged_pairs_and_the_page_agree(records: dict[str, RunRecord]) -> None:
    """The finer estimate over overlapping pairs of unchanged triples: within 5 % too, and
    the table docs/compare.md shows."""
    rates = resampled_false_rates(records, _manifest(FIXTURE), RESAMPLED_PAIRS)
    assert set(rates) == set(DESIGNS[1:])
    for design, (n, step, layer) in rates.items():
        assert n == RESAMPLED_PAIRS
        assert step <= 0.05 * n and layer <= 0.05 * n, (design, step, layer)
    assert resampled_markdown(rates) in PAGE.read_text(encoding="utf-8")


def test_a_10_percent_slowdown_in_one_layer_is_found_with_three_runs_a_side(
    outcomes: list[Outcome],
) -> None:
    for design in DESIGNS[1:]:
        rows = _rows(outcomes, design, 10)
        found = sum(o.layer_found for o in rows)
        assert found >= 0.9 * len(rows), (design, found, len(rows))


def test_the_compare_page_states_the_measured_rates(outcomes: list[Outcome]) -> None:
    assert markdown(outcomes) in PAGE.read_text(encoding="utf-8")
