"""build_report(projection=...) gives the summary the separate reproject step gave: the same
projection figures, warnings and every other field (pipeline.analyze_profile now passes the
user's steps per epoch and epochs straight to build_report)."""

from __future__ import annotations

import pytest

from dlprof_lite.report.build import build_report
from dlprof_lite.report.steps.projection import NO_PROJECTION, ProjectionInput, reproject
from test_projection import two_epochs


@pytest.mark.parametrize("loaders", [None, ()], ids=["dataloader", "no-dataloader"])
@pytest.mark.parametrize("given", [ProjectionInput(10, 3), ProjectionInput(None, 2),
                                   ProjectionInput(4, None)], ids=str)  # fmt: skip
def test_projection_in_build_report_equals_reproject(loaders, given: ProjectionInput) -> None:
    profile = two_epochs() if loaders is None else two_epochs(loaders=loaders)
    before = build_report(profile)
    old = reproject(before.summary, profile, before.iterations, given)
    new = build_report(profile, projection=given).summary
    assert new == old
    assert new.row() == old.row() and new.document() == old.document()
    if new.projection.projection_train_ns is not None:  # no steps per epoch: no projection
        assert new.projection.projection_epochs == (given.epochs or 1)
    else:
        assert any(w.startswith(NO_PROJECTION) for w in new.warnings)


def test_the_user_input_reaches_the_summary() -> None:
    profile = two_epochs(loaders=())
    assert any(w.startswith(NO_PROJECTION) for w in build_report(profile).summary.warnings)
    p = build_report(profile, projection=ProjectionInput(10, 3)).summary.projection
    assert (p.projection_steps_per_epoch, p.projection_epochs) == (10, 3)
    assert p.projection_train_ns == 18_400 + 3 * (10 * 1_600 + 10_000)
