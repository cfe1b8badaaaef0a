"""The name each range's path uses: its own, or its template when it is a counter.

Place in the pipeline: ingest, for :func:`dlprof_lite.ingest.nvtx.build_ranges` (the rule:
:mod:`dlprof_lite.rules.templates`). Vectorised over ranges; Python touches each distinct
name once (its template and its numbers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask
from dlprof_lite.rules.names import DOMAIN
from dlprof_lite.rules.templates import MIN_SIBLINGS, counter_key, may_count, template


def path_names(name: pd.Categorical, domain: pd.Categorical, parent: np.ndarray,
               depth: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> pd.Categorical:  # fmt: skip
    """Per range (rows in start order), the name its path uses. ``parent``: row position of
    each row's parent, -1 at the top."""
    words = [str(c) for c in name.categories]
    code = np.asarray(name.codes, dtype=np.int64)
    numbered = np.array([may_count(w) for w in words], dtype=bool)
    if not numbered.any() or code.size == 0:
        return name
    templates = [template(w) if n else w for w, n in zip(words, numbered, strict=True)]
    t_code, t_words = pd.factorize(pd.Index(templates, dtype=object))
    # each numbered name's rank among the names of its template, by its numbers
    rank = np.zeros(len(words), dtype=np.int64)
    members: dict[int, list[int]] = {}
    for i in np.flatnonzero(numbered).tolist():
        members.setdefault(int(t_code[i]), []).append(i)
    for names in members.values():
        names.sort(key=lambda i: counter_key(words[i]))
        rank[names] = np.arange(len(names))
    # Domains by their codes (-1: none): no per-range string objects.
    domain_code = np.asarray(domain.codes, dtype=np.int64)
    ours = cat_mask(pd.Series(domain, copy=False), lambda s: s == DOMAIN)
    known = code >= 0
    eligible = known & numbered[np.maximum(code, 0)] & ~ours
    if not eligible.any():
        return name
    rows = np.flatnonzero(eligible)
    has_parent = parent[rows] >= 0
    parent_code = np.where(has_parent, code[np.maximum(parent[rows], 0)], -1)
    parent_t = np.where(parent_code >= 0, t_code[np.maximum(parent_code, 0)], -1)
    frame = pd.DataFrame({
        "domain": domain_code[rows],
        "depth": depth[rows], "t": t_code[code[rows]], "parent_t": parent_t,
        "pid": pid[rows], "tid": tid[rows], "name": code[rows], "rank": rank[code[rows]],
    })  # fmt: skip
    frame["group"] = frame.groupby(["domain", "depth", "t", "parent_t"], sort=False).ngroup()
    by = frame.groupby("group", sort=False)
    siblings = by["name"].nunique()
    once = frame.groupby(["group", "pid", "name"], sort=False).size().groupby(level=0).max() == 1
    # rows are in start order: on each thread the ranks must grow, and on one at least the
    # count must go on (one range per thread counts nothing)
    thread = frame.groupby(["group", "pid", "tid"], sort=False)
    step = thread["rank"].diff()
    grows = (step.isna() | (step > 0)).groupby(frame["group"]).all()
    counts = step.notna().groupby(frame["group"]).any()
    counted = (siblings >= MIN_SIBLINGS) & once & grows & counts
    use = counted.reindex(frame["group"]).to_numpy(dtype=bool)
    if not use.any():
        return name
    out_words = pd.Index(words + [str(w) for w in t_words], dtype=object)
    out = code.copy()
    out[rows[use]] = len(words) + t_code[code[rows[use]]]
    merged, categories = pd.factorize(out_words)
    final = np.where(out >= 0, merged[np.maximum(out, 0)], -1)
    return pd.Categorical.from_codes(final, categories=pd.Index(categories))
