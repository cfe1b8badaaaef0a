"""Which NVTX range marks one training step: the key-range rules after ``--key-range``.

Place in the pipeline: used by :mod:`dlprof_lite.ingest.iterations`, which owns the order of
the rules and turns the chosen instances into iterations. Each rule here takes the
``ranges`` table and returns the closed instances of its key and the key's name (no rows
and ``None`` when the rule does not apply; a range never closed has no end, so no boundary):

- :func:`numbered_steps`: a script's own ranges named with a step word and a number
  (``step 12``, ``iteration 3``, ``Step#12``, ``train_step_3``, ``batch 7``, ``Iter: 5``,
  ``epoch 1 step 30``, torch.profiler's ``ProfilerStep#4``). Names that differ only by
  their numbers are one key, shown with ``#`` for each number (``step #``). They count
  only where the user put them around steps: top level on their thread, or directly under
  a top-level range that is not itself numbered (``epoch 1`` > ``step 30``); and only when
  at least :data:`MIN_REPEATS` distinct names repeat on one thread. An epoch range alone
  (``epoch 3``) has no step word and is no step.
- :func:`root_model_calls`: for scripts without optimizer steps (inference): our
  ``forward`` phase ranges, else the calls of a root model, the ``fwd:`` module ranges with
  no module range around them (``fwd:model:Net``), repeated on one thread.
- :func:`most_repeated`: the top-level push/pop name that repeats most on one thread;
  :func:`repeated_names` the others after it, in the order they are tried when a name fails
  the step test (:mod:`dlprof_lite.ingest.step_guess`).

Op markers (PyProf payloads, emit_nvtx op ranges, our module ranges) are never a step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from dlprof_lite.ingest.levels import by_level
from dlprof_lite.numeric import cat_mask, range_positions
from dlprof_lite.rules.names import DOMAIN, GC_RANGE_PREFIX, MODULE_RANGE_RE, PHASES
from dlprof_lite.rules.steps import MAYBE_STEP_RE, OP_MARKER_RE, step_key

# A key must repeat on one thread at least this often: one instance is no loop.
MIN_REPEATS = 2
# The most-repeated rule tries at most this many names (each must pass the step test).
MAX_CANDIDATES = 10
_MODULE_PREFIX_RE = re.compile(r"^(?:fwd|bwd|rec):")
_FORWARD = PHASES[1]


def _per_name(
    names: pd.Series, test: Callable[[str], object], maybe: re.Pattern[str]
) -> np.ndarray:
    """Per row, ``test`` of its name (None where the name does not match ``maybe``).

    Computed once per distinct name, and only for names that ``maybe`` (one vectorised
    search over the distinct names) lets through: a profile of a million op ranges with
    distinct names costs one pass, not a million Python calls.
    """
    cats = names.astype("category")
    distinct = cats.cat.categories.astype(str)
    values = np.full(len(distinct) + 1, None, dtype=object)  # the last one for missing names
    for i in np.flatnonzero(np.asarray(distinct.str.contains(maybe), dtype=bool)):
        values[i] = test(str(distinct[int(i)]))
    return values[cats.cat.codes.to_numpy()]


def _closed(ranges: pd.DataFrame) -> np.ndarray:
    return ranges["closed"].to_numpy(dtype=bool)


def numbered_steps(ranges: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Instances of the numbered step key with the most distinct names on one thread."""
    keys = _per_name(ranges["name"], step_key, MAYBE_STEP_RE)
    numbered = pd.notna(keys) & (ranges["domain"] != DOMAIN).to_numpy()
    if not numbered.any():
        return ranges.iloc[:0], None
    depth = ranges["depth"].to_numpy()
    parent = _parents(ranges)
    parent_ok = np.zeros(len(ranges), dtype=bool)
    has = parent >= 0
    # Directly under a top-level range that is not numbered itself (``epoch 1`` > ``step 3``).
    parent_ok[has] = (depth[parent[has]] == 0) & ~numbered[parent[has]]
    eligible = numbered & ((depth == 0) | ((depth == 1) & parent_ok)) & _closed(ranges)
    rows = ranges[eligible].assign(_key=keys[eligible])
    stats = rows.groupby(["_key", "pid", "tid"], sort=False).agg(
        names=("name", "nunique"), first=("start_ns", "min")
    )
    stats = stats[stats["names"] >= MIN_REPEATS]
    if stats.empty:
        return ranges.iloc[:0], None
    best = stats.sort_values(["names", "first"], ascending=[False, True], kind="stable")
    key = str(best.index[0][0])
    return rows[(rows["_key"] == key).to_numpy()].drop(columns="_key"), key


def root_model_calls(ranges: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Our ``forward`` phase ranges, else the repeated calls of a root model (inference).

    Only reached when the profile has no ``iteration`` ranges of ours, so every forward
    phase is outside an iteration. A root call is a ``fwd:`` range of ours with no module
    range (``fwd:``/``bwd:``/``rec:``) around it on its thread.
    """
    ours = (ranges["domain"] == DOMAIN).to_numpy() & _closed(ranges)
    forward = ranges[ours & (ranges["name"] == _FORWARD).to_numpy()]
    if _repeats(forward):
        return forward, _FORWARD
    direction = _per_name(ranges["name"], _direction, _MODULE_PREFIX_RE)
    module = (ranges["domain"] == DOMAIN).to_numpy() & pd.notna(direction)
    roots = ours & module & (direction == "fwd") & ~_under(ranges, module)
    calls = ranges[roots & (ranges["style"] == "push_pop").to_numpy()]
    name = _best_name(calls)
    if name is None:
        return ranges.iloc[:0], None
    return calls[(calls["name"] == name).to_numpy()], name


def _direction(name: str) -> str | None:
    m = MODULE_RANGE_RE.match(name)
    return None if m is None else m.group("dir")


def _under(ranges: pd.DataFrame, flag: np.ndarray) -> np.ndarray:
    """Whether some ancestor of each range is flagged: one pass per nesting level."""
    under = np.zeros(len(ranges), dtype=bool)
    parent = _parents(ranges)
    for rows in by_level(ranges["depth"].to_numpy(dtype=np.int64))[1:]:
        rows = rows[parent[rows] >= 0]
        up = parent[rows]
        under[rows] = flag[up] | under[up]
    return under


def _parents(ranges: pd.DataFrame) -> np.ndarray:
    """Row position of each range's parent (-1 at the top)."""
    return range_positions(
        ranges["range_id"].to_numpy(dtype=np.int64), ranges["parent_id"].to_numpy(dtype=np.int64)
    )


def _repeats(instances: pd.DataFrame) -> bool:
    if instances.empty:
        return False
    return bool(instances.groupby(["pid", "tid"]).size().max() >= MIN_REPEATS)


def _best_name(candidates: pd.DataFrame) -> str | None:
    """The name with most instances on one thread (at least :data:`MIN_REPEATS`); among
    equals the one whose first instance starts first."""
    return next(iter(_ranked_names(candidates)), None)


def _ranked_names(candidates: pd.DataFrame) -> list[str]:
    """Names with at least :data:`MIN_REPEATS` instances on one thread, by their most
    instances on one thread, then by their first instance's start."""
    if candidates.empty:
        return []
    frame = candidates.assign(name=candidates["name"].astype("object"))
    stats = frame.groupby(["name", "pid", "tid"])["start_ns"].agg(["size", "min"])
    stats = stats[stats["size"] >= MIN_REPEATS]
    ranked = stats.sort_values(["size", "min"], ascending=[False, True], kind="stable")
    return list(dict.fromkeys(str(key[0]) for key in ranked.index))


def repeated_names(
    ranges: pd.DataFrame, limit: int = MAX_CANDIDATES
) -> Iterator[tuple[pd.DataFrame, str]]:
    """Top-level push/pop instances of each name that repeats on one thread, the name that
    repeats most first (among equals the one whose first instance starts first), at most
    ``limit`` names: the most-repeated rule's candidates, in the order it tries them.

    Names in the default NVTX domain come first: libraries such as cuBLAS or NCCL push their
    own repeated ranges in their own domains. Op markers and the annotation's garbage
    collections (``gc:<generation>``, repeated wherever the program allocates) never count.
    """
    top = ranges[
        _closed(ranges)
        & (ranges["depth"] == 0).to_numpy()
        & (ranges["style"] == "push_pop").to_numpy()
    ]
    marker = _per_name(top["name"], lambda n: True, OP_MARKER_RE)
    top = top[pd.isna(marker) & ~collections(top)]
    default = (top["domain"].astype("object") == "").to_numpy()
    names = [*_ranked_names(top[default]), *_ranked_names(top[~default])]
    for name in list(dict.fromkeys(names))[:limit]:
        yield top[(top["name"] == name).to_numpy()], name


def collections(ranges: pd.DataFrame) -> np.ndarray:
    """The annotation's ``gc:<generation>`` ranges: no step, and none of the program's own
    structure (a collection runs wherever the program happens to allocate)."""
    ours = (ranges["domain"] == DOMAIN).to_numpy(dtype=bool)
    found: np.ndarray = ours & cat_mask(ranges["name"], lambda s: s.str.startswith(GC_RANGE_PREFIX))
    return found


def most_repeated(ranges: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The first of :func:`repeated_names`: the top-level push/pop name that repeats most on
    one thread (default domain first); no rows and None without one."""
    for instances, name in repeated_names(ranges, limit=1):
        return instances, name
    return ranges.iloc[:0], None
