"""What a report may hold when it is read back: the writer's own schema, checked, and limits.

Place in the pipeline: report (the read side). :mod:`dlprof_lite.render.reader` (report
folders) and the run store (stored runs) read reports someone may have sent; nothing in one is
shown or computed on before it passes these checks, and each refusal is one
:class:`~dlprof_lite.errors.InputError` line naming the file (or stored run) and the field.

The schema is the writer's, derived from its declarations rather than listed again:

- tables and their columns, in order: the metric registry (``metrics.REPORTS``);
- each column's kind: :data:`TEXT_COLUMNS` and :data:`BOOL_COLUMNS` name the columns that are
  not numbers (``tests/test_hostile_reports.py`` checks them against the dtypes real reports
  are written with); the dtypes a table's JSON may declare: those the writer writes;
- summary fields and their types: the annotations of the ``Summary`` dataclasses;
- domains, from each metric's name and unit: every number finite and integers within 64 bits;
  durations (``ns``), bytes and counts >= 0 (timestamps ``*start_ns``/``*end_ns`` and
  :data:`SIGNED` excepted), shares (``*_share``, ``*utilization``) within 0-1 and percentages
  within 0-100 (:data:`UNCAPPED_PCT` excepted: an estimate).

The limits (:data:`MAX_TABLE_BYTES` ...) come from what dlprof-lite writes and bound the
memory and time of a read whatever the input.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from functools import cache
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from dlprof_lite.errors import InputError
from dlprof_lite.report import summary_types as st
from dlprof_lite.report.metrics import (
    ADDED_LATER,
    GPU_FIELDS,
    REPORTS,
    SUMMARY_REPORT,
    column_names,
)

MiB = 1 << 20
# One table file (JSON or CSV). The largest real table we know (the ranges of a 19,000-path
# profile) is 8 MB of JSON; parsing JSON holds about 4 times its bytes, the frame as much.
MAX_TABLE_BYTES = 128 * MiB
# summary.json/.csv and advice: kilobytes as written (a few lists of a few entries).
MAX_SMALL_BYTES = 16 * MiB
SMALL_TABLES = ("summary", "advice")
# Every file one open_report reads, together.
MAX_FOLDER_BYTES = 256 * MiB
# Rows of a table (the summary has exactly one).
MAX_ROWS = 1_000_000
# One text cell: names come from an export read with SQLite's 32 MiB limit per value.
MAX_TEXT_CHARS = 32 * MiB
# Entries of one summary list (GPUs, warnings, advice, DataLoaders, FP32 GEMM kernels) and
# settings of one DataLoader.
MAX_LIST_ITEMS = 100_000
# JSON values one table may hold, counted before parsing (commas and brackets, an upper
# bound): a parsed value costs up to ~70 bytes (an empty object), whatever its text's length,
# so this bounds the parse at ~600 MB. A real table: rows x columns (19,000 ranges: 0.4 M).
MAX_JSON_VALUES = 8_000_000

TEXT_COLUMNS = frozenset({
    "name", "short_name", "tc_class", "tc_rule", "comm", "api_name",  # kernels
    "path", "domain", "style",  # ranges
    "layer", "parent", "type", "device", "top_kernels", "in_shape", "in_dtype", "dtype",
    "tc_inferred", "wrapper", "grad_buckets", "flops_dtype", "flops_rate_basis",
    "flops_note", "memory_tied",  # layers
    "problem", "severity", "evidence", "recommendation", "metric", "citation",  # advice
    "kind", "full_name", "phase", "track",  # timeline
    "cause",  # idle (kind, layer, phase: above)
    "part",  # critical, critical_path (track, name: above)
    "group", "op", "pass",  # collectives, collective_ops, collective_layers (dtype: above)
    "node", "node_ranks",  # clock_offsets (several inputs)
})  # fmt: skip
BOOL_COLUMNS = frozenset({"uses_tensor_cores", "warmup", "in_window", "tc_eligible", "straggler",
                          "complete", "async", "fsdp"})
# Numbers that may be below 0: an id meaning "none" (-1), advice values and thresholds, and
# the straggler's excess over the other ranks (negative when it is not slower there).
SIGNED = frozenset({"parent_path_id", "value", "threshold", "straggler_excess_ns",
                    "straggler_data_ns"})  # fmt: skip
UNCAPPED_PCT = frozenset({"annotation_cost_pct"})  # an estimate: calls x cost / step time
_SLACK = 1e-9  # float rounding above a share's or percentage's upper bound

# The dtypes the writer writes for each kind of column ("object": an empty table's columns;
# "float64" in a text column: one whose every cell is empty).
DTYPES = {
    "text": frozenset({"object", "str", "string", "category", "float64"}),
    "number": frozenset({"int64", "float64", "Int64", "object"}),
    "bool": frozenset({"bool", "boolean", "object"}),
}
_NUMBER_TYPES = (int, float)


def refuse(where: str, what: str) -> InputError:
    """The one error line of a refused input."""
    return InputError(f"{where}: {what}")


# --- the schema ----------------------------------------------------------------------------


def kind(column: str) -> str:
    """``text``, ``bool`` or ``number``."""
    return "text" if column in TEXT_COLUMNS else "bool" if column in BOOL_COLUMNS else "number"


def bounds(name: str, unit: str) -> tuple[float, float]:
    """The interval a number named ``name`` (in ``unit``) lies in."""
    if name in SIGNED or name.endswith(("start_ns", "end_ns")):
        return -math.inf, math.inf
    if name.endswith(("_share", "utilization")):
        return 0.0, 1.0 + _SLACK
    if unit == "%" and name not in UNCAPPED_PCT:
        return 0.0, 100.0 * (1 + _SLACK)
    return 0.0, math.inf


@cache
def _units(table: str) -> dict[str, str]:
    return {c.name: c.unit for c in REPORTS[table]}


def _describe(low: float, high: float) -> str:
    if high == math.inf:
        return "below 0 (it is a duration, size or count)"
    return f"outside {low:g}-{high:g}"


def check_numbers(values: np.ndarray, name: str, unit: str, where: str) -> None:
    """Refuse non-finite numbers and numbers outside column ``name``'s domain (NaN: empty)."""
    if not len(values):
        return
    array = values.astype(np.float64, copy=False)
    low, high = bounds(name, unit)
    with np.errstate(invalid="ignore"):
        bad = np.isinf(array) | (array < low) | (array > high)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        why = "not a finite number" if math.isinf(array[at]) else _describe(low, high)
        raise refuse(where, f"column {name!r}, row {at}: {values[at]!r} is {why}")


# --- tables --------------------------------------------------------------------------------


def check_columns(table: str, names: Sequence[str], where: str) -> list[str]:
    """``names`` must be the table's columns, each once (those added since the schema's
    first release may be absent: :data:`ADDED_LATER`); returns them in registry order."""
    expected = column_names(table)
    if len(names) == len(expected) and set(names) == set(expected):
        return expected
    later = ADDED_LATER.get(table, frozenset())
    present = [n for n in expected if n in set(names)]
    if len(names) == len(present) and set(expected) - set(names) <= later:
        return present  # an older writer's table: complete() adds the newer columns
    extra = [n for n in names if n not in set(expected)]
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise refuse(where, f"column {str(extra[0])[:100]!r}{more} is not one of the "
                            f"{len(expected)} columns dlprof-lite writes in {table}")  # fmt: skip
    missing = [n for n in expected if n not in set(names) and n not in later]
    if missing:
        raise refuse(where, f"no column {missing[0]!r} (a {table} table has "
                            f"{len(expected)} columns)")  # fmt: skip
    raise refuse(where, "a column named twice")


def typed_frame(
    table: str,
    dtypes: object,
    categories: object,
    rows: object,
    where: str,
) -> pd.DataFrame:
    """The table from its JSON form (``dtypes``: column -> dtype name, ``categories``: column
    -> list, ``rows``: one object per row, as the JSON writer and the run store write them),
    every cell checked against its column."""
    if not isinstance(dtypes, dict) or not all(isinstance(v, str) for v in dtypes.values()):
        raise refuse(where, "'dtypes' is not a map of column names to dtype names")
    names = check_columns(table, list(dtypes), where)
    if not isinstance(categories, dict):
        raise refuse(where, "'categories' is not a map of column names to lists")
    cells = _cells(rows, names, table, where)
    data = {}
    for name, values in zip(names, cells, strict=True):
        dtype = dtypes[name]
        if dtype not in DTYPES[kind(name)]:
            raise refuse(where, f"column {name!r}: dtype {dtype[:40]!r} is not one dlprof-lite "
                                f"writes for it")  # fmt: skip
        if dtype != "category" and name in categories:
            raise refuse(where, f"categories for {name!r}, which is not categorical")
        data[name] = _column(name, _units(table).get(name, ""), dtype, values,
                             categories.get(name), where)  # fmt: skip
    if set(categories) - set(names):
        raise refuse(where, "categories of a column the table does not have")
    return complete(table, pd.DataFrame(data, columns=names))


def complete(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every registry column: one an older writer did not write is empty."""
    expected = column_names(table)
    if list(frame.columns) == expected:
        return frame
    return frame.reindex(columns=expected).astype(
        {n: object for n in expected if n not in frame.columns})


def _cells(rows: object, names: list[str], table: str, where: str) -> list[tuple[Any, ...]]:
    """The rows' cells, column by column (C loops: a million rows in well under a second)."""
    limit = 1 if table == "summary" else MAX_ROWS
    if not isinstance(rows, list):
        raise refuse(where, "'rows' is not a list")
    if len(rows) > limit:
        raise refuse(where, f"{len(rows)} rows, more than dlprof-lite writes ({limit})")
    if not rows:
        return [() for _ in names]
    if set(map(type, rows)) != {dict}:
        raise refuse(where, "a row that is not an object")
    if set(map(len, rows)) != {len(names)}:
        at = next(i for i, r in enumerate(rows) if len(r) != len(names))
        raise refuse(where, f"row {at} has {len(rows[at])} cells, not {len(names)}")
    try:
        tuples = list(map(itemgetter(*names), rows))
    except KeyError as err:
        raise refuse(where, f"a row without column {err.args[0]!r}") from None
    return list(zip(*tuples, strict=True))


def _column(
    name: str, unit: str, dtype: str, values: tuple[Any, ...], cats: object, where: str
) -> pd.Series:
    """One column from its cells, checked against its kind, its dtype and its domain."""
    at = f"{where}: column {name!r}"
    found = set(map(type, values))
    if kind(name) == "text":
        return _text(dtype, values, found, cats, at)
    if kind(name) == "bool":
        allowed: set[type] = {bool} if dtype == "bool" else {bool, type(None)}
        if not found <= allowed:
            raise refuse(at, f"{short(_first(values, allowed))!r} is not true or false")
        return pd.Series(list(values), dtype=dtype)
    allowed = {int} if dtype in ("int64", "Int64") else {int, float}
    if dtype != "int64":
        allowed.add(type(None))
    if not found <= allowed:
        bad = _first(values, allowed)
        what = "an empty cell" if bad is None else repr(short(bad))
        raise refuse(at, f"{what} where dlprof-lite writes {_number_word(dtype)}")
    exact = dtype == "int64" or (dtype == "Int64" and type(None) not in found)
    try:
        array = np.array(values, dtype=np.int64 if exact else np.float64)
        if int in found and not exact:
            _fits_int64(values)
    except (OverflowError, TypeError, ValueError):
        raise refuse(at, "a number beyond 64 bits") from None
    check_numbers(array, name, unit, where)
    if dtype == "int64":
        return pd.Series(array, dtype="int64")
    if dtype == "float64":
        return pd.Series(array, dtype="float64")
    return pd.Series(list(values), dtype=dtype)


def _number_word(dtype: str) -> str:
    return {"int64": "an integer", "Int64": "an integer or nothing"}.get(dtype, "a number")


def _fits_int64(values: tuple[Any, ...]) -> None:
    ints = [v for v in values if type(v) is int]
    if ints and not (min(ints) >= -(2**63) and max(ints) < 2**63):
        raise OverflowError("beyond 64 bits")


def _text(
    dtype: str, values: tuple[Any, ...], found: set[type], cats: object, where: str
) -> pd.Series:
    if dtype == "float64":  # a text column with every cell empty
        if found - {type(None)}:
            raise refuse(where, f"{short(_first(values, {type(None)}))!r} where dlprof-lite "
                                "writes nothing (dtype float64)")  # fmt: skip
        return pd.Series([math.nan] * len(values), dtype="float64")
    if not found <= {str, type(None)}:
        raise refuse(where, f"{short(_first(values, {str, type(None)}))!r} is not text")
    check_text(values, where)
    if dtype != "category":
        return pd.Series(list(values), dtype=dtype)
    if not isinstance(cats, list) or not set(map(type, cats)) <= {str}:
        raise refuse(where, "categorical, without a list of text categories")
    check_text(cats, where)
    known = set(cats)
    if len(known) != len(cats):
        raise refuse(where, "a category listed twice")
    if not set(values) - {None} <= known:
        stray = next(v for v in values if v is not None and v not in known)
        raise refuse(where, f"{short(stray)!r} is not among its categories")
    return pd.Series(pd.Categorical(list(values), categories=cats))


def check_text(values: Sequence[Any], where: str) -> None:
    """Refuse a text longer than :data:`MAX_TEXT_CHARS`."""
    longest = max(map(len, filter(None, values)), default=0)
    if longest > MAX_TEXT_CHARS:
        raise refuse(where, f"a text of {longest} characters, more than dlprof-lite writes "
                            f"({MAX_TEXT_CHARS})")  # fmt: skip


def _first(values: Sequence[Any], allowed: set[type]) -> Any:
    return next(v for v in values if type(v) not in allowed)


def short(value: object) -> object:
    """A value as an error may quote it: text and containers cut to a few dozen characters."""
    if isinstance(value, str) and len(value) > 60:
        return value[:60] + "..."
    if isinstance(value, list | dict):
        return f"<{type(value).__name__} of {len(value)}>"
    return value


# --- the summary ---------------------------------------------------------------------------

# A field's check: (type, may be empty, lower bound, upper bound).
Field = tuple[type, bool, float, float]


def _hint_fields(cls: type, units: Mapping[str, str]) -> dict[str, Field]:
    hints = typing.get_type_hints(cls)
    out: dict[str, Field] = {}
    for f in fields(cls):
        args = typing.get_args(hints[f.name])
        optional = isinstance(hints[f.name], types.UnionType) and type(None) in args
        base = next(a for a in (args or (hints[f.name],)) if a is not type(None))
        low, high = bounds(f.name, units.get(f.name, ""))
        out[f.name] = (base, optional, low, high)
    return out


@cache
def summary_fields() -> dict[str, Field]:
    """Every flat summary field (the groups' fields, ``warnings``, ``advice_count``)."""
    units = {c.name: c.unit for c in SUMMARY_REPORT}
    out: dict[str, Field] = {}
    for group in st.GROUPS.values():
        out.update(_hint_fields(group, units))
    out["warnings"] = (str, True, 0.0, math.inf)
    out["advice_count"] = (int, True, 0.0, math.inf)
    return {name: out[name] for name in column_names("summary")}


@cache
def _list_fields() -> dict[str, dict[str, Field]]:
    return {
        "gpus": _hint_fields(st.Gpu, {c.name: c.unit for c in GPU_FIELDS}),
        "advice": _hint_fields(st.Advice, {}),
        "fp32_gemm_kernels": _hint_fields(st.KernelTime, {"gpu_ns": "ns"}),
    }


def check_value(value: object, spec: Field, where: str) -> None:
    """One summary value against its field's type and domain."""
    base, optional, low, high = spec
    if value is None:
        if not optional:
            raise refuse(where, "empty, where dlprof-lite always writes a value")
        return
    if not (type(value) in _NUMBER_TYPES if base is float else type(value) is base):
        word = {str: "text", int: "an integer", float: "a number"}.get(base, base.__name__)
        raise refuse(where, f"{short(value)!r} is not {word}")
    if base is str:
        check_text([value], where)
        return
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise refuse(where, f"{short(value)!r} is beyond 64 bits") from None
    if base is int and not -(2**63) <= value < 2**63:  # type: ignore[operator]
        raise refuse(where, f"{short(value)!r} is beyond 64 bits")
    if not math.isfinite(number):
        raise refuse(where, f"{value!r} is not a finite number")
    if not low <= number <= high:
        raise refuse(where, f"{value!r} is {_describe(low, high)}")


def summary(doc: object, where: str) -> st.Summary:
    """The :class:`Summary` of a summary document (``Summary.document()``'s form: the flat
    fields and the lists), every field checked; refused on any unknown or missing key."""
    if not isinstance(doc, dict):
        raise refuse(where, "the summary is not an object")
    flat = summary_fields()
    expected = set(flat) | set(st.LISTS)
    older = expected - set(doc)
    if older and older <= ADDED_LATER["summary"] and set(doc) <= expected:
        doc = {**doc, **dict.fromkeys(older)}  # written before those fields existed
    if set(doc) != expected:
        extra = sorted(set(doc) - expected, key=str)
        what = (f"{str(extra[0])[:100]!r} is not a summary field" if extra
                else f"no summary field {sorted(expected - set(doc))[0]!r}")  # fmt: skip
        raise refuse(where, what)
    for name, spec in flat.items():
        if name not in st.LISTS:  # "warnings": the list stands for the joined text
            check_value(doc[name], spec, f"{where}: {name!r}")
    lists = {name: _list(doc[name], name, where) for name in st.LISTS}
    advice = lists["advice"]
    if doc["advice_count"] is not None and doc["advice_count"] != len(advice):
        raise refuse(where, f"'advice_count' is {doc['advice_count']} but {len(advice)} advice "
                            "rows are listed")  # fmt: skip
    return st.Summary.from_document(doc)


def _list(value: object, name: str, where: str) -> list[Any]:
    at = f"{where}: {name!r}"
    if not isinstance(value, list):
        raise refuse(at, "not a list")
    if len(value) > MAX_LIST_ITEMS:
        raise refuse(at, f"{len(value)} entries, more than dlprof-lite writes "
                         f"({MAX_LIST_ITEMS})")  # fmt: skip
    if name == "warnings":
        if not set(map(type, value)) <= {str}:
            raise refuse(at, "an entry that is not text")
        check_text(value, at)
        return value
    if not set(map(type, value)) <= {dict}:
        raise refuse(at, "an entry that is not an object")
    check: Callable[[dict[str, Any], str], None]
    if name not in _list_fields():  # DataLoader settings, or a list without a dataclass
        check = _dataloader
    else:
        specs = _list_fields()[name]

        def check(entry: dict[str, Any], place: str) -> None:
            if set(entry) != set(specs):
                raise refuse(place, f"its fields are not {', '.join(specs)}")
            for key, spec in specs.items():
                check_value(entry[key], spec, f"{place}: {key!r}")

    for i, entry in enumerate(value):
        check(entry, f"{at}[{i}]")
    return value


def _dataloader(entry: dict[str, Any], place: str) -> None:
    """An entry of plain settings: text keys, scalar values (no nesting)."""
    if len(entry) > MAX_LIST_ITEMS:
        raise refuse(place, "more settings than dlprof-lite records")
    for key, setting in entry.items():
        if type(setting) not in (str, int, float, bool, type(None)):
            raise refuse(place, f"setting {str(key)[:60]!r} is not a plain value")
        if type(setting) is float and not math.isfinite(setting):
            raise refuse(place, f"setting {str(key)[:60]!r} is not a finite number")
        if type(setting) is int and not -(2**63) <= setting < 2**63:
            raise refuse(place, f"setting {str(key)[:60]!r} is beyond 64 bits")
    check_text([*entry, *(v for v in entry.values() if isinstance(v, str))], place)


# --- JSON ----------------------------------------------------------------------------------


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def json_values(text: str) -> int:
    """An upper bound of the values in the JSON ``text`` (commas and openings, C speed)."""
    return text.count(",") + text.count("{") + text.count("[") + 1


def load_json(text: str, where: str, budget: int = MAX_JSON_VALUES) -> Any:
    """``json.loads`` of untrusted text: more than ``budget`` values (:func:`json_values`),
    NaN and Infinity, nesting past Python's recursion limit and integers of more than 4300
    digits refused, each as one line (what dlprof-lite writes nests 4 deep)."""
    if json_values(text) > budget:
        raise refuse(where, f"more than {budget} JSON values, more than dlprof-lite writes")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise refuse(where, "JSON nested deeper than dlprof-lite writes") from None
    except ValueError as err:  # JSONDecodeError, NaN/Infinity, an integer too long
        raise refuse(where, f"not valid JSON of a report ({str(err)[:200]})") from None
