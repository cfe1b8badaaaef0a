"""Issue #14's "done when" on real runs: LeNet profiled under the real nsys with and without
5 ms of busy work in one layer's forward (``examples/lenet.py --slow-layer conv2``);
``compare`` must size the second run's change (one run a side: not tested), fail the gate
beyond its minimum effect and name that layer first, and ``--repeat`` must give one group
that ``compare`` pools and tests on its runs, with its within-run and between-run spread.

The oracle is the injected work: the slowed layer's forward grows by at least the 5 ms it
spins (the loop never returns early), and by no more than three times that (a loaded machine
can preempt the loop; a figure counted twice would pass 10 ms every time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.nsys, pytest.mark.slow]

LENET = Path(__file__).resolve().parents[1] / "examples" / "lenet.py"
SLEEP_MS = 5.0


def dlprof(nsys: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dlprof_lite", *args]
    if args[0] not in ("compare", "runs"):
        cmd[3:3] = ["--nsys", nsys]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def lenet_runs(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("lenet")
    db = f"sqlite:///{root / 'runs.db'}"
    script = [sys.executable, str(LENET), "--steps", "30", "--batch-size", "32"]
    for name, extra in (("base", []), ("slow", ["--slow-layer", "conv2", "--slow-ms",
                                                str(SLEEP_MS)]),
                        ("wide", ["--conv2-channels", str(4 * 30)])):  # fmt: skip
        done = dlprof(nsys, root, "--quiet", "--db", db, "--tag", name, "-o", name, "--",
                      *script, *extra)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    done = dlprof(nsys, root, "--quiet", "--db", db, "--tag", "rep", "--repeat", "3", "-o",
                  "rep", "--", *script[:3], "10", "--batch-size", "32")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {"root": root, "db": db}


def compare(runs: dict[str, object], *args: str) -> tuple[int, dict, str]:
    root = Path(str(runs["root"]))
    out = root / ("cmp-" + "-".join(a.strip("#") for a in args if not a.startswith("-")))
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "compare", *args, "-o", str(out), "--db",
         str(runs["db"])],
        capture_output=True, text=True, timeout=300, cwd=root,
    )  # fmt: skip
    assert (out / "compare.json").is_file(), done.stderr[-3000:]
    return done.returncode, json.loads((out / "compare.json").read_text()), done.stdout


def test_the_slowed_layer_is_named_first_and_the_gate_fails(lenet_runs) -> None:
    code, doc, out = compare(lenet_runs, "base", "slow", "--gate", "10")
    (step,) = doc["steps"]
    assert step["verdict"] == "not tested (one run a side)" and step["p_value"] is None
    # The one-run gate: beyond 10 % and beyond the minimum effect (twice the steps' own
    # spread, wide when a loaded machine scatters the steps) fails, else passes.
    change, minimum = step["median_pct"]["value"], step["minimum_effect_pct"]
    sides = {s["label"]: s for s in doc["sides"]}
    spread = max((s["p90_ns"] - s["p10_ns"]) / 2 / s["median_ns"] * 100 for s in sides.values())
    assert minimum == pytest.approx(2 * spread)
    assert (code == 1) == (change > max(10.0, minimum))
    assert ("gate: failed" in out) == (code == 1) and "not a significance test" in out
    layers = [d for d in doc["deltas"] if d["section"] == "layer" and d["status"] == "both"]
    first = min(layers, key=lambda d: d["rank"])
    assert (first["name"], first["direction"]) == ("conv2", "forward")
    # The busy loop never returns early: the slowed side holds it; the change is at least
    # the 5 ms less conv2's own baseline median (that median wanders on a loaded machine).
    assert first["value"] >= SLEEP_MS * 1e6
    assert first["delta"] == pytest.approx(first["value"] - first["baseline_value"])
    assert SLEEP_MS * 1e6 - first["baseline_value"] <= first["delta"] <= 3 * SLEEP_MS * 1e6
    # The step grew by the sleep too: its median change is at least most of it.
    assert step["median_ns"]["value"] >= 0.8 * SLEEP_MS * 1e6
    # The console names the layer in its layer table.
    assert "conv2" in out.split("layers")[1]


def test_a_widened_layer_is_named_first_with_its_flops(lenet_runs) -> None:
    """conv2 four times as wide (30 -> 120 channels): it is the first layer of the deltas,
    its FLOPs per step are four times the baseline's in both directions (the count is
    exact: the same shapes but the channels), and the warnings say the sides do different
    work, naming it."""
    _, doc, out = compare(lenet_runs, "base", "wide")
    layers = [d for d in doc["deltas"] if d["section"] == "layer" and d["status"] == "both"]
    first = min(layers, key=lambda d: d["rank"])
    assert first["name"] == "conv2"
    for direction in ("forward", "backward"):
        (row,) = [d for d in layers if d["name"] == "conv2" and d["metric"] == "flops"
                  and d["direction"] == direction]  # fmt: skip
        assert row["baseline_value"] > 0
        assert row["value"] == pytest.approx(4 * row["baseline_value"])
    (warning,) = [w for w in doc["warnings"] if w.startswith("layer FLOPs per step differ")]
    assert "conv2" in warning and "different work" in warning
    assert "FLOPs per step differ" in out
    model = [d for d in doc["deltas"] if d["section"] == "summary"
             and d["metric"] == "model_flops_per_step"]  # fmt: skip
    assert model and model[0]["value"] > model[0]["baseline_value"] > 0


def test_the_faster_side_passes_the_gate(lenet_runs) -> None:
    code, doc, _ = compare(lenet_runs, "slow", "base", "--gate", "10")
    assert doc["steps"][0]["median_pct"]["value"] < -10
    assert code == 0


def test_repeat_gives_one_pooled_group_with_both_spreads(lenet_runs) -> None:
    root = Path(str(lenet_runs["root"]))
    folders = sorted(p.name for p in (root / "rep").iterdir())
    assert folders == ["run-1.dlprof", "run-2.dlprof", "run-3.dlprof"]
    listed = json.loads(subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "runs", "--json", "--tag", "rep", "--db",
         str(lenet_runs["db"])], capture_output=True, text=True, timeout=120, check=True,
    ).stdout)  # fmt: skip
    assert len(listed) == 3 and {r["group"] for r in listed} == {"rep"}
    assert sorted(r["report_dir"] for r in listed) == [str(root / "rep" / f) for f in folders]
    # The group by tag and by its folder: the same pooled steps, three runs.
    for side in ("rep", str(root / "rep")):
        _, doc, _ = compare(lenet_runs, side, "base")
        pooled = doc["sides"][0]
        assert pooled["runs"] == 3 and pooled["n"] == sum(r["steps"] for r in listed)
        assert pooled["within_run_std_ns"] > 0 and pooled["between_run_std_ns"] >= 0
        # Three runs against one: tested, the single run against the group's spread.
        step = doc["steps"][0]
        assert step["tested"] and step["method"].startswith("runs: t-test of the single run")
        assert step["p_value"] is not None and step["power"] is not None
