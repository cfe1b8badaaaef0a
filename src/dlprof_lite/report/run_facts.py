"""Run facts: what the profiled process recorded about itself, from ``Profile.facts``.

Place in the pipeline: report. The annotation layer writes each fact as an NVTX mark in the
``dlprof-lite`` domain (the codec: :mod:`dlprof_lite.rules.facts`); ingest parses them once
into the Profile's ``facts`` frame (:mod:`dlprof_lite.ingest.facts`), and this module turns
them into the summary's data-loader settings and annotation cost, so
the advice can name the ``num_workers`` a script really used instead of guessing, and into
one row per module (:func:`module_facts`: input shapes and dtypes of its first call) for the
layer table (:mod:`dlprof_lite.report.layers.kernels`), one row per module folded after the
warm-up step (:func:`folded_modules`, :mod:`dlprof_lite.report.layers.folded`), and into the
profiled process's torch, CUDA and Python versions and command (:func:`process_summary`).

A profile of several processes (one per rank) holds one set of facts per process: equal
DataLoader facts are listed once, and the annotation cost is judged per process (the
costliest one is reported: a step waits for its slowest rank).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dlprof_lite.rules.names import FOLDED, ROOT_MODULE
from dlprof_lite.safe_text import printable

# The settings a summary names for each DataLoader, in this order.
LOADER_SETTINGS = ("num_workers", "batch_size", "pin_memory", "persistent_workers")


@dataclass(frozen=True)
class RunFacts:
    """Facts of one profile: ``dataloaders`` (distinct, in mark order), ``annotation`` (one
    per process, keyed by pid), ``ranks`` (pid, rank) of processes a launcher started and
    ``processes`` (pid, its first ``process`` fact), in mark order."""

    dataloaders: tuple[dict[str, Any], ...] = ()
    annotation: tuple[tuple[int, dict[str, Any]], ...] = ()
    ranks: tuple[tuple[int, int], ...] = ()
    processes: tuple[tuple[int, dict[str, Any]], ...] = ()


def read_run_facts(facts: pd.DataFrame) -> RunFacts:
    """The run facts of a profile (``Profile.facts``: :mod:`dlprof_lite.ingest.facts`)."""
    loaders: dict[str, dict[str, Any]] = {}
    annotation: dict[int, dict[str, Any]] = {}
    ranks: dict[int, int] = {}
    processes: dict[int, dict[str, Any]] = {}
    for key, value, pid in zip(facts["key"], facts["value"], facts["pid"].to_numpy(),
                               strict=True):  # fmt: skip
        if key == "dataloader":
            loaders.setdefault(json.dumps(value, sort_keys=True), value)
        elif key == "annotation":
            annotation[int(pid)] = value  # the last one of a process is its exit total
        elif key == "process":
            processes.setdefault(int(pid), value)
            if isinstance(value.get("rank"), int):
                ranks[int(pid)] = value["rank"]
    return RunFacts(tuple(loaders.values()), tuple(annotation.items()), tuple(ranks.items()),
                    tuple(processes.items()))  # fmt: skip


# The ``module`` fact's fields (rules.names.FACT_KEYS), in the order module_facts returns them.
MODULE_FACT_FIELDS = (
    "layer", "type", "in_shape", "dtype", "param_dtype", "autocast", "tf32", "tf32_conv",
    "device", "wrapper",
)  # fmt: skip
_FLAGS = ("tf32", "tf32_conv")


def module_facts(facts: pd.DataFrame | None) -> pd.DataFrame:
    """One row per layer named by a ``module`` fact: :data:`MODULE_FACT_FIELDS`.

    Each module writes its fact once, at its first call, so a layer's row is its first call.
    The first fact of a layer wins: ranks of one profile run the same model, and a name two
    modules share (a module without a known qualified name) keeps the one that ran first.
    """
    rows: dict[str, tuple[object, ...]] = {}
    for key, value in _pairs(facts):
        if key != "module" or not isinstance(value.get("layer"), str):
            continue
        layer = value["layer"] or ROOT_MODULE  # the range names an unnamed root so
        if layer not in rows:
            rows[layer] = tuple(
                value.get(f) is True if f in _FLAGS else _text(value.get(f))
                for f in MODULE_FACT_FIELDS[1:]
            )
            rows[layer] = (layer, *rows[layer])
    frame = pd.DataFrame(list(rows.values()), columns=list(MODULE_FACT_FIELDS))
    return frame.astype({f: bool if f in _FLAGS else object for f in MODULE_FACT_FIELDS})


# Columns of folded_modules: the layer, its median forward call in the warm-up step, the
# layer whose self time holds its calls from then on (empty: none annotated above it), the
# module first called just before it (its place in network order).
FOLDED_COLUMNS = ("layer", "folded_call_ns", "into", "after")


def folded_modules(facts: pd.DataFrame | None) -> pd.DataFrame:
    """One row per module the ``folded`` facts name (:data:`FOLDED_COLUMNS`), in fact order
    (network order). The first fact of a layer wins, as in :func:`module_facts`."""
    rows: dict[str, tuple[str, int, str | None, str | None]] = {}
    for key, value in _pairs(facts):
        if key != FOLDED or not isinstance(value.get("modules"), list):
            continue
        for entry in value["modules"]:
            if (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)
                    and _number(entry[1]) is not None):  # fmt: skip
                rows.setdefault(entry[0], (entry[0], int(entry[1]), _text(entry[2]),
                                           _text(entry[3])))  # fmt: skip
    frame = pd.DataFrame(list(rows.values()), columns=list(FOLDED_COLUMNS))
    return frame.astype({"layer": object, "folded_call_ns": "int64", "into": object,
                         "after": object})  # fmt: skip


def _pairs(facts: pd.DataFrame | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, value) of each fact, in time order; none for no frame."""
    if facts is None or facts.empty:
        return iter(())
    return zip(facts["key"], facts["value"], strict=True)


def _text(value: object) -> str | None:
    """A fact field as text; None for a missing or empty one."""
    return str(value) if value not in (None, "") else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def loader_settings(loader: dict[str, Any]) -> str:
    """``TensorDataset loader (24 batches): num_workers=4, batch_size=64, pin_memory=True,
    persistent_workers=False``: which loader (its dataset's class and length, where the
    annotation recorded them: a training and a validation loader read apart), then its
    settings."""
    settings = ", ".join(f"{k}={loader.get(k)}" for k in LOADER_SETTINGS if k in loader)
    dataset, length = loader.get("dataset"), loader.get("length")
    if not isinstance(dataset, str) or not dataset:
        return settings
    batches = f" ({length} batches)" if isinstance(length, int) and length > 0 else ""
    return f"{printable(dataset)} loader{batches}: {settings}"


def dataloader_summary(facts: RunFacts) -> dict[str, object]:
    """Summary columns for the DataLoaders that fed a data phase (None without facts)."""
    workers = [_number(d.get("num_workers")) for d in facts.dataloaders]
    known = [int(w) for w in workers if w is not None]
    return {
        "dataloader_count": len(facts.dataloaders) if facts.dataloaders else None,
        "dataloader_num_workers": min(known) if known else None,
        "dataloader_settings": "; ".join(loader_settings(d) for d in facts.dataloaders) or None,
    }


def annotation_summary(facts: RunFacts, step_ns: float | None) -> dict[str, object]:
    """Estimated host time the module annotation added per step: module_calls x
    ns_per_call / steps, the costliest process; and its share of the mean step. With folding
    (the fact's warmup_calls and warmup_steps), the calls and steps after warm-up: the
    analysed steps' own cost, not the warm-up step's."""
    costs = []
    for _, value in facts.annotation:
        calls, steps = _annotated(value)
        per_call = _number(value.get("ns_per_call"))
        if calls is not None and per_call is not None and steps:
            costs.append(calls * per_call / steps)
    cost = max(costs) if costs else None
    return {
        "annotation_cost_ns": cost,
        "annotation_cost_pct": cost / step_ns * 100.0 if cost is not None and step_ns else None,
    }


def _annotated(value: dict[str, Any]) -> tuple[float | None, float | None]:
    """Annotated module calls and steps of an ``annotation`` fact: those after warm-up where
    it ended with folds (warmup_calls, warmup_steps), else the whole run's."""
    calls, steps = _number(value.get("module_calls")), _number(value.get("steps"))
    warm_calls, warm_steps = _number(value.get("warmup_calls")), _number(value.get("warmup_steps"))
    if calls is None or steps is None or warm_calls is None or warm_steps is None:
        return calls, steps
    if steps <= warm_steps:
        return calls, steps
    return calls - warm_calls, steps - warm_steps


def _version(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _command(value: dict[str, Any]) -> str | None:
    argv = value.get("argv")
    if not isinstance(argv, list) or not argv:
        return None
    return shlex.join(str(a) for a in argv)


def process_summary(facts: RunFacts) -> tuple[dict[str, object], list[str]]:
    """Summary columns for the profiled process (torch, CUDA, Python, command) and their
    warnings. Several processes (ranks): the lowest rank's, else the first to record one (a
    rank-0 command is the same from run to run, whichever rank imported torch first); ranks
    that run another torch are named in a warning."""
    if not facts.processes:
        return dict.fromkeys(("torch_version", "cuda_version", "python_version", "command")), []
    order = {pid: i for i, (pid, _) in enumerate(facts.processes)}
    ranks = dict(facts.ranks)
    pid, value = min(facts.processes, key=lambda p: (ranks.get(p[0], len(order)), order[p[0]]))
    flat: dict[str, object] = {
        "torch_version": _version(value.get("torch")),
        "cuda_version": _version(value.get("cuda")),
        "python_version": _version(value.get("python")),
        "command": _command(value),
    }
    warnings = []
    if value.get("argv_truncated") is True:
        warnings.append("the profiled program's command line is longer than its process "
                        "fact keeps: command is its beginning only")  # fmt: skip
    torches: dict[str | None, list[str]] = {}
    for p, v in sorted(facts.processes, key=lambda p: ranks.get(p[0], len(order))):
        torches.setdefault(_version(v.get("torch")), []).append(_who(p, ranks))
    if len(torches) > 1:
        who = "; ".join(f"torch {t or '?'} on {_few(names)}" for t, names in torches.items())
        warnings.append(f"the profiled processes run different torch versions ({who}): "
                        f"torch_version is {_who(pid, ranks)}'s")  # fmt: skip
    return flat, warnings


def _who(pid: int, ranks: dict[int, int]) -> str:
    return f"rank {ranks[pid]}" if pid in ranks else f"pid {pid}"


def _few(names: list[str], shown: int = 4) -> str:
    """At most ``shown`` names (a run of 64 ranks stays one short line)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
