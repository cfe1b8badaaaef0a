"""Folded modules (issue 25) from the ``folded`` fact into the layers table, the advice and
the annotation cost, and back from a saved report.

The hand-built model of ``test_layer_table`` (four steps of 10 000 ns, step 0 warm-up) plus
the facts the annotation writes when warm-up ends: ``block.act`` (a ReLU inside ``block``,
called right after ``block.conv``) was folded and has no range at all in the window;
``head`` is named folded too while its ranges are there (a ``--all-iterations`` table holds
the warm-up ranges of every folded module): it keeps its row, marked.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

import dlprof_lite
from builders import build_marks, fact_mark
from dlprof_lite.report.build import build_report
from test_layer_table import STEP, nested_profile

FOLDED = {"factor": 20, "hook_ns": 9_000, "threshold_ns": 180_000,
          "modules": [["block.act", 2_500, "block", "block.conv"],
                      ["head", 4_000, "model", "block.act"]]}  # fmt: skip
MODULE = {"layer": "block.act", "type": "ReLU", "in_shape": "8x16", "dtype": "float32",
          "device": "cpu"}  # fmt: skip
# 40 annotated calls in 4 steps, 10 of them in the warm-up step (one step).
ANNOTATION = {"module_calls": 40, "ns_per_call": 900, "steps": 4, "warmup_calls": 10,
              "warmup_steps": 1}  # fmt: skip


def folded_profile():
    marks = [fact_mark("module", MODULE, 300), fact_mark("folded", FOLDED, 9_000),
             fact_mark("annotation", ANNOTATION, 4 * STEP - 10)]  # fmt: skip
    return replace(nested_profile(), marks=build_marks(marks))


def test_folded_modules_in_the_layers_table_in_network_order() -> None:
    layers = build_report(folded_profile()).layers.set_index("layer")
    assert layers.index.tolist() == ["model", "block", "block.conv", "block.act", "head"]
    assert layers["order"].tolist() == [1, 2, 3, 4, 5]
    act = layers.loc["block.act"]
    assert (act["parent"], act["type"], act["folded_call_ns"]) == ("block", "ReLU", 2_500)
    assert pd.isna(act["calls"]) and act["forward_wall_ns"] == act["gpu_ns"] == 0
    assert not act["tc_eligible"] and act["in_shape"] == "8x16"
    head = layers.loc["head"]
    assert (head["calls"], head["folded_call_ns"]) == (3, 4_000)  # its window ranges, marked
    assert layers["folded_call_ns"].isna().tolist() == [True, True, True, False, False]
    # The rows the window times are those of the table without folds.
    plain = build_report(nested_profile()).layers.set_index("layer")
    cols = ["calls", "forward_wall_ns", "self_forward_wall_ns", "gpu_ns", "parent"]
    pd.testing.assert_frame_equal(layers.drop(index="block.act")[cols], plain[cols])


def test_one_advice_line_names_the_folds_and_how_to_keep_them() -> None:
    summary = build_report(folded_profile()).summary
    (advice,) = [a for a in summary.advice if a.metric == "folded_call_ns"]
    assert advice.severity == "info" and (advice.value, advice.threshold) == (4_000, 20)
    assert "2 modules" in advice.evidence and "block.act, head" in advice.evidence
    assert "--annotate modules-all" in advice.recommendation
    assert "--depth" in advice.recommendation
    plain = build_report(nested_profile()).summary
    assert not [a for a in plain.advice if a.metric == "folded_call_ns"]


def test_annotation_cost_counts_the_steps_after_warm_up() -> None:
    summary = build_report(folded_profile()).summary
    # (40 - 10) calls x 900 ns / (4 - 1) steps = 9 000 ns a step: 90 % of a 10 000 ns step.
    assert summary["annotation_cost_ns"] == 9_000
    assert summary["annotation_cost_pct"] == 9_000 / summary["iterations_mean_ns"] * 100


def test_folded_column_survives_save_and_open(tmp_path: Path) -> None:
    report = build_report(folded_profile())
    back = dlprof_lite.open_report(report.save(tmp_path / "r"))
    pd.testing.assert_series_equal(back.layers["folded_call_ns"], report.layers["folded_call_ns"])
    assert back.layers["layer"].tolist() == report.layers["layer"].tolist()
