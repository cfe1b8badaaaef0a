"""What-if against reality: real runs under the real nsys, the prediction for a slow run
against the fast run measured.

``tests/real_scripts/idle_causes.py`` (14 steps of about 10 ms of matrix work on the CPU) is
run by the real command four ways: plain, with the layer ``slow`` sleeping 40 ms per forward,
with a 40 ms sleep in the DataLoader's ``__getitem__``, and with ``slow`` sleeping while the
layer ``side`` sleeps 10 ms on a thread of its own. ``dlprof-lite whatif`` on the slow run,
with the delay scaled away (the factor from the script's own timing of its sleep and the
report's time of that layer or phase),
predicts the plain run's median step within 10 %; scaling ``side``, beside the path,
predicts no change.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dlprof_lite import Report
from dlprof_lite.report.critical.prediction import Prediction
from dlprof_lite.report.model import analysed
from dlprof_lite.rules.names import DOMAIN
from test_real_scripts import SCRIPTS

pytest.importorskip("torch")
pytestmark = [pytest.mark.nsys, pytest.mark.slow]

WITHIN = 0.10
SIZE = ("--steps", "14", "--width", "1024", "--batch", "256", "--features", "256")
RUNS = {
    "plain": (),
    "layer": ("--layer-sleep", "0.04"),
    "data": ("--data-sleep", "0.04"),
    "side": ("--layer-sleep", "0.04", "--side-sleep", "0.01"),
}


@pytest.fixture(scope="module")
def runs(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Report, dict]]:
    import json

    folder = tmp_path_factory.mktemp("whatif_real")
    out = {}
    for name, extra in RUNS.items():
        report, truth = folder / name, folder / f"{name}.json"
        cmd = [sys.executable, "-m", "dlprof_lite", "--quiet", "--nsys", nsys, "-o", str(report),
               str(SCRIPTS / "idle_causes.py"), *SIZE, *extra, "--truth", str(truth)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=folder)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out[name] = (Report.open(report), json.loads(truth.read_text(encoding="utf-8")))
    return out


def _median_step(report: Report) -> float:
    return float(analysed(report.iterations)["wall_ns"].median())


def _sleep(truth: dict, key: str) -> float:
    return statistics.median(s.get(key, 0.0) for s in truth["steps"][1:]) * 1e9


def _own_time(report: Report, name: str) -> float:
    """The median per analysed step of what the scale selects: the layer ``slow``'s ranges
    (forward and backward; slow.linear inside them), or the data phase's ranges."""
    import dlprof_lite
    from dlprof_lite.report.steps.window import step_of

    profile = dlprof_lite.load(report.summary.system.source)
    r = profile.ranges
    if name == "layer":
        mask = (r["layer"] == "slow") & r["module_direction"].notna()
    else:
        mask = (r["name"] == "data") & (r["domain"] == DOMAIN)
    mine = r[mask.to_numpy(bool)]
    step = step_of(mine["start_ns"].to_numpy(), profile.iterations)
    per_step = (mine["end_ns"] - mine["start_ns"]).groupby(step).sum()
    numbers = analysed(profile.iterations)["iteration"]
    return float(per_step.reindex(numbers, fill_value=0).median())


def _whatif(folder: Path, *scales: str) -> tuple[Prediction, str]:
    found = Report.open(folder).what_if(*scales)
    cmd = [sys.executable, "-m", "dlprof_lite", "whatif", str(folder)]
    for s in scales:
        cmd += ["--scale", s]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return found, done.stdout


def _folder(runs: dict, name: str) -> Path:
    report = runs[name][0]
    return Path(report.summary.system.source).parent


@pytest.mark.parametrize(("name", "what"), [("layer", "layer=slow"), ("data", "phase=data")])
def test_removing_a_delay_predicts_the_fast_run(runs: dict, name: str, what: str) -> None:
    slow, truth = runs[name]
    sleep = _sleep(truth, "layer_sleep" if name == "layer" else "data_sleep")
    own = _own_time(slow, name)  # what the scale selects, per step
    factor = max(0.0, 1 - sleep / own)
    found, printed = _whatif(_folder(runs, name), f"{what}:{factor:.4f}")
    fast = _median_step(runs["plain"][0])
    predicted = found.predicted_stats[0]
    print(f"{name}: slow run {_median_step(slow) / 1e6:.2f} ms, {what}:{factor:.4f} predicts "
          f"{predicted / 1e6:.2f} ms, the fast run measured {fast / 1e6:.2f} ms "
          f"({(predicted - fast) / fast * 100:+.1f} %)")  # the figures, with pytest -s
    assert abs(predicted - fast) <= WITHIN * fast, (predicted, fast, printed)
    # the observed figure is the slow run's own median step
    assert found.observed_stats[0] == pytest.approx(_median_step(slow), rel=0.02)
    assert "predicted" in printed and f"{(predicted / 1e6):,.3f} ms" in printed


def test_work_beside_the_path_predicts_no_change(runs: dict) -> None:
    found, _ = _whatif(_folder(runs, "side"), "layer=side:0")
    before, after = found.observed_stats[0], found.predicted_stats[0]
    print(f"side: observed {before / 1e6:.2f} ms, layer=side:0 predicts {after / 1e6:.2f} ms")
    assert abs(after - before) <= 0.01 * before, (before, after)
    # while removing slow's sleep is most of the step
    slower, _ = _whatif(_folder(runs, "side"), "layer=slow:0")
    assert slower.predicted_stats[0] < 0.5 * before
