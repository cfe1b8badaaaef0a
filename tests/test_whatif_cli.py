"""``dlprof-lite whatif``: a report folder or an export, its steps replayed with work scaled;
bad input is one line and a non-zero exit, the folder and the export untouched.

Oracles: scaling by 1 predicts exactly the observed steps (replay gives the export back);
the folder and its export predict the same; a scaled kernel can only lengthen the steps by
at most what it adds per step, nor shorten them by more than what it saves per step.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from dlprof_lite import Report
from dlprof_lite.cli import main
from dlprof_lite.whatif import predict_from
from make_profile import make_profile


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("whatif")
    export = base / "p.sqlite"
    make_profile(export, iterations=12, layers=3, kernels_per_layer=2, seed=7)
    out = base / "p.dlprof"
    assert main(["analyze", str(export), "-o", str(out), "--quiet", "--no-db"]) == 0
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scaling_by_one_predicts_the_observed_steps(folder: Path) -> None:
    report = Report.open(folder)
    layer = str(report.critical["layer"].replace("", np.nan).dropna().iloc[0])
    found = report.what_if(f"layer={layer}:1")
    assert np.array_equal(found.predicted, found.observed)
    assert found.change_pct == 0
    assert found.observed.size == report.summary.window.iterations_analysed


def test_the_folder_and_its_export_predict_the_same(folder: Path, capsys) -> None:
    report = Report.open(folder)
    export = Path(report.summary.system.source)
    a = predict_from(folder, ["kernel=.:0.5"])
    b = predict_from(export, ["kernel=.:0.5"])
    assert np.array_equal(a.predicted, b.predicted)
    assert main(["whatif", str(folder), "--scale", "kernel=.:0.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"what-if on {folder}: {a.observed.size} analysed steps\n")
    assert f"median {a.predicted_stats[0] / 1e6:,.3f} ms" in out


def test_a_scaled_kernel_moves_the_steps_by_at_most_its_own_change(folder: Path) -> None:
    from dlprof_lite.ingest.load import load

    report = Report.open(folder)
    profile = load(report.summary.system.source)
    name = str(profile.kernels["short_name"].value_counts().index[0])
    per_step = profile.kernels[profile.kernels["short_name"] == name].groupby("iteration")[
        "dur_ns"].sum().median()  # fmt: skip
    for factor in (0.0, 0.5, 2.0):
        found = report.what_if(f"kernel=^{name}$:{factor}")
        change = found.predicted_stats[0] - found.observed_stats[0]
        assert abs(change) <= abs(factor - 1) * per_step * 1.01 + 1, (factor, change, per_step)
        assert (change <= 0) == (factor <= 1) or change == 0


@pytest.mark.parametrize("scale", ["layer=a", "nope=a:1", "layer=a:-2", "kernel=(:1",
                                   "layer=no-such-layer:0.5", "phase=lunch:0"])  # fmt: skip
def test_bad_scales_are_one_line(folder: Path, scale: str, capsys) -> None:
    before = {p.name: _digest(p) for p in folder.iterdir() if p.is_file()}
    assert main(["whatif", str(folder), "--scale", scale]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlprof-lite: error: ") and err.count("\n") == 1, err
    assert {p.name: _digest(p) for p in folder.iterdir() if p.is_file()} == before


def test_a_folder_whose_profile_is_gone_says_what_to_give(folder: Path, tmp_path, capsys) -> None:
    moved = tmp_path / "moved"
    Report.open(folder).with_source(str(tmp_path / "gone.sqlite")).save(moved)
    assert main(["whatif", str(moved), "--scale", "kernel=.:0.5"]) == 2
    err = capsys.readouterr().err
    assert "is not there any more" in err and "whatif PROFILE.sqlite" in err
    assert err.count("\n") == 1


def test_a_kernel_that_is_not_there_lists_those_that_are(folder: Path, capsys) -> None:
    assert main(["whatif", str(folder), "--scale", "kernel=^no_such_kernel$:0.5"]) == 2
    err = capsys.readouterr().err
    assert "no kernel '^no_such_kernel$'" in err and "vectorized_elementwise_kernel" in err


def test_no_scale_is_a_usage_error(folder: Path, capsys) -> None:
    assert main(["whatif", str(folder)]) == 2
    assert "--scale" in capsys.readouterr().err
