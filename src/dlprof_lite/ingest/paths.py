"""NVTX range paths: one id per chain of names, and a bounded label to show for it.

Used by :func:`dlprof_lite.ingest.nvtx.build_ranges`: the ``path`` label of every range, and
its ``path_id``/``parent_path_id`` (:func:`with_path_ids`), by which the report's per-path
table groups instances of one path.

A range's *chain* is its own name and those of its enclosing ranges up to the top level.
Chains are identified by integers, never by spelling them out: a chain ``d`` levels deep
spelled in full costs ``d`` names, so a trace nested thousands deep (recursive modules, user
code that pushes and never pops) would cost memory quadratic in its depth.

The label is the chain joined by :data:`PATH_SEP`, shortened when long so that a cell stays
bounded whatever the nesting:

* more than ``PATH_HEAD + PATH_TAIL + 1`` names: the first :data:`PATH_HEAD` and the last
  :data:`PATH_TAIL` names with one :data:`ELISION` element between them
  (``a/b/c/d/…/s/t/u/v/w/x/y/z``);
* then, longer than :data:`PATH_MAX_CHARS` characters (very long names): the first and last
  characters with :data:`ELISION` between them, :data:`PATH_MAX_CHARS` in all.

Two chains can share a label (they differ only where it is elided); the full chain of any
range is always there through ``parent_id``, and each chain has its own ``path_id`` (its
parent's: ``parent_path_id``).

Work is linear in the number of ranges: one pass per nesting level, each over that level's
ranges only; Python strings are built once per distinct label, each from at most
``PATH_HEAD + PATH_TAIL`` names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.ingest.levels import by_level, consistent_depth
from dlprof_lite.numeric import range_positions

PATH_SEP = "/"
ELISION = "…"
PATH_HEAD = 4
PATH_TAIL = 8
PATH_MAX_CHARS = 1000
# A chain of more names than this is elided (eliding fewer than two names saves nothing).
_FULL = PATH_HEAD + PATH_TAIL + 1


def chain_keys(label: np.ndarray, parent: np.ndarray, levels: list[np.ndarray]) -> np.ndarray:
    """Per row, a dense id of its chain of ``label`` codes (non-negative ints).

    ``parent``: row position of each row's parent (-1 at the top); ``levels``: rows by depth
    (:func:`by_level`). Ids are numbered level by level, so a parent's id is smaller than
    its children's.
    """
    key = np.empty(label.size, dtype=np.int64)
    width = int(label.max()) + 1 if label.size else 1
    base = 0
    for level, rows in enumerate(levels):
        if rows.size == 1:  # most levels of a deep chain: nothing to compare
            key[rows] = base
            base += 1
            continue
        pair = label[rows] if level == 0 else key[parent[rows]] * width + label[rows]
        # A deep trace has thousands of levels of a few ranges each: there a sort costs
        # less than building a hash table; a wide level is hashed.
        if rows.size < 64:
            uniq, inverse = np.unique(pair, return_inverse=True)
        else:
            inverse, uniq = pd.factorize(pair)
        key[rows] = base + inverse
        base += len(uniq)
    return key


def path_labels(name: pd.Categorical, parent: np.ndarray, depth: np.ndarray) -> pd.Categorical:
    """The ``path`` label of every row as a categorical (rules in the module docstring).

    ``parent`` holds row positions; ``depth`` must be consistent with it.
    """
    words = [str(c) for c in name.categories] + [""]  # last slot: missing name
    code = np.asarray(name.codes, dtype=np.int64)
    code = np.where(code < 0, len(words) - 1, code)
    levels = by_level(depth)
    key = chain_keys(code, parent, levels)
    first = _first_rows(key)  # one row per chain, in chain id order
    # chains are numbered level by level: those of level d are ids [bound[d], bound[d + 1])
    bound = np.searchsorted(depth[first], np.arange(len(levels) + 1))
    # One label per chain id, clipped as it is built: the clip of (clipped prefix + name)
    # is the clip of the whole, as the clip keeps both ends.
    spelled: list[str] = []
    for level in range(min(len(levels), _FULL)):
        mine = first[bound[level] : bound[level + 1]]
        if level == 0:
            spelled.extend(_clip(words[c]) for c in code[mine])
        else:
            up = key[parent[mine]]
            spelled.extend(
                _clip(spelled[u] + PATH_SEP + words[c]) for u, c in zip(up, code[mine], strict=True)
            )
    if len(levels) > _FULL:
        deep = first[bound[_FULL] :]
        heads = key[_ancestor_at(PATH_HEAD - 1, parent, levels)[deep]]
        spelled.extend(_elided(deep, heads, spelled, code, words, parent))
    # Different chains may spell one label (a '/' inside a name, an elided middle, a literal
    # '' name beside a missing one): one category per label.
    merged, categories = pd.factorize(pd.Index(spelled, dtype=object))
    return pd.Categorical.from_codes(merged[key], categories=pd.Index(categories))


def _ancestor_at(depth: int, parent: np.ndarray, levels: list[np.ndarray]) -> np.ndarray:
    """Per row, its ancestor at ``depth`` (itself at that depth; -1 above it)."""
    out = np.full(parent.size, -1, dtype=np.int64)
    if len(levels) > depth:
        out[levels[depth]] = levels[depth]
    for rows in levels[depth + 1 :]:  # one gather per level: parents are resolved first
        out[rows] = out[parent[rows]]
    return out


def _first_rows(key: np.ndarray) -> np.ndarray:
    """The first row of each key, in key order (keys are dense 0..k-1)."""
    first = np.full(int(key.max()) + 1 if key.size else 0, key.size, dtype=np.int64)
    np.minimum.at(first, key, np.arange(key.size))
    return first


def _elided(
    rows: np.ndarray,
    heads: np.ndarray,
    spelled: list[str],
    code: np.ndarray,
    words: list[str],
    parent: np.ndarray,
) -> list[str]:
    """Labels of deep chains: the head chain's label (``heads``: its chain ids), the
    elision, then the last :data:`PATH_TAIL` names."""
    tail = np.empty((PATH_TAIL, rows.size), dtype=np.int64)
    at = rows
    for i in range(PATH_TAIL - 1, -1, -1):  # nearest name last
        tail[i] = code[at]
        at = parent[at]
    return [
        _clip(spelled[h] + PATH_SEP + ELISION + PATH_SEP + PATH_SEP.join(words[c] for c in names))
        for h, names in zip(heads, tail.T, strict=True)
    ]


def _clip(text: str) -> str:
    """At most :data:`PATH_MAX_CHARS` characters: the middle gives way to :data:`ELISION`."""
    if len(text) <= PATH_MAX_CHARS:
        return text
    keep = PATH_MAX_CHARS - len(ELISION)
    return text[: keep - keep // 2] + ELISION + text[len(text) - keep // 2 :]


def path_groups(ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per range (row order): the id of its chain of ``(path_name, domain)`` pairs (``name``
    where a frame has no ``path_name``), its parent's
    chain id (-1 at the top) and its depth. Ranges with one chain id are instances of one
    path; ids are numbered level by level, so a parent's id is below its children's."""
    ids = ranges["range_id"].to_numpy(dtype=np.int64)
    parent = range_positions(ids, ranges["parent_id"].to_numpy(dtype=np.int64))
    depth = consistent_depth(parent, ranges["depth"].to_numpy(dtype=np.int64))
    name = _codes(ranges["path_name"] if "path_name" in ranges.columns else ranges["name"])
    domain = _codes(ranges["domain"])
    label = name * (int(domain.max()) + 1) + domain
    key = chain_keys(label, parent, by_level(depth))
    return key, np.where(parent >= 0, key[np.maximum(parent, 0)], -1), depth


def with_path_ids(ranges: pd.DataFrame) -> pd.DataFrame:
    """``ranges`` with ``path_id`` and ``parent_path_id`` (:func:`path_groups`), replaced
    where present, and ``path_name`` (the name itself where absent: a hand-built frame); the
    input is not modified."""
    none = np.empty(0, dtype=np.int64)
    key, parent_key, _ = path_groups(ranges) if len(ranges) else (none, none, none)
    out = ranges.copy(deep=False)
    if "path_name" not in out.columns:
        out["path_name"] = out["name"].astype("category")
    out["path_id"] = key.astype(np.int32)  # numbered level by level: below the range count
    out["parent_path_id"] = parent_key.astype(np.int32)
    return out


def _codes(column: pd.Series) -> np.ndarray:
    """Dense non-negative codes of a column's values; missing values get their own code."""
    codes = pd.factorize(column, use_na_sentinel=False)[0]
    return np.asarray(codes, dtype=np.int64)
