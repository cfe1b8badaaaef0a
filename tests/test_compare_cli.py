"""``dlprof-lite compare`` and ``runs`` end to end, on generated profiles whose step times
are known (scripts/make_profile.py writes each iteration's bounds into its ground truth).

The oracle is the generator: B − A of the median step time computed from the truth's
iteration bounds must be the comparison's point estimate and lie inside its 95 % interval;
two profiles drawn from the same model are "no significant change"; ``--gate`` exits 1 only
for a significant slowdown beyond its limit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dlprof_lite.cli import main
from make_profile import make_profile


def truth_steps(truth_path: Path, report: Path) -> np.ndarray:
    """Step times from the generator's iteration bounds, as the report defines an iteration
    (from the previous one's end), for the iterations the report analysed."""
    truth = json.loads(truth_path.read_text())["iterations"][0]
    ends = np.asarray(truth["end_ns"], dtype=np.int64)
    walls = np.diff(ends, prepend=truth["start_ns"][0])
    rows = json.loads((report / "iterations.json").read_text())["rows"]
    keep = [r["iteration"] for r in rows if r["in_window"] and not r["warmup"]]
    return walls[keep].astype(np.float64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three analysed generated profiles: ``a`` and ``same`` from one model (other seeds),
    ``slow`` from a deeper model (each step longer), recorded in one store."""
    root = tmp_path_factory.mktemp("compare")
    db = f"sqlite:///{root / 'runs.db'}"
    out = {"db": Path(db.removeprefix("sqlite:///")), "root": root}
    for name, layers, seed in (("a", 6, 1), ("same", 6, 2), ("slow", 8, 3)):
        export = root / f"{name}.sqlite"
        make_profile(export, iterations=40, layers=layers, kernels_per_layer=2, seed=seed)
        folder = root / f"{name}.dlprof"
        code = main(["analyze", str(export), "-o", str(folder), "--quiet", "--db", db,
                     "--tag", name])  # fmt: skip
        assert code == 0
        out[name] = folder
    # Four runs a side, each a folder of report folders as --repeat writes them.
    for name, layers, seed in (("a-runs", 6, 10), ("slow-runs", 8, 20)):
        for i in range(4):
            export = root / f"{name}-{i}.sqlite"
            make_profile(export, iterations=40, layers=layers, kernels_per_layer=2,
                         seed=seed + i)  # fmt: skip
            code = main(["analyze", str(export), "-o", str(root / name / f"run-{i + 1}.dlprof"),
                         "--quiet", "--no-db"])  # fmt: skip
            assert code == 0
        out[name] = root / name
    return out


def _compare(runs: dict[str, Path], *names: str, gate: str | None = None) -> tuple[int, dict]:
    target = runs["root"] / ("cmp-" + "-".join(Path(n).name for n in names) + (gate or ""))
    args = ["compare", *names, "-o", str(target), "--quiet", "--db",
            f"sqlite:///{runs['db']}"]  # fmt: skip
    if gate is not None:
        args += ["--gate", gate]
    code = main(args)
    return code, json.loads((target / "compare.json").read_text())


def test_the_known_difference_is_the_estimate_and_inside_its_interval(runs, capsys) -> None:
    code, doc = _compare(runs, str(runs["a"]), str(runs["slow"]), gate="5")
    a = truth_steps(runs["root"] / "a.sqlite.truth.json", runs["a"])
    b = truth_steps(runs["root"] / "slow.sqlite.truth.json", runs["slow"])
    (step,) = doc["steps"]
    known = float(np.median(b) - np.median(a))
    assert known > 0.05 * np.median(a)  # the deeper model is clearly slower
    assert step["median_ns"]["value"] == pytest.approx(known, abs=1)
    assert step["median_ns"]["low"] <= known <= step["median_ns"]["high"]
    assert step["mean_ns"]["value"] == pytest.approx(b.mean() - a.mean(), rel=1e-9)
    # One run a side: sized, not tested. The generated steps scatter by about 15 % (half
    # their p10-p90 range), so the one-run minimum effect is about 30 %: more than +16 %.
    assert step["verdict"] == "not tested (one run a side)" and step["p_value"] is None
    assert 5 < step["median_pct"]["value"] < step["minimum_effect_pct"]
    # Its n and median per side are the generator's.
    sides = {s["label"]: s for s in doc["sides"]}
    assert sides[str(runs["a"])]["n"] == len(a)
    assert sides[str(runs["a"])]["median_ns"] == pytest.approx(np.median(a))
    # The gate: more than 5 % slower but within the minimum effect -> exit 0, saying why.
    assert code == 0
    out = capsys.readouterr().out
    assert "gate: passed" in out and "not a significance test" in out


def test_runs_a_side_are_tested_on_their_runs(runs, capsys) -> None:
    """Four runs a side (as --repeat 4 writes them): the deeper model is slower."""
    code, doc = _compare(runs, str(runs["a-runs"]), str(runs["slow-runs"]), gate="5")
    (step,) = doc["steps"]
    assert (step["runs_baseline"], step["runs_side"]) == (4, 4)
    assert step["verdict"] == "slower" and step["p_value"] < 0.05 and step["tested"]
    assert step["method"].startswith("runs: Welch")
    assert 0 <= step["power"] <= 1 and step["between_run_pct"] >= 0
    assert code == 1 and "4 vs 4 runs" in capsys.readouterr().out


def test_swapped_sides_are_faster_and_pass_the_gate(runs) -> None:
    code, doc = _compare(runs, str(runs["slow"]), str(runs["a"]), gate="5")
    assert doc["steps"][0]["median_pct"]["value"] < 0
    assert code == 0
    code, doc = _compare(runs, str(runs["slow-runs"]), str(runs["a-runs"]), gate="5")
    assert doc["steps"][0]["verdict"] == "faster"
    assert code == 0


def test_the_same_model_is_within_the_one_run_minimum_effect(runs) -> None:
    code, doc = _compare(runs, str(runs["a"]), str(runs["same"]), gate="0")
    step = doc["steps"][0]
    assert step["verdict"] == "not tested (one run a side)"
    assert abs(step["median_pct"]["value"]) < step["minimum_effect_pct"]
    assert code == 0  # a gate of 0 % still needs the minimum effect


def test_sides_by_run_id_and_by_tag_equal_the_folders(runs) -> None:
    _, by_folder = _compare(runs, str(runs["a"]), str(runs["slow"]))
    _, by_tag = _compare(runs, "a", "slow")
    _, by_id = _compare(runs, "1", "#3")
    for doc in (by_tag, by_id):
        assert doc["steps"][0]["median_ns"] == by_folder["steps"][0]["median_ns"]
        assert [s["n"] for s in doc["sides"]] == [s["n"] for s in by_folder["sides"]]


def test_layers_only_in_the_deeper_model_are_named_added(runs) -> None:
    _, doc = _compare(runs, str(runs["a"]), str(runs["slow"]))
    layers = [d for d in doc["deltas"] if d["section"] == "layer"]
    added = {d["name"] for d in layers if d["status"] == "added"}
    assert added  # the deeper model's extra layers are named as added ...
    known = {d["name"] for d in layers if d["status"] == "both"}
    assert not added & known  # ... and never as changed


def test_unknown_side_is_one_line(runs, capsys) -> None:
    code = main(["compare", str(runs["a"]), "no-such-tag", "--db", f"sqlite:///{runs['db']}",
                 "-o", str(runs["root"] / "never")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1
    assert "no-such-tag" in err and "no report folder, export, run id or tag" in err
    assert not (runs["root"] / "never").exists()


def test_an_existing_output_needs_force(runs, capsys) -> None:
    target = runs["root"] / "taken"
    target.mkdir()
    code = main(["compare", str(runs["a"]), str(runs["same"]), "-o", str(target), "--quiet"])
    assert code != 0 and "--force" in capsys.readouterr().err
    assert main(["compare", str(runs["a"]), str(runs["same"]), "-o", str(target), "--quiet",
                 "--force"]) == 0  # fmt: skip
    assert (target / "compare.csv").is_file()


def test_exports_are_analysed_as_sides(runs) -> None:
    """A side named by its export is analysed in memory: the same steps as its folder."""
    _, by_folder = _compare(runs, str(runs["a"]), str(runs["slow"]))
    exports = [str(runs["root"] / f"{n}.sqlite") for n in ("a", "slow")]
    _, by_export = _compare(runs, *exports)
    assert by_export["steps"][0]["median_ns"] == by_folder["steps"][0]["median_ns"]
    assert [s["n"] for s in by_export["sides"]] == [s["n"] for s in by_folder["sides"]]


def test_quiet_prints_the_verdict_the_gate_and_the_folder(runs, capsys) -> None:
    target = runs["root"] / "quiet"
    code = main(["compare", str(runs["a-runs"]), str(runs["slow-runs"]), "-o", str(target),
                 "--quiet", "--gate", "5"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and len(lines) == 3
    assert lines[0].startswith(f"{runs['slow-runs']} vs {runs['a-runs']}: slower: median +")
    assert lines[1] == f"compare: {target}" and lines[2].startswith("gate: failed")


def test_the_page_is_written_unless_left_out(runs) -> None:
    target = runs["root"] / "with-page"
    assert main(["compare", str(runs["a"]), str(runs["slow"]), "-o", str(target),
                 "--quiet"]) == 0  # fmt: skip
    page = (target / "compare.html").read_text(encoding="utf-8")
    assert 'id="chart-step-box"' in page and str(runs["slow"]) in page
    assert "http://" not in page and "https://" not in page.split("<script")[0]
    target = runs["root"] / "csv-only"
    assert main(["compare", str(runs["a"]), str(runs["slow"]), "-o", str(target), "--quiet",
                 "--formats", "csv"]) == 0  # fmt: skip
    assert sorted(p.name for p in target.iterdir()) == ["compare.csv"]


@pytest.mark.parametrize("columns", [80, 120])
def test_compare_and_runs_read_at_80_columns(runs, columns: int) -> None:
    """On a terminal of 80 columns (a pipe, a CI log) nothing is cut to an ellipsis: the
    step table stacks its rows, ``runs list`` keeps every report path whole (``-2`` and
    ``-3`` tell apart) and shows durations in their unit (never ``0.00``)."""
    import re

    from terminal import run_on_a_terminal

    db = ["--db", f"sqlite:///{runs['db']}"]
    target = runs["root"] / f"cmp-narrow-{columns}"
    code, screen = run_on_a_terminal(
        ["compare", str(runs["a"]), str(runs["slow"]), "-o", str(target), *db],
        stream="stdout", columns=columns,
    )  # fmt: skip
    assert code == 0, screen
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen).replace("\r", "")
    lines = plain.split("\n")
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    steps = plain[plain.index("step time per side"):].split("\n")[1:6]
    assert not any("…" in line for line in steps), steps  # stacked or whole: never cut
    if columns == 80:
        assert any(line.strip().startswith("runs 1 · steps") for line in steps), steps
    code, screen = run_on_a_terminal(["runs", "list", *db], stream="stdout", columns=columns)
    assert code == 0, screen
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen).replace("\r", "")
    for name in ("a", "same", "slow"):
        assert str(runs[name]) in plain.replace("\n  ", "").replace("\n", ""), plain
    assert " 0.00" not in plain and re.search(r"\d (ms|µs|s)\b", plain), plain
