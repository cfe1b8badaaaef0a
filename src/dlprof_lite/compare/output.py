"""compare.csv and compare.json: the comparison as files.

Place in the pipeline: compare. ``compare.csv`` is one long table (columns defined in
:mod:`dlprof_lite.compare.columns`): the step statistics of every side, then every ranked
delta. ``compare.json`` is the whole :class:`Comparison` as plain data (``json.dumps``), with
the column and metric definitions and the rules. The caller stages the folder (the CLI uses
``dlprof_lite.staging.staged_folder``); each file is written atomically into it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import pandas as pd

from dlprof_lite.compare.columns import (
    COMPARE_REPORT,
    COMPARE_RULES,
    column_definitions,
    json_definitions,
    metric_definitions,
    unit,
)
from dlprof_lite.compare.comparison import Comparison
from dlprof_lite.compare.stats import Estimate, StepDelta, StepStats
from dlprof_lite.render.writers import formula_safe, plain
from dlprof_lite.report.metrics import SCHEMA
from dlprof_lite.staging import atomic_write

FILE_STEM = "compare"
STEP_METRICS = (
    "n", "runs", "mean_ns", "median_ns", "std_ns", "p10_ns", "p90_ns", "min_ns", "max_ns",
    "within_run_std_ns", "between_run_std_ns",
)  # fmt: skip
_ESTIMATED = {"mean_ns": ("mean_ns", "mean_pct"), "median_ns": ("median_ns", "median_pct")}


def _step_rows(
    side: StepStats, base: StepStats | None, d: StepDelta | None
) -> list[dict[str, Any]]:
    rows = []
    for metric in STEP_METRICS:
        value = getattr(side, metric)
        row: dict[str, Any] = {
            "section": "step", "name": "step", "metric": metric,
            "unit": unit("step", metric), "side": side.label, "value": value,
        }  # fmt: skip
        if base is not None:
            ref = getattr(base, metric)
            row.update(baseline=base.label, baseline_value=ref)
            if value is not None and ref is not None:
                row["delta"] = value - ref
                row["delta_pct"] = (value - ref) / ref * 100.0 if ref else None
        if d is not None and metric in _ESTIMATED:
            est: Estimate = getattr(d, _ESTIMATED[metric][0])
            pct: Estimate = getattr(d, _ESTIMATED[metric][1])
            row.update(delta=est.value, delta_pct=pct.value, ci_low=est.low,
                       ci_high=est.high, ci_pct_low=pct.low, ci_pct_high=pct.high,
                       p_value=d.p_value, verdict=d.verdict)  # fmt: skip
        rows.append(row)
    return rows


def comparison_frame(c: Comparison) -> pd.DataFrame:
    """The long table of compare.csv, in the columns of ``COMPARE_REPORT``."""
    base = c.sides[0]
    rows = _step_rows(base, None, None)
    for side, d in zip(c.sides[1:], c.steps, strict=True):
        rows += _step_rows(side, base, d)
    columns = [col.name for col in COMPARE_REPORT]
    steps = pd.DataFrame(rows, columns=columns, dtype=object)  # counts stay integers
    if not c.deltas:
        return steps
    deltas = pd.DataFrame([d.row() for d in c.deltas]).rename(columns={"label": "side"})
    units = {(d.section, d.metric): "" for d in c.deltas}
    units = {key: unit(*key) for key in units}
    deltas["unit"] = [units[(d.section, d.metric)] for d in c.deltas]
    frame = pd.concat([steps, deltas.reindex(columns=columns)], ignore_index=True)
    return frame.astype({"rank": "Int64"})  # empty on step rows, an integer elsewhere


def comparison_document(c: Comparison) -> dict[str, Any]:
    """compare.json: schema, definitions, rules, then the comparison as plain data."""
    document = c.document()
    deltas = document.pop("deltas")  # plain already (Delta.row): not walked again
    head = {
        "schema": SCHEMA,
        "table": FILE_STEM,
        "definitions": column_definitions(),
        "fields": json_definitions(),
        "metrics": metric_definitions(),
        "rules": {name: asdict(rule) for name, rule in COMPARE_RULES.items()},
    }
    out = cast("dict[str, Any]", plain({**head, **document}))
    out["deltas"] = deltas
    return out


def write_comparison(
    c: Comparison, folder: Path, formats: Iterable[str] = ("csv", "json")
) -> list[Path]:
    """Write compare.<format> for each format into the existing ``folder``."""
    written = []
    for fmt in formats:
        path = folder / f"{FILE_STEM}.{fmt}"
        if fmt == "csv":
            text = formula_safe(comparison_frame(c)).to_csv(index=False, lineterminator="\n")
        elif fmt == "json":
            doc = comparison_document(c)
            # Unindented: json's C encoder only runs without indent (tens of thousands of
            # delta rows); json.tool or the CSV is for reading.
            text = json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n"
        else:
            raise ValueError(f"unknown compare format {fmt!r}")
        atomic_write(path, text)
        written.append(path)
    return written
