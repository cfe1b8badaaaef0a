"""Which nodes a what-if scales, and what replay predicts for the analysed steps.

Place in the pipeline: report, over :mod:`~dlprof_lite.report.critical.replay`; the
``whatif`` command and ``Report.what_if`` print its :class:`Prediction`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.report.critical.graph import Graph
from dlprof_lite.report.critical.prediction import Prediction, Scale
from dlprof_lite.report.critical.replay import Replayed, replay, step_times
from dlprof_lite.report.metrics import PHASE_COLUMNS
from dlprof_lite.rules.critical import EDGE
from dlprof_lite.rules.idle import DEVICE_CAUSES

_SYNC = DEVICE_CAUSES.index("sync")


def selected(scale: Scale, g: Graph, short_names: pd.Index | None = None) -> np.ndarray:
    """The nodes this scale selects (a mask); InputError when none in the analysed steps.
    A kernel's regular expression is searched in its full name and in its short name
    (``short_names``: aligned with ``g.names``, as kernels.csv writes it)."""
    if scale.kind == "layer":
        names = g.layers.astype(str)
        hit = (names == scale.what) | names.str.startswith(scale.what + ".")
        mask = np.isin(g.layer, np.flatnonzero(np.asarray(hit)))
        choices = _listed(g.layers[np.unique(g.layer[g.layer >= 0])])
    elif scale.kind == "phase":
        code = PHASE_COLUMNS.index(scale.what) if scale.what in PHASE_COLUMNS else -2
        mask = g.phase == code
        choices = ", ".join(PHASE_COLUMNS)
    else:
        hit = np.asarray(g.names.astype(str).str.contains(scale.what, regex=True), bool)
        if short_names is not None:
            hit |= np.asarray(short_names.astype(str).str.contains(scale.what, regex=True),
                              bool)  # fmt: skip
        mask = g.on_device() & np.isin(g.name, np.flatnonzero(hit))
        named = short_names if short_names is not None else g.names
        used = np.unique(g.name[g.on_device() & (g.name >= 0)])
        if used.size == 0:
            raise InputError(f"--scale {scale}: this profile has no GPU kernels to scale")
        choices = _listed(named[used])
    mask &= g.step >= 0
    if not mask.any():
        raise InputError(f"--scale {scale}: no {scale.kind} {scale.what!r} in the analysed "
                         f"steps (choose from: {choices})")  # fmt: skip
    return mask


def _listed(names: object, most: int = 12) -> str:
    items = [str(n) for n in names]  # type: ignore[attr-defined]
    shown = ", ".join(items[:most])
    return shown + (f", ... ({len(items)} in all)" if len(items) > most else "")


def predict(g: Graph, scales: list[Scale], short_names: pd.Index | None = None) -> Prediction:
    if g.size == 0 or g.step_start.size == 0:
        raise InputError("no analysed steps with host or GPU work: nothing to replay (a "
                         "what-if needs the steps of an annotated run or --key-range)")
    factor = np.ones(g.size)
    counts = []
    for s in scales:
        mask = selected(s, g, short_names)
        factor[mask] *= s.factor
        counts.append(int(mask.sum()))
    ones = np.ones(g.size)
    observed = step_times(g, Replayed(g.start, g.end), ones)
    predicted = step_times(g, replay(g, factor), factor)
    return Prediction(tuple(scales), observed, predicted, tuple(counts), _notes(g, factor))


def _notes(g: Graph, factor: np.ndarray) -> tuple[str, ...]:
    """What the prediction keeps that the change might remove."""
    changed = factor != 1
    waits = np.zeros(g.size, dtype=bool)
    waits[g.ends.dst] = True
    waits |= g.cause == _SYNC
    notes = []
    kept = int((changed & waits).sum())
    if kept:
        notes.append(f"{kept} of the scaled pieces are waits (a sync call, a thread waiting "
                     "for another): replay keeps every edge, so they still wait for what they "
                     "waited for; removing a sync itself is not predicted")  # fmt: skip
    syncs = int((g.ends.kind == EDGE["sync"]).sum())
    if syncs:
        notes.append(f"{syncs} sync calls in the analysed steps are kept: each still waits "
                     "for the GPU work before it")
    return tuple(notes)
