"""compare.csv, compare.json and the console: what is written is what was computed, every
column is defined, and names from a hostile profile stay text."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from compare_builders import MS, normal_steps, run, side
from dlprof_lite.compare.columns import COMPARE_REPORT, COMPARE_RULES, column_definitions
from dlprof_lite.compare.comparison import Comparison, compare_sides
from dlprof_lite.compare.console import render_comparison
from dlprof_lite.compare.output import write_comparison
from dlprof_lite.report.metrics import SCHEMA

N = 60
HOSTILE = "=cmd|' /C calc'!A0 [bold]x[/bold] \x1b[31m"


def _tree(extra_ms: float) -> list[dict[str, object]]:
    return [
        dict(layer="model", self_forward_wall_ns=1 * MS * N,
             step_forward_wall_ns=(2 + extra_ms) * MS, calls_per_step=1.0),
        dict(layer="model.fc", parent="model", self_forward_wall_ns=(1 + extra_ms) * MS * N,
             step_forward_wall_ns=(1 + extra_ms) * MS, calls_per_step=1.0),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    """Three runs a side (so the step change is tested), B 6 % slower."""
    a = side("A", *(run(normal_steps(100, 4, N, 1 + 10 * i), layer_rows=_tree(0),
                        kernel_rows=[("gemm", N, N * 2 * MS), (HOSTILE, N, N * MS)],
                        phases={"forward": (3 * MS, 3 * MS)},
                        summary={"torch_version": "2.3"}) for i in range(3)))  # fmt: skip
    b = side("B", *(run(normal_steps(106, 4, N, 2 + 10 * i), layer_rows=_tree(5),
                        kernel_rows=[("gemm", N, N * 2 * MS), (HOSTILE, N, N * 3 * MS)],
                        phases={"forward": (5 * MS, 8 * MS)},
                        summary={"torch_version": "2.4"}) for i in range(3)))  # fmt: skip
    return compare_sides([a, b], resamples=500)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _num(text: str) -> float | None:
    return float(text) if text else None


def test_csv_holds_the_step_statistics_and_every_delta(
    comparison: Comparison, tmp_path: Path
) -> None:
    written = write_comparison(comparison, tmp_path)
    assert sorted(p.name for p in written) == ["compare.csv", "compare.json"]
    rows = _read_csv(tmp_path / "compare.csv")
    assert list(rows[0]) == [c.name for c in COMPARE_REPORT]
    step = comparison.steps[0]
    median = next(r for r in rows if r["section"] == "step" and r["side"] == "B"
                  and r["metric"] == "median_ns")  # fmt: skip
    assert _num(median["delta"]) == pytest.approx(step.median_ns.value)
    assert _num(median["ci_low"]) == pytest.approx(step.median_ns.low)
    assert _num(median["ci_high"]) == pytest.approx(step.median_ns.high)
    assert _num(median["ci_pct_low"]) == pytest.approx(step.median_pct.low)
    assert _num(median["p_value"]) == pytest.approx(step.p_value)
    assert median["verdict"] == step.verdict == "slower"
    assert median["unit"] == "ns" and median["baseline"] == "A"
    base_n = next(r for r in rows if r["side"] == "A" and r["metric"] == "n")
    assert _num(base_n["value"]) == 3 * N and base_n["baseline"] == ""
    # Every delta is a row, in the comparison's order, after the step rows.
    delta_rows = [r for r in rows if r["section"] != "step"]
    assert len(delta_rows) == len(comparison.deltas)
    first_layer = next(r for r in delta_rows if r["section"] == "layer")
    assert (first_layer["name"], first_layer["direction"], first_layer["rank"]) == (
        "model.fc",
        "forward",
        "1",
    )
    assert _num(first_layer["delta"]) == pytest.approx(5 * MS)


def test_csv_quotes_a_formula_name_and_json_keeps_it_raw(
    comparison: Comparison, tmp_path: Path
) -> None:
    write_comparison(comparison, tmp_path)
    names = {r["name"] for r in _read_csv(tmp_path / "compare.csv") if r["section"] == "kernel"}
    assert "'" + HOSTILE in names and HOSTILE not in names
    doc = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert HOSTILE in {d["name"] for d in doc["deltas"] if d["section"] == "kernel"}


def test_json_is_the_whole_comparison_with_its_definitions(
    comparison: Comparison, tmp_path: Path
) -> None:
    write_comparison(comparison, tmp_path, formats=("json",))
    assert not (tmp_path / "compare.csv").exists()
    doc = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert doc["schema"] == SCHEMA and doc["baseline"] == "A"
    assert doc["definitions"] == column_definitions()
    assert set(doc["rules"]) == set(COMPARE_RULES)
    assert [s["label"] for s in doc["sides"]] == ["A", "B"]
    assert doc["sides"][1]["median_ns"] == pytest.approx(comparison.sides[1].median_ns)
    [step] = doc["steps"]
    assert step["verdict"] == "slower" and step["significant"] is True
    assert step["median_ns"]["low"] == pytest.approx(comparison.steps[0].median_ns.low)
    assert step["line"].startswith("B vs A: slower: median +")
    assert doc["warnings"] == list(comparison.warnings) and doc["warnings"]
    assert len(doc["deltas"]) == len(comparison.deltas)
    # Every (section, metric) written has its definition.
    used = {f"{d['section']}.{d['metric']}" for d in doc["deltas"]}
    used |= {f"step.{k}" for k in doc["sides"][0] if k != "label"}
    assert used <= set(doc["metrics"])
    # Every top-level key and every steps[] field is defined.
    fields = doc["fields"]
    assert set(doc) - {"schema", "table", "definitions", "fields", "metrics", "rules"} <= {
        k.removesuffix("[]") for k in fields
    }
    assert {f"steps[].{k}" for k in step} - {"steps[].label", "steps[].baseline"} <= set(fields)
    for name, text in {**doc["definitions"], **doc["metrics"], **fields}.items():
        assert text and "\n" not in text, name


def test_console_shows_steps_verdict_top_changes_and_warnings(comparison: Comparison) -> None:
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    render_comparison(comparison, console, top=5)
    text = console.export_text()
    assert "step time per side" in text
    assert "B vs A: slower: median +" in text
    layers = text[text.index("layers, those the runs call slower or faster first") :]
    first = layers.splitlines()[3]
    assert first.lstrip().startswith("model.fc")  # first row: the leaf
    assert first.rstrip().endswith("slower p = 0")  # the same +5 ms in every run: exact
    assert "kernels, by change of GPU time per step" in text
    assert "phases per step" in text
    assert "warning: different torch: A 2.3; B 2.4" in text
    # The hostile kernel name is shown as text: markup printed, ESC made visible.
    assert "[bold]x[/bold]" in text and "\\x1b[31m" in text
    assert "\x1b[31m" not in console.export_text(styles=False)


def test_console_of_a_cpu_run_leaves_gpu_columns_out() -> None:
    c = compare_sides([side("A", run(normal_steps(100, 1, N, 3), layer_rows=_tree(0))),
                       side("B", run(normal_steps(100, 1, N, 4), layer_rows=_tree(2)))],
                      resamples=200)  # fmt: skip
    console = Console(record=True, width=200)
    render_comparison(c, console)
    text = console.export_text()
    assert "self wall: baseline" in text and "self GPU" not in text
    assert "kernels, by change" not in text


def test_console_shows_side_labels_as_text() -> None:
    labels = ("[bold]base[/bold]", "run\x1b]8;;http://x\x07")
    sides = [side(x, run(normal_steps(100, 1, N, i), layer_rows=_tree(i))) for i, x in
             enumerate(labels)]  # fmt: skip
    console = Console(record=True, width=300, force_terminal=True)
    render_comparison(compare_sides(sides, resamples=200), console)
    text = console.export_text()
    assert "([bold]base[/bold] vs" not in text  # B vs A: the other side first
    assert "vs [bold]base[/bold])" in text and "run\\x1b]8;;http://x\\x07 vs" in text
    assert "\x1b]8" not in console.export_text(styles=True)


def test_compare_and_write_scale_to_10k_steps_and_5k_layers(tmp_path: Path) -> None:
    """The size the brief sets (10k steps a side, 5k layers) costs at most ~30 times the
    same comparison of 1k steps and 500 layers: no quadratic step (ratio, not seconds, so
    a loaded machine does not fail it; measured alone: about 1.5 s)."""

    def cost(steps: int, layers: int) -> float:
        rng = np.random.default_rng(steps)
        rows = [dict(layer=f"m.l{i}", self_forward_wall_ns=float(rng.random() * MS * steps),
                     calls_per_step=1.0) for i in range(layers)]  # fmt: skip
        sides = [side(x, run(normal_steps(100, 4, steps, i), layer_rows=rows)) for i, x in
                 enumerate("AB")]  # fmt: skip
        start = time.perf_counter()
        write_comparison(compare_sides(sides), tmp_path)
        return time.perf_counter() - start

    small = min(cost(1_000, 500) for _ in range(2))
    large = cost(10_000, 5_000)
    assert large < 30 * small
