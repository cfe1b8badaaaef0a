"""Where B's time changed against A's: phases, idle causes, layers, kernels, Tensor Cores,
launch overhead.

Place in the pipeline: compare (pure). Every figure is per analysed step, so runs of
different lengths compare: a phase's mean and median over the analysed steps
(``RunRecord.phases()``); an idle cause's device idle time and main-thread step time, mean
and median over the analysed steps (``RunRecord.idle()``); a layer's per-step self time as
the median over the steps, and its window totals divided by the steps its table covers (the
summary's ``window_steps``); a kernel's window total per step. A side of several runs pools
them: each run's per-step figure weighted by its steps (a layer or kernel a run lacks counts
0 in that run).

Each section is ranked by absolute change, largest first (``rank`` 1). Layers rank by their
*self* time per step as a median over the steps (forward and backward apart: the larger of
the self wall and self GPU change), so a layer that got slower comes before its parents,
whose inclusive time rose with it, and a few slow steps (a loaded machine, a stall) do not
reorder them; phases and idle causes rank by their medians for the same reason. Means and
inclusive per-step figures are kept as rows of their own. A report written before the
median columns existed ranks by the means. A layer or kernel on one side only is ``added``
(only in B) or ``removed`` (only in A), its missing side 0.

Layers named before wrappers were seen through (``module.conv1`` under DDP,
``_lightning_module.conv1``, ``_orig_mod.``; :mod:`dlprof_lite.rules.wrappers`) are matched
with the other side's plain names (:func:`renamed_layers`); the comparison warns that the
names changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from dlprof_lite.compare.side import Side
from dlprof_lite.compare.stats import (
    FASTER,
    SLOWER,
    UNTESTED,
    RunTest,
    minimum_effect_pct,
    run_test,
    run_verdict,
)
from dlprof_lite.report.summary_types import number
from dlprof_lite.rules import compare as rules
from dlprof_lite.rules.wrappers import adds_wrappers, without_wrappers
from dlprof_lite.store.record import RunRecord

PHASE, IDLE, LAYER, KERNEL, SUMMARY = "phase", "idle", "layer", "kernel", "summary"
BOTH, ADDED, REMOVED = "both", "added", "removed"
DIRECTIONS = ("forward", "backward")
# Layer metrics per direction d: (metric, source column, divide by the window's steps).
# self_*: the layer's own time (ranked by); wall_ns/gpu_ns: inclusive (children too).
LAYER_METRICS = (
    ("self_wall_median_ns", "step_self_{d}_wall_median_ns", False),
    ("self_gpu_median_ns", "step_self_{d}_gpu_median_ns", False),
    ("self_wall_ns", "self_{d}_wall_ns", True),
    ("self_gpu_ns", "self_{d}_gpu_ns", True),
    ("wall_ns", "step_{d}_wall_ns", False),
    ("gpu_ns", "step_{d}_gpu_ns", False),
)
LAYER_RANKED_BY = ("self_wall_median_ns", "self_gpu_median_ns")
# A report without the median columns: the mean of the same self time stands in.
_MEDIAN_FALLBACK = {"self_wall_median_ns": "self_wall_ns", "self_gpu_median_ns": "self_gpu_ns"}
PHASE_METRICS = ("gpu_ns", "wall_ns", "host_gap_ns")
PHASE_MEDIANS = ("gpu_ns", "wall_ns")
PHASE_RANKED_BY = ("gpu_median_ns", "wall_median_ns")
IDLE_METRICS = ("device_ns", "host_ns")
IDLE_RANKED_BY = ("device_median_ns", "host_median_ns")
KERNEL_METRICS = ("gpu_ns", "instances")
SUMMARY_METRICS = ("tc_share", "launch_overhead_pct", "model_flops_per_step", "mfu",
                   "memory_saved_bytes", "memory_gpu_peak_bytes")


@dataclass(frozen=True)
class Delta:
    """One figure of side ``label`` against the baseline's. ``direction``: forward or backward
    for layers, empty otherwise; ``rank``: the place of (name, direction) in its section."""

    section: str
    name: str
    direction: str
    metric: str
    label: str
    baseline: str
    value: float | None
    baseline_value: float | None
    delta: float | None
    delta_pct: float | None
    rank: int
    status: str
    p_value: float | None = None
    verdict: str = ""

    def row(self) -> dict[str, object]:
        """The fields as a plain dict (every number a finite float or None)."""
        return dict(self.__dict__)


def table_steps(run: RunRecord) -> int:
    """The steps a run's layers and kernels tables cover (their per-step divisor)."""
    steps = number(run.summary.window.window_steps)
    return int(steps) if steps else len(run.analysed())


PerRun = Callable[[RunRecord], tuple[pd.DataFrame, int]]


def _pooled(frames: Sequence[tuple[pd.DataFrame, int]]) -> pd.DataFrame:
    """Mean over a side's runs, weighted by steps, of each run's per-step frame (indexed by
    the entity, one column per metric); an entity missing from a run counts 0 there."""
    total: pd.DataFrame | None = None
    steps = 0
    for frame, weight in frames:
        weighted = frame * weight
        total = weighted if total is None else total.add(weighted, fill_value=0.0)
        steps += weight
    if total is None or steps == 0:
        return pd.DataFrame()
    return total / steps


def _layer_frame(run: RunRecord) -> tuple[pd.DataFrame, int]:
    steps = table_steps(run)
    layers = run.layers
    out: dict[str, pd.Series] = {}
    for d in DIRECTIONS:
        for metric, source, per_total in reversed(LAYER_METRICS):  # means before medians
            col = source.format(d=d)
            if col not in layers and metric in _MEDIAN_FALLBACK:
                out[f"{d}.{metric}"] = out[f"{d}.{_MEDIAN_FALLBACK[metric]}"]
                continue
            values = pd.to_numeric(layers[col], errors="coerce") if col in layers else 0.0
            out[f"{d}.{metric}"] = pd.Series(values, index=layers.index, dtype=float) / (
                max(steps, 1) if per_total else 1.0
            )
        for metric, _, _ in LAYER_METRICS:  # the columns in LAYER_METRICS' order
            out[f"{d}.{metric}"] = out.pop(f"{d}.{metric}")
    for d in DIRECTIONS:  # FLOPs per step (issue: cost per layer); older runs: 0
        col = f"step_{d}_flops"
        values = pd.to_numeric(layers[col], errors="coerce") if col in layers else 0.0
        out[f"{d}.flops"] = pd.Series(values, index=layers.index, dtype=float)
    for col in ("param_bytes", "saved_bytes"):  # memory per layer (forward rows); older: 0
        values = pd.to_numeric(layers[col], errors="coerce") if col in layers else 0.0
        out[f"forward.{col}"] = pd.Series(values, index=layers.index, dtype=float)
    out["forward.calls_per_step"] = pd.to_numeric(
        layers.get("calls_per_step", pd.Series(0.0, index=layers.index)), errors="coerce"
    ).astype(float)
    frame = pd.DataFrame(out).fillna(0.0)
    frame.index = layers["layer"].astype(str)
    return frame.groupby(level=0).sum(), steps


def _kernel_frame(run: RunRecord) -> tuple[pd.DataFrame, int]:
    steps = table_steps(run)
    kernels = run.kernels
    per = float(max(steps, 1))
    frame = pd.DataFrame({
        "gpu_ns": pd.to_numeric(kernels["total_ns"], errors="coerce").astype(float) / per,
        "instances": pd.to_numeric(kernels["instances"], errors="coerce").astype(float) / per,
    }).fillna(0.0)  # fmt: skip
    frame.index = kernels["name"].astype(str)
    return frame.groupby(level=0).sum(), steps


def _phase_frame(run: RunRecord) -> tuple[pd.DataFrame, int]:
    means = run.phases().set_index("phase")[list(PHASE_METRICS)].astype(float)
    medians = run.phases("median").set_index("phase")[list(PHASE_MEDIANS)].astype(float)
    medians.columns = [f"{c[:-3]}_median_ns" for c in PHASE_MEDIANS]
    return pd.concat([medians, means], axis=1).fillna(0.0), len(run.analysed())


def _idle_frame(run: RunRecord) -> tuple[pd.DataFrame, int]:
    """Medians, then means, per cause; NaN kept where a figure is unknown (see _idle_rows)."""
    means = run.idle().set_index("cause")[list(IDLE_METRICS)].astype(float)
    medians = run.idle("median").set_index("cause")[list(IDLE_METRICS)].astype(float)
    medians.columns = list(IDLE_RANKED_BY)
    return pd.concat([medians, means], axis=1), len(run.analysed())


def _idle_rows(a: Side, b: Side, labels: tuple[str, str]) -> list[Delta]:
    """The idle section: pooled like phases over the runs that have the partition (as summary
    fields are); none when a side has no such run, since its 0s would read as a change. A
    figure unknown on a side (the host is never ``queued``) is None, not 0."""
    pooled = [_pooled([f for f in map(_idle_frame, side.runs) if not f[0].empty])
              for side in (a, b)]  # fmt: skip
    if any(frame.empty for frame in pooled):
        return []
    base, other = pooled
    out = []
    for row in _rows(IDLE, base, other, labels, IDLE_RANKED_BY):
        was, now = (_known(f, row.name, row.metric) for f in (base, other))
        if was is None or now is None:
            row = replace(row, value=now, baseline_value=was, delta=None, delta_pct=None)
        out.append(row)
    return out


def _known(frame: pd.DataFrame, name: str, metric: str) -> float | None:
    value = frame[metric].get(name) if metric in frame else None
    return None if value is None or pd.isna(value) else float(value)


def _summary_value(side: Side, field: str) -> float | None:
    """Mean of a summary field over the runs that have it, weighted by their steps."""
    pairs = [(number(r.summary.metrics().get(field)), len(r.analysed())) for r in side.runs]
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    if not known:
        return None
    return sum(v * w for v, w in known) / sum(w for _, w in known)


def _rows(
    section: str, a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str],
    ranked_by: Sequence[str], tests: Mapping[tuple[str, str], Tested] | None = None,
) -> list[Delta]:  # fmt: skip
    """Delta rows of a section from A's and B's pooled frames (entity x "[dir.]metric"),
    ranked by their entity's change (largest first; ties by name), an entity being a name
    and a direction; each entity's metrics stay in their column order. ``tests``: the
    run-level tests of the ranked metrics ({(entity, "dir.metric"): (p, verdict)}); an
    entity with a significant one comes first."""
    both = a.merge(b, how="outer", left_index=True, right_index=True, suffixes=("\0a", "\0b"),
                   sort=True)  # fmt: skip
    names = [str(n) for n in both.index.tolist()]
    in_a, in_b = both.index.isin(a.index), both.index.isin(b.index)
    status = np.where(in_a & in_b, BOTH, np.where(in_b, ADDED, REMOVED)).tolist()
    groups: dict[str, list[str]] = {}
    for col in a.columns if len(a.columns) else b.columns:
        groups.setdefault(col.split(".")[0] if "." in col else "", []).append(col)
    zero = pd.Series(0.0, index=both.index)
    tested = tests or {}
    flagged = {(n, c.split(".")[0] if "." in c else "") for (n, c), (_, v) in tested.items()
               if v in (SLOWER, FASTER)}  # fmt: skip
    # (not flagged, -change, name, direction, row): flagged entities first
    entities: list[tuple[bool, float, str, str, int]] = []
    values: dict[str, tuple[list[float], list[float]]] = {}
    for direction, cols in groups.items():
        for c in cols:
            values[c] = (
                _finite(both.get(f"{c}\0a", zero)).tolist(),
                _finite(both.get(f"{c}\0b", zero)).tolist(),
            )
        keys = [c for c in cols if c.split(".")[-1] in ranked_by]
        change = np.max([np.abs(np.subtract(values[c][1], values[c][0])) for c in keys], axis=0)
        entities += [((n, direction) not in flagged, -float(change[i]), n, direction, i)
                     for i, n in enumerate(names)]  # fmt: skip
    entities.sort()
    out: list[Delta] = []
    for rank, (_, _, name, direction, i) in enumerate(entities, start=1):
        for c in groups[direction]:
            base, value = values[c][0][i], values[c][1][i]
            pct = (value - base) / base * 100.0 if base else None
            metric = c.split(".")[-1]
            p, verdict = tested.get((name, c), (None, ""))
            out.append(Delta(section, name, direction, metric, labels[1], labels[0],
                             value, base, value - base, pct, rank, status[i], p,
                             verdict))  # fmt: skip
    return out


Tested = tuple[float | None, str]  # (Holm-adjusted p or None, verdict)


def layer_tests(
    a: Sequence[pd.DataFrame], b: Sequence[pd.DataFrame], ranked_by: Sequence[str],
    step_ns: float = 0.0, minimum_pct: float = 0.0,
) -> dict[tuple[str, str], Tested]:  # fmt: skip
    """The run-level test (:func:`~dlprof_lite.compare.stats.run_test`, log scale) of each
    entity's ranked metrics over the runs' per-step frames, Holm-adjusted over every test
    of the pair (Holm, Scandinavian Journal of Statistics 1979: the chance of any false
    "slower" among the layers stays within alpha). Only figures that matter are tested:
    the mean over both sides' runs at least ``MATERIAL_SHARE`` of ``step_ns`` (a typical
    step); the rest, and a metric 0 in some run (a layer a run lacks, a CPU run's GPU
    time), are left untested (empty verdict). Choosing by the mean over both sides leaves
    the test's size alone (for normal data the mean is independent of the difference).
    A change within ``minimum_pct``, the step's minimum effect, needs the stricter level
    (:func:`~dlprof_lite.compare.stats.run_verdict`). One run a side: every ranked
    metric "not tested"."""
    columns = sorted({c for f in (*a, *b) for c in f.columns if c.split(".")[-1] in ranked_by})
    names = sorted({str(n) for f in (*a, *b) for n in f.index})
    if max(len(a), len(b)) < 2:
        return {(n, c): (None, UNTESTED) for n in names for c in columns}
    keys: list[tuple[str, str]] = []
    found: list[RunTest] = []
    floor = rules.MATERIAL_SHARE * step_ns
    for c in columns:
        va = np.array([f[c].reindex(names, fill_value=0.0).to_numpy(float) for f in a])
        vb = np.array([f[c].reindex(names, fill_value=0.0).to_numpy(float) for f in b])
        for i, n in enumerate(names):
            level = (float(np.mean(va[:, i])) + float(np.mean(vb[:, i]))) / 2.0
            if np.all(va[:, i] > 0) and np.all(vb[:, i] > 0) and level >= floor:
                test = run_test(np.log(va[:, i]).tolist(), np.log(vb[:, i]).tolist())
                if test is not None:
                    keys.append((n, c))
                    found.append(test)
    adjusted = holm([t.p_value for t in found])
    out: dict[tuple[str, str], Tested] = {}
    for key, test, p in zip(keys, found, adjusted, strict=True):
        out[key] = (p, run_verdict(test, p, minimum_pct))
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _finite(values: pd.Series) -> np.ndarray:
    """A column as floats, missing (or not finite: never in a sane report) as 0."""
    array: np.ndarray = np.nan_to_num(values.to_numpy(float), nan=0.0, posinf=0.0, neginf=0.0)
    return array


def _summary_rows(a: Side, b: Side) -> list[Delta]:
    rows = []
    for field in SUMMARY_METRICS:
        base, value = _summary_value(a, field), _summary_value(b, field)
        delta = value - base if value is not None and base is not None else None
        pct = delta / base * 100.0 if delta is not None and base else None
        rows.append(Delta(SUMMARY, field, "", field, b.label, a.label, value, base, delta, pct,
                          0, BOTH))  # fmt: skip
    rows.sort(key=lambda r: -abs(r.delta) if r.delta is not None else 0.0)
    return [replace(r, rank=i + 1) for i, r in enumerate(rows)]


def _layer_names(side: Side) -> set[str]:
    return {str(name) for run in side.runs if "layer" in run.layers
            for name in run.layers["layer"]}  # fmt: skip


def renamed_layers(a: Side, b: Side) -> dict[str, str]:
    """Layer names of either side that the other lacks and that differ from one of the
    other's only by wrappers' segments, each to the name both are compared under (the one
    without them). Only one-to-one matches, onto a name neither side has otherwise."""
    names_a, names_b = _layer_names(a), _layer_names(b)
    buckets: dict[str, tuple[list[str], list[str]]] = {}
    for i, only in enumerate((names_a - names_b, names_b - names_a)):
        for name in sorted(only):
            buckets.setdefault(without_wrappers(name), ([], []))[i].append(name)
    taken = names_a | names_b
    renames: dict[str, str] = {}
    for key, (olds_a, olds_b) in sorted(buckets.items()):
        for old_a, old_b in _one_to_one(olds_a, olds_b):
            target = (old_b if adds_wrappers(old_a, old_b)
                      else old_a if adds_wrappers(old_b, old_a) else key)  # fmt: skip
            if target in (old_a, old_b) or target not in taken:
                renames.update({old: target for old in (old_a, old_b) if old != target})
    return renames


def _one_to_one(olds_a: list[str], olds_b: list[str]) -> list[tuple[str, str]]:
    """Pairs of names (one per side, alike without wrappers) that match no other name."""
    if len(olds_a) == 1 and len(olds_b) == 1:
        return [(olds_a[0], olds_b[0])]
    match = {x: [y for y in olds_b if adds_wrappers(x, y) or adds_wrappers(y, x)] for x in olds_a}
    used = Counter(y for ys in match.values() for y in ys)
    return [(x, ys[0]) for x, ys in match.items() if len(ys) == 1 and used[ys[0]] == 1]


def _renamed(frame: pd.DataFrame, renames: Mapping[str, str]) -> pd.DataFrame:
    return frame.rename(index=renames) if renames and not frame.empty else frame


def side_deltas(a: Side, b: Side, renames: Mapping[str, str] | None = None) -> tuple[Delta, ...]:
    """Every section's deltas of ``b`` against ``a``, each section ranked; layers renamed by
    ``renames`` (default :func:`renamed_layers`)."""
    labels = (a.label, b.label)
    names = renamed_layers(a, b) if renames is None else renames

    def frames(side: Side, per_run: PerRun) -> list[tuple[pd.DataFrame, int]]:
        return [per_run(run) for run in side.runs]

    phases = _rows(PHASE, _pooled(frames(a, _phase_frame)), _pooled(frames(b, _phase_frame)),
                   labels, PHASE_RANKED_BY)  # fmt: skip
    layer_a = [(_renamed(f, names), w) for f, w in frames(a, _layer_frame)]
    layer_b = [(_renamed(f, names), w) for f, w in frames(b, _layer_frame)]
    step = (float(np.median(a.step_ns())) + float(np.median(b.step_ns()))) / 2.0
    minimum = minimum_effect_pct([r.step_ns() for r in a.runs], [r.step_ns() for r in b.runs])
    tests = layer_tests([f for f, _ in layer_a], [f for f, _ in layer_b], LAYER_RANKED_BY,
                        step, minimum)  # fmt: skip
    layers = _rows(LAYER, _pooled(layer_a), _pooled(layer_b), labels, LAYER_RANKED_BY, tests)
    kernels = _rows(KERNEL, _pooled(frames(a, _kernel_frame)),
                    _pooled(frames(b, _kernel_frame)), labels, ("gpu_ns",))  # fmt: skip
    idle = _idle_rows(a, b, labels)
    return (*phases, *idle, *layers, *kernels, *_summary_rows(a, b))
