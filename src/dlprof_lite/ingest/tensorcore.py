"""Tensor Core flags for kernels: apply the rule table to kernel names.

Place in the pipeline: ingest, after the reader has built ``kernels``. ``classify_kernels``
adds the derived columns ``tc_class`` (tc / no_tc / unknown), ``uses_tensor_cores`` and
``tc_rule`` (:mod:`dlprof_lite.ingest.columns`); report turns them into the TC share of
kernels, ranges and layers, and into the advice about TC-eligible layers.

The rules themselves are data in :mod:`dlprof_lite.rules.tensor_cores`. A profile has millions
of kernel rows but a few hundred distinct names, so each distinct name is classified once
and the verdicts are spread to the rows through the categorical codes of ``name``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import cast

import numpy as np
import pandas as pd

from dlprof_lite.ingest.columns import categorical_from_codes
from dlprof_lite.rules.tensor_cores import RULE_IDS, RULES, VERDICTS, WEAK_RULE_IDS, TcRule

# Pseudo rule id for a kernel without any name (NULL / empty in the export).
NO_NAME_RULE = "no_name"
TC_RULE_CATEGORIES: tuple[str, ...] = (*RULE_IDS, NO_NAME_RULE)

_COMPILED: tuple[tuple[TcRule, re.Pattern[str]], ...] = tuple(
    (rule, re.compile(rule.pattern)) for rule in RULES
)
_WEAK = frozenset(WEAK_RULE_IDS | {NO_NAME_RULE})


def _classify_one(name: object) -> tuple[str, str]:
    if not isinstance(name, str) or not name.strip():
        return "unknown", NO_NAME_RULE
    text = name.strip()
    for rule, regex in _COMPILED:
        if regex.search(text):
            return rule.verdict, rule.id
    # Unreachable while the table ends with a catch-all; kept so a table edit cannot crash.
    return "unknown", NO_NAME_RULE


def classify_names_with_rules(names: Iterable[object]) -> tuple[list[str], list[str]]:
    """Verdict ('tc' / 'no_tc' / 'unknown') and winning rule id for each name, in order.

    A name that is missing or blank is ``unknown`` with rule ``no_name``.
    """
    cache: dict[object, tuple[str, str]] = {}
    verdicts: list[str] = []
    rules: list[str] = []
    for name in names:
        key = name if isinstance(name, str) else None
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = _classify_one(name)
        verdicts.append(hit[0])
        rules.append(hit[1])
    return verdicts, rules


def classify_kernel_names(names: Iterable[object]) -> list[str]:
    """'tc', 'no_tc' or 'unknown' for each kernel name (demangled, mangled or short)."""
    return classify_names_with_rules(names)[0]


def _as_categorical(series: pd.Series) -> pd.Categorical:
    if isinstance(series.dtype, pd.CategoricalDtype):
        return cast(pd.Categorical, series.array)
    return pd.Categorical(series)


def _codes_per_row(values: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """Verdict and rule codes (into VERDICTS / TC_RULE_CATEGORIES) for every row."""
    verdicts, rules = classify_names_with_rules(values.categories)
    # One extra slot at the end: category code -1 (a missing name) indexes it.
    verdict_of_cat = np.array(
        [VERDICTS.index(v) for v in verdicts] + [VERDICTS.index("unknown")], dtype=np.int8
    )
    rule_of_cat = np.array(
        [TC_RULE_CATEGORIES.index(r) for r in rules] + [TC_RULE_CATEGORIES.index(NO_NAME_RULE)],
        dtype=np.int16,
    )
    codes = np.asarray(values.codes)
    return verdict_of_cat[codes], rule_of_cat[codes]


def _weak_mask(rule_codes: np.ndarray) -> np.ndarray:
    weak_codes = np.array(
        [i for i, rule_id in enumerate(TC_RULE_CATEGORIES) if rule_id in _WEAK], dtype=np.int16
    )
    return np.isin(rule_codes, weak_codes)


def classify_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``kernels`` with ``tc_class``, ``uses_tensor_cores`` and ``tc_rule`` added.

    Verdicts come from ``name``; where the name gives no evidence (a weak rule, or no name),
    ``short_name`` is used instead when it gives some. The input frame is not modified.
    """
    verdict, rule = _codes_per_row(_as_categorical(kernels["name"]))
    if "short_name" in kernels.columns:
        short_verdict, short_rule = _codes_per_row(_as_categorical(kernels["short_name"]))
        use_short = _weak_mask(rule) & ~_weak_mask(short_rule)
        verdict = np.where(use_short, short_verdict, verdict)
        rule = np.where(use_short, short_rule, rule)
    out = kernels.copy(deep=False)
    tc_class = categorical_from_codes(verdict, list(VERDICTS))
    out["tc_class"] = pd.Series(tc_class, index=kernels.index)
    out["uses_tensor_cores"] = pd.Series(verdict == VERDICTS.index("tc"), index=kernels.index)
    tc_rule = categorical_from_codes(rule, list(TC_RULE_CATEGORIES))
    out["tc_rule"] = pd.Series(tc_rule, index=kernels.index)
    return out
