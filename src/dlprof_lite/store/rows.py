"""A run as the plain values the store writes (:func:`prepare`), the pandas side of
recording (see :mod:`dlprof_lite.store.prepared` and :mod:`dlprof_lite.store.schema`).

Place in the pipeline: store. A table becomes one plain JSON object per row (the report's
JSON writer's ``records``: NaN and NA to null, numpy to Python numbers) plus a small
``layout``: each column's pandas dtype name and, for categorical columns, the categories
when they are not simply the sorted distinct values (kernel names: the common case costs
nothing). :func:`dlprof_lite.store.stored.table` reverses it, checking every cell as the
report reader does: the DataFrame compares equal to the report's with
``pd.testing.assert_frame_equal`` (dtypes, categories and column order included).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dlprof_lite.render.writers import plain, records
from dlprof_lite.store.prepared import ROW_TABLE_NAMES, PreparedRun, Row, utc

if TYPE_CHECKING:
    from dlprof_lite.report.summary_types import Summary
    from dlprof_lite.store.record import RunRecord

# The run row's version columns, each the summary field of the same name.
_SUMMARY_FACTS = ("host", "driver_version", "cuda_version", "torch_version", "python_version")


def prepare(run: RunRecord) -> PreparedRun:
    """``run`` as plain values (:mod:`dlprof_lite.store.prepared`): its runs row, each report
    table's rows (the JSON writer's ``records``) and its phases."""
    phases = [_finite_numbers(r) for r in run.phases().to_dict("records")]
    tables = {name: records(getattr(run, name)) for name in ROW_TABLE_NAMES}
    return {"run": _run_values(run), "tables": tables, "phases": phases}


def _run_values(run: RunRecord) -> Row:
    ctx, summary = run.context, run.summary
    steps = run.step_ns()
    facts = {column: _summary_fact(summary, column) for column in _SUMMARY_FACTS}
    from dlprof_lite import __version__

    return {
        **facts,
        "tag": ctx.tag,
        "run_group": ctx.group,
        "cwd": ctx.cwd,
        "script": ctx.script,
        "host": ctx.host or facts["host"],
        "gpus": summary.system.gpu_names,
        "nsys_version": summary.system.nsys_version,
        "tool_version": ctx.tool_version or __version__,
        "git_commit": ctx.git_commit,
        "source": summary.system.source,
        "report_dir": ctx.report_dir,
        "created_at": utc(ctx.created_at),
        "repeat_index": ctx.repeat_index,
        "command": list(ctx.command),
        "git_dirty": ctx.git_dirty,
        "steps": len(steps),
        "step_mean_ns": _finite(float(np.mean(steps))) if len(steps) else None,
        "step_median_ns": _finite(float(np.median(steps))) if len(steps) else None,
        "summary": summary.document(),
        "tables": {name: layout(getattr(run, name)) for name in ROW_TABLE_NAMES},
    }


def _summary_fact(summary: Summary, name: str) -> str | None:
    value = summary.metrics().get(name)
    return None if value is None else (str(value) or None)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _finite_numbers(row: dict[Any, object]) -> Row:
    return {str(k): _finite(v) if isinstance(v, float) else v for k, v in row.items()}


def layout(table: pd.DataFrame) -> dict[str, Any]:
    """``{"columns": [[name, dtype], ...], "categories": {name: [...] or None}}``."""
    columns = [[str(c), str(t)] for c, t in table.dtypes.items()]
    categories: dict[str, Any] = {}
    for name, dtype in table.dtypes.items():
        if isinstance(dtype, pd.CategoricalDtype):
            cats = plain(list(dtype.categories))
            categories[str(name)] = None if _is_default(table[name], cats) else cats
    return {"columns": columns, "categories": categories}


def _is_default(column: pd.Series, cats: object) -> bool:
    """True when ``cats`` are what ``astype("category")`` would give: sorted distinct values."""
    try:
        return bool(cats == sorted({plain(v) for v in column.dropna().tolist()}))  # type: ignore[type-var]
    except TypeError:  # mixed types do not sort: keep the list
        return False
