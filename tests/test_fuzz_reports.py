"""Fuzzing every reader of report folders and run stores with seeded mutants (issue 40).

Like ``test_fuzz.py`` over exports: real report folders (written by dlprof-lite from the
hand-built example profile and from a generated training export, in JSON and CSV-only form)
and a real run store (three recorded runs) are changed by a seeded mutator the ways damaged
or hostile ones differ from good ones: a cell, a dtype, a category, a summary field, a row
or the file head set to a wrong or out-of-domain value; rows dropped, duplicated, widened or
narrowed; files truncated, overwritten, emptied, deleted, or replaced by a symlink, a FIFO or
a folder; huge and deep inputs; SQL of the store's own (triggers that would write a canary,
views, indexes, computed columns), broken revisions and bytes. Each mutant goes through every
reader (``open_report``, compare's side resolution, ``report``, ``compare``; ``RunStore``
``find``/``get``/``runs_with_tag``, ``runs list/show/export``, ``compare``, ``runs rm`` on a
copy), in-process, and must satisfy the property:

- a :class:`DlprofError` / exit 2 with exactly one ``dlprof-lite: error:`` line (no
  "unexpected", no traceback); or a correct result: every table cell and summary field equal
  to an independent parse of the file (``json``/``csv``/``sqlite3``), durations >= 0, shares
  within 0-1 and percentages within 0-100 (``test_fuzz.insane``);
- no hang (a time limit per case), a bounded peak memory per case (``VmHWM``, reset before
  each case), no change to any input (hashes before and after; no journal or ``-wal`` file
  appears), and no SQL of the input executed (a trigger's canary is never written).

Seeds are fixed: a failure names the mutant (``FOLDER=<base>:<seed>``, ``STORE=<seed>``).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dlprof_lite
from dlprof_lite.cli import main
from dlprof_lite.errors import DlprofError
from dlprof_lite.render.writers import unquote_cell
from dlprof_lite.report.build import build_report
from dlprof_lite.store.database import RunStore
from example_profiles import training_profile
from make_profile import make_profile
from test_fuzz import insane, time_limit
from test_store import synthetic_record

FOLDER_CHUNKS, FOLDER_SEEDS = 6, 80  # 480 folder mutants
STORE_CHUNKS, STORE_SEEDS = 4, 50  # 200 store mutants: 680 cases per run
CASE_LIMIT_S = 30
PEAK_GROWTH_MIB = 600  # what one case may add to the process's peak memory
TABLES = ("kernels", "ranges", "layers", "iterations", "advice", "timeline", "ranks")
HOSTILE: tuple[object, ...] = (
    None, -1, -1.5, -(10**18), 2**63, 2**64, 10**30, 1e300, "text", "", True, False, [], {},
    [1, [2]], {"a": {"b": 1}}, 3.5, 0, "=cmd|' /C calc'!A0", "\x1b]0;t\x07", "x" * 100_000,
)  # fmt: skip
BASES = ("example", "example-csv", "generated")
ACCEPTED: list[str] = []  # mutants read without an error (the oracle compared them)


# --- the bases -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    export = root / "generated.sqlite"
    make_profile(export, iterations=8, layers=3, kernels_per_layer=2, seed=7)
    reports = {"example": build_report(training_profile()),
               "generated": dlprof_lite.analyze(export)}  # fmt: skip
    out = {}
    for name, report in reports.items():
        out[name] = report.save(root / name, formats=("csv", "json"))
    csv_only = root / "example-csv"
    shutil.copytree(out["example"], csv_only)
    for path in csv_only.glob("*.json"):
        if path.name != "trace.json":
            path.unlink()
    out["example-csv"] = csv_only
    for folder in out.values():
        for name in ("report.html", "trace.json", "layers.dot"):
            (folder / name).unlink(missing_ok=True)
    return out


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory, bases: dict[str, Path]) -> Path:
    path = tmp_path_factory.mktemp("store") / "runs.db"
    from dlprof_lite.store.record import RunContext, RunRecord

    context = RunContext(tag="c", command=("python", "train.py"))
    generated = RunRecord.from_report(dlprof_lite.open_report(bases["generated"]), context)
    with RunStore(f"sqlite:///{path}") as store:
        store.record(synthetic_record(tag="a"))
        store.record(synthetic_record(tag="b", git_dirty=None))
        store.record(generated)
    return path


# --- helpers ---------------------------------------------------------------------------------


def digest(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.iterdir()):
        if path.is_symlink():
            out[path.name] = "link:" + os.readlink(path)
        elif path.is_file():
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[path.name] = "dir" if path.is_dir() else "special"
    return out


def cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def one_error(code: int, err: str, where: str) -> list[str]:
    """Problems of a command's outcome: exit 0, or exit 2 and exactly one error line."""
    lines = [line for line in err.splitlines() if line.startswith("dlprof-lite: error:")]
    if "Traceback" in err:
        return [f"{where}: a traceback"]
    if code == 0:
        return []
    if code == 2 and len(lines) == 1 and len(err.splitlines()) == 1 and "unexpected" not in err:
        return []
    return [f"{where}: exit {code}, {err.strip()[-300:]!r}"]


def copy_as_is(folder: Path, target: Path) -> None:
    """A copy of ``folder``: links as links, FIFOs as new FIFOs (never opened)."""
    target.mkdir()
    for path in folder.iterdir():
        if path.is_symlink():
            (target / path.name).symlink_to(os.readlink(path))
        elif path.is_dir():
            (target / path.name).mkdir()
        elif path.is_file():
            shutil.copyfile(path, target / path.name)
        else:
            os.mkfifo(target / path.name)


def vm_peak_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@contextlib.contextmanager
def bounded(label: str, problems: list[str]) -> Iterator[None]:
    """A case's time limit and peak memory (the kernel's high-water mark, reset first)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    before = vm_peak_mib()
    try:
        with time_limit(CASE_LIMIT_S):
            yield
    except TimeoutError as hang:
        problems.append(f"{label}: hang: {hang}")
    after = vm_peak_mib()
    if before is not None and after is not None and after - before > PEAK_GROWTH_MIB:
        problems.append(f"{label}: peak memory grew {after - before:.0f} MiB")


# --- the folder mutator ----------------------------------------------------------------------


def _text(path: Path) -> str:
    if not path.is_file() or path.is_symlink():  # never open a FIFO an earlier change made
        raise ValueError(f"{path.name} is no longer a regular file")
    return path.read_text(encoding="utf-8")


def _load(path: Path) -> Any:
    return json.loads(_text(path))


def _dump(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, allow_nan=True), encoding="utf-8")


def _regular(folder: Path, pattern: str) -> list[Path]:
    """The regular files of ``folder`` (an earlier change may have left a FIFO or a link)."""
    return sorted(p for p in folder.glob(pattern) if p.is_file() and not p.is_symlink())


def _json_tables(folder: Path) -> list[Path]:
    return [p for p in _regular(folder, "*.json") if p.name != "summary.json"]


def _has_rows(path: Path) -> bool:
    """A table document with rows: not one an earlier change already broke (a bomb of
    nested arrays, a list where the document was)."""
    try:
        doc = _load(path)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("rows"), list) and bool(doc["rows"])


def _pick_cell(rng: random.Random, folder: Path) -> tuple[Path, dict, int, str] | None:
    tables = [p for p in _json_tables(folder) if _has_rows(p)]
    if not tables:
        return None
    path = rng.choice(tables)
    doc = _load(path)
    row = rng.randrange(len(doc["rows"]))
    return path, doc, row, rng.choice(sorted(doc["dtypes"]))


def mutate_json(folder: Path, rng: random.Random) -> str:
    kind = rng.choice(["cell", "cell", "cell", "summary", "summary", "dtype", "categories",
                       "rows", "head", "big"])  # fmt: skip
    if kind == "cell" and (picked := _pick_cell(rng, folder)):
        path, doc, row, column = picked
        value = rng.choice(HOSTILE)
        doc["rows"][row][column] = value
        _dump(path, doc)
        return f"{path.name} row {row} {column} = {str(value)[:30]!r}"
    if kind == "summary":
        path = folder / "summary.json"
        doc = _load(path)
        key = rng.choice(sorted(k for k in doc if k not in ("schema", "table", "definitions")))
        what = rng.random()
        if what < 0.15:
            del doc[key]
        elif what < 0.3 and isinstance(doc[key], list) and doc[key]:
            entry = doc[key][0]
            if isinstance(entry, dict):
                entry[rng.choice(sorted(entry))] = rng.choice(HOSTILE)
            else:
                doc[key][0] = rng.choice(HOSTILE)
        else:
            doc[key] = rng.choice(HOSTILE)
        _dump(path, doc)
        return f"summary {key} changed ({what:.2f})"
    if kind == "dtype" and (picked := _pick_cell(rng, folder)):
        path, doc, _, column = picked
        dtype = rng.choice(["int8", "float32", "object", "category", "bool", "str", "Int64",
                            "float64", "int64", "datetime64[ns]", "nonsense", None])  # fmt: skip
        if dtype is None:
            del doc["dtypes"][column]
        else:
            doc["dtypes"][column] = dtype
        _dump(path, doc)
        return f"{path.name} dtype {column} = {dtype}"
    if kind == "categories" and (picked := _pick_cell(rng, folder)):
        path, doc, _, _ = picked
        cats = doc["categories"]
        if cats:
            column = rng.choice(sorted(cats))
            cats[column] = rng.choice([cats[column][1:], cats[column] * 2, "x", None, [1, 2]])
        else:
            cats[rng.choice(sorted(doc["dtypes"]))] = ["a"]
        _dump(path, doc)
        return f"{path.name} categories changed"
    if kind == "rows" and (picked := _pick_cell(rng, folder)):
        path, doc, row, column = picked
        rows = doc["rows"]
        what = rng.choice(["drop", "dup", "widen", "narrow", "list", "empty"])
        if what == "drop":
            rows.pop(row)
        elif what == "dup":
            rows.append(dict(rows[row]))
        elif what == "widen":
            rows[row]["extra"] = 1
        elif what == "narrow":
            rows[row].pop(column)
        elif what == "list":
            rows[row] = list(rows[row].values())
        else:
            doc["rows"] = []
        _dump(path, doc)
        return f"{path.name} rows {what}"
    if kind == "head":
        path = rng.choice([folder / "summary.json", *_json_tables(folder)])
        doc = _load(path)
        key = rng.choice(["schema", "table", "rows", "dtypes", "extra", "definitions"])
        if key in doc and rng.random() < 0.5:
            del doc[key]
        else:
            doc[key] = rng.choice(["dlprof-lite/2", "layers", 7, None, []])
        _dump(path, doc)
        return f"{path.name} head {key} changed"
    return mutate_big(folder, rng)


def mutate_big(folder: Path, rng: random.Random) -> str:
    """Inputs past the limits (kept few: each costs a fraction of a second)."""
    path = rng.choice([folder / "summary.json", *_json_tables(folder)])
    text = _text(path)
    what = rng.choice(["deep", "empty-rows", "dtypes", "string"])
    if what == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif what == "empty-rows" and '"rows": [' in text:
        path.write_text(text.replace('"rows": [', '"rows": [' + "{}," * 3_000_000, 1))
    elif what == "dtypes" and '"dtypes": {' in text:
        extra = "".join(f'"c{i}": "float64", ' for i in range(200_000))
        path.write_text(text.replace('"dtypes": {', '"dtypes": {' + extra, 1))
    else:
        at = text.index('"', text.index('"table"') + 8)
        path.write_text(text[:at + 1] + "x" * 34_000_000 + text[at + 1:])
    return f"{path.name} big {what}"


def mutate_csv(folder: Path, rng: random.Random) -> str:
    path = rng.choice(_regular(folder, "*.csv"))
    text = _text(path)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    kind = rng.choice(["cell", "cell", "cell", "widen", "narrow", "column", "blank", "drop"])
    if kind == "cell" and len(rows) > 1:
        row = rng.randrange(1, len(rows))
        col = rng.randrange(len(rows[0]))
        value = rng.choice(["", "-1", "-2.5", "inf", "nan", "NaN", "1e400", "text", "True",
                            str(2**63), str(2**64), "9" * 30, "0", "=1+1", "'", "\x1b[2J"])
        rows[row][col] = value
        kind = f"cell {rows[0][col]} = {value!r}"
    elif kind == "widen" and len(rows) > 1:
        rows[rng.randrange(1, len(rows))].append("7")
    elif kind == "narrow" and len(rows) > 1:
        rows[rng.randrange(1, len(rows))].pop()
    elif kind == "column":
        at = rng.randrange(len(rows[0]))
        rows = [r[:at] + r[at + 1:] for r in rows] if rng.random() < 0.5 else \
            [[*r, "x"] for r in rows]  # fmt: skip
    elif kind == "drop" and len(rows) > 1:
        rows.pop(rng.randrange(1, len(rows)))
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    out = buffer.getvalue()
    if kind == "blank":
        out = out.replace("\n", "\n\n", 1)
    path.write_text(out, encoding="utf-8")
    return f"{path.name} {kind}"


def mutate_file(folder: Path, rng: random.Random, outside: Path) -> str:
    path = rng.choice(_regular(folder, "*"))
    data = path.read_bytes()
    kind = rng.choice(["truncate", "truncate", "bytes", "empty", "delete", "symlink",
                       "dangling", "fifo", "folder", "bom", "latin1", "extra"])  # fmt: skip
    if kind == "truncate":
        cut = rng.randrange(max(len(data), 1))
        path.write_bytes(data[:cut])
        return f"{path.name} truncated to {cut}"
    if kind == "bytes":
        spoiled = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            spoiled[rng.randrange(len(spoiled))] = rng.getrandbits(8)
        path.write_bytes(bytes(spoiled))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + data)
    elif kind == "latin1":
        path.write_bytes(data.replace(b"e", b"\xe9", 3))
    elif kind == "extra":
        (folder / "notes.txt").write_text("an extra file is not read")
    else:
        path.unlink()
        copy = outside / f"{folder.name}-{path.name}"
        copy.write_bytes(data)
        if kind == "symlink":
            path.symlink_to(copy)
        elif kind == "dangling":
            path.symlink_to(outside / "nowhere")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
    return f"{path.name} {kind}"


def mutate_folder(base: Path, target: Path, seed: int, outside: Path) -> str:
    rng = random.Random(f"{base.name}:{seed}")
    shutil.copytree(base, target)
    done = []
    for _ in range(rng.choice((1, 1, 2))):
        roll = rng.random()
        try:
            if roll < 0.25:
                done.append(mutate_file(target, rng, outside))
            elif _json_tables(target) and not base.name.endswith("-csv"):
                done.append(mutate_json(target, rng))
            else:
                done.append(mutate_csv(target, rng))
        except (OSError, ValueError, LookupError, TypeError, AttributeError, csv.Error) as err:
            done.append(f"(a file the first change broke: {type(err).__name__})")
    return "; ".join(done)


# --- the folder oracle -------------------------------------------------------------------------


def _same(value: object, expected: object) -> bool:
    """A frame cell against the file's own JSON value (None for NaN/NA)."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return expected is None
    if hasattr(value, "item"):
        value = value.item()
    return bool(value == expected) and (type(value) is bool) == (type(expected) is bool)


def _same_csv(value: object, cell: str) -> bool:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return cell == ""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return cell == str(value)
    if isinstance(value, int | float):
        return float(cell) == float(value) and (not isinstance(value, int) or int(cell) == value)
    return unquote_cell(cell) == value


def wrong_values(folder: Path, report: dlprof_lite.Report) -> list[str]:
    """Cells of the report that differ from an independent parse of the folder's files."""
    problems = []
    for table in TABLES:
        frame = report.table(table)
        if (folder / f"{table}.json").is_file():
            rows = json.loads((folder / f"{table}.json").read_text(encoding="utf-8"))["rows"]
            check: Callable[[object, object], bool] = _same
        elif (folder / f"{table}.csv").is_file():
            text = (folder / f"{table}.csv").read_text(encoding="utf-8")
            rows = list(csv.DictReader(io.StringIO(text, newline="")))
            check = _same_csv  # type: ignore[assignment]
        else:
            continue  # an optional table left out: read as empty
        if len(rows) != len(frame):
            problems.append(f"{table}: {len(frame)} rows shown, {len(rows)} in the file")
            continue
        for column in frame.columns:
            shown = frame[column].astype(object).tolist()
            if rows and column not in rows[0]:  # a column added later, left out: read as empty
                if not all(pd.isna(v) for v in shown):
                    problems.append(f"{table}.{column}: not in the file, yet shown")
                continue
            for i, (value, row) in enumerate(zip(shown, rows, strict=True)):
                if not check(value, row[column]):
                    problems.append(f"{table}.{column} row {i}: {value!r} vs {row[column]!r}")
                    break
    if (folder / "summary.json").is_file():
        doc = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        for key, value in report.summary.document().items():
            if key != "warnings" and doc.get(key) != value:
                problems.append(f"summary.{key}: {value!r} vs {doc.get(key)!r}")
    problems += insane(pd.DataFrame([report.summary.row()]), "summary")
    for table in ("kernels", "ranges", "layers", "iterations"):
        problems += insane(report.table(table), table)
    return problems


def check_folder(bases: dict[str, Path], base: str, seed: int, tmp: Path) -> list[str]:
    outside = tmp / f"outside{seed}"
    outside.mkdir()
    mutant = tmp / f"{base}-{seed}"
    what = mutate_folder(bases[base], mutant, seed, outside)
    label = f"FOLDER={base}:{seed} ({what})"
    before, problems = digest(mutant), []
    with bounded(label, problems):
        try:
            report: dlprof_lite.Report | None = dlprof_lite.open_report(mutant)
        except DlprofError as err:
            report = None
            if "\n" in str(err) or not str(err):
                problems.append(f"{label}: open_report's message is not one line")
        except Exception as err:  # the property: nothing else escapes
            return [f"{label}: open_report raised {type(err).__name__}: {err}"]
        if report is not None:
            ACCEPTED.append(label)
            problems += [f"{label}: {p}" for p in wrong_values(mutant, report)]
        from dlprof_lite.compare.resolve import resolve

        try:
            resolve(str(mutant), lambda: pytest.fail("no store is needed"))  # type: ignore[arg-type, return-value]
        except DlprofError:
            pass
        except Exception as err:
            problems.append(f"{label}: compare's reading raised {type(err).__name__}: {err}")
        if seed % 8 == 0:  # the commands themselves, on some
            out = tmp / f"cmp{seed}"
            code, _, err = cli(["compare", str(bases[base]), str(mutant), "-o", str(out),
                                "--quiet", "--formats", "json"])  # fmt: skip
            problems += one_error(code if code != 1 else 0, err, f"{label}: compare")
            copy = tmp / f"copy{seed}"
            copy_as_is(mutant, copy)
            code, _, err = cli(["report", str(copy), "--trace"])
            problems += one_error(code, err, f"{label}: report")
    if digest(mutant) != before:
        problems.append(f"{label}: the folder changed")
    return problems


@pytest.mark.parametrize("chunk", range(FOLDER_CHUNKS))
def test_mutated_report_folders(chunk: int, bases: dict[str, Path], tmp_path: Path) -> None:
    problems: list[str] = []
    for seed in range(chunk * FOLDER_SEEDS, (chunk + 1) * FOLDER_SEEDS):
        problems += check_folder(bases, BASES[seed % len(BASES)], seed, tmp_path)
    assert not problems, "\n".join(problems)


# --- the store mutator -------------------------------------------------------------------------

SQL_VALUES = ("NULL", "-1", "9223372036854775807", "9e999", "-9e999", "'text'", "x'00ff'",
              "3.5", "printf('%.*c', 100000, 'x')", "''", "'2026-13-45'")  # fmt: skip
JSON_VALUES = ("-1", "1e300", "'text'", "json('[]')", "json('{}')", "NULL", "json('true')",
               "-1.5", "json('[[[[1]]]]')", "9223372036854775807")  # fmt: skip
CANARY = "UPDATE runs SET tag = 'PWNED'"
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"


def _keys(db: sqlite3.Connection, column: str, table: str) -> list[str]:
    text = db.execute(f"SELECT {column} FROM {table} LIMIT 1").fetchone()[0]
    doc = json.loads(text)
    return sorted(doc) if isinstance(doc, dict) else []


def mutate_store_sql(db: sqlite3.Connection, rng: random.Random) -> str:
    kind = rng.choice(["cell", "cell", "json", "json", "json", "rows", "schema", "schema",
                       "version"])  # fmt: skip
    run = rng.randint(1, 3)
    if kind == "cell":
        column = rng.choice(["created_at", "tag", "run_group", "repeat_index", "command",
                             "script", "git_dirty", "steps", "step_mean_ns", "step_median_ns",
                             "summary", "tables", "report_dir", "id"])  # fmt: skip
        value = rng.choice(SQL_VALUES)
        db.execute(f"UPDATE runs SET {column} = {value} WHERE id = {run}")
        return f"runs.{column} = {value} (run {run})"
    if kind == "json":
        table, column = rng.choice([("runs", "summary"), ("runs", "tables"),
                                    ("run_iterations", "data"), ("run_layers", "data"),
                                    ("run_kernels", "data"), ("runs", "command")])  # fmt: skip
        keys = _keys(db, column, table) or ["x"]
        key = rng.choice([*keys, "extra"])
        value = rng.choice(JSON_VALUES)
        where = f"id = {run}" if table == "runs" else f"run_id = {run}"
        if rng.random() < 0.2:
            db.execute(f"UPDATE {table} SET {column} = json_remove({column}, '$.{key}') "
                       f"WHERE {where}")  # fmt: skip
            return f"{table}.{column} without {key} (run {run})"
        if rng.random() < 0.1:
            db.execute(f"UPDATE {table} SET {column} = 'not json' || {column} WHERE {where}")
            return f"{table}.{column} not JSON (run {run})"
        db.execute(f"UPDATE {table} SET {column} = json_set({column}, '$.\"{key}\"', {value}) "
                   f"WHERE {where}")  # fmt: skip
        return f"{table}.{column}.{key} = {value} (run {run})"
    if kind == "rows":
        table = rng.choice(["run_iterations", "run_layers", "run_kernels", "run_phases"])
        if rng.random() < 0.5:
            db.execute(f"DELETE FROM {table} WHERE run_id = {run} AND rowid % 2 = 0")
            return f"every other {table} row of run {run} deleted"
        db.execute(f"DELETE FROM runs WHERE id = {run}")
        return f"run {run} deleted"
    if kind == "version":
        what = rng.choice(["NULL", "'9999_future'", "42", "'0001'"])
        db.executescript("DROP TABLE dlprof_lite_version; CREATE TABLE dlprof_lite_version "
                         f"(version_num); INSERT INTO dlprof_lite_version VALUES ({what})")
        return f"version {what}"
    return mutate_store_schema(db, rng)


def mutate_store_schema(db: sqlite3.Connection, rng: random.Random) -> str:
    what = rng.choice(["trigger-delete", "trigger-insert", "trigger-update", "view-runs",
                       "view-version", "table", "index", "expression-index", "generated",
                       "drop", "rename"])  # fmt: skip
    statements = {
        "trigger-delete": [f"CREATE TRIGGER t AFTER DELETE ON runs BEGIN {CANARY}; END"],
        "trigger-insert": [f"CREATE TRIGGER t AFTER INSERT ON runs BEGIN {CANARY}; END"],
        "trigger-update": [f"CREATE TRIGGER t AFTER UPDATE ON run_layers BEGIN {CANARY}; END"],
        "view-runs": ["ALTER TABLE runs RENAME TO runs_real", f"CREATE VIEW runs AS {ENDLESS}"],
        "view-version": ["DROP TABLE dlprof_lite_version",
                         f"CREATE VIEW dlprof_lite_version AS SELECT x AS version_num "
                         f"FROM ({ENDLESS})"],
        "table": ["CREATE TABLE canary (x)"],
        "index": ["CREATE INDEX other_index ON runs (host)"],
        "expression-index": ["CREATE INDEX ix_e ON run_layers (length(data))"],
        "generated": ["ALTER TABLE run_phases ADD COLUMN g GENERATED ALWAYS AS (upper(phase))"],
        "drop": [f"DROP TABLE {rng.choice(['run_layers', 'run_phases', 'runs'])}"],
        "rename": ["ALTER TABLE runs RENAME COLUMN tag TO tag_x"],
    }[what]
    for statement in statements:
        db.execute(statement)
    return what


def mutate_store(base: Path, target: Path, seed: int) -> str:
    rng = random.Random(f"store:{seed}")
    shutil.copyfile(base, target)
    if rng.random() < 0.15:
        data = bytearray(target.read_bytes())
        what = rng.choice(["truncate", "bytes", "empty"])
        if what == "truncate":
            data = data[: rng.randrange(len(data))]
        elif what == "bytes":
            for _ in range(rng.randint(1, 16)):
                data[rng.randrange(100, len(data))] = rng.getrandbits(8)
        else:
            data = bytearray()
        target.write_bytes(bytes(data))
        return f"file {what}"
    done = []
    with contextlib.closing(sqlite3.connect(target)) as db:
        db.execute("PRAGMA foreign_keys = OFF")
        for _ in range(rng.choice((1, 1, 2))):
            try:
                done.append(mutate_store_sql(db, rng))
            except sqlite3.Error as err:
                done.append(f"(refused: {err})")
        db.commit()
    return "; ".join(done)


# --- the store oracle ----------------------------------------------------------------------------


def _raw(path: Path, query: str) -> list[tuple[Any, ...]]:
    uri = f"{path.absolute().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return db.execute(query).fetchall()


def _canary(path: Path) -> bool:
    """Whether a trigger's canary (a run tagged PWNED) is in the store."""
    try:
        return _raw(path, "SELECT count(*) FROM runs WHERE tag = 'PWNED'") != [(0,)]
    except sqlite3.Error:  # no runs.tag to write a canary into
        return False


def store_values_wrong(path: Path, store: RunStore) -> list[str]:
    """What the store gave back against sqlite3's raw reading of the same file."""
    problems = []
    infos = store.find()
    raw = _raw(path, "SELECT id, tag, steps FROM runs ORDER BY created_at DESC, id DESC")
    if [(i.id, i.tag, i.steps) for i in infos] != raw:
        problems.append(f"find gave {[(i.id, i.tag, i.steps) for i in infos]}, raw {raw}")
    for info in infos:
        run = store.get(info.id)
        rows = [json.loads(d) for (d,) in _raw(path, "SELECT data FROM run_iterations WHERE "
                                              f"run_id = {info.id} ORDER BY position")]
        steps = [float(r["wall_ns"]) for r in rows if r["in_window"] and not r["warmup"]]
        if run.step_ns().tolist() != steps:
            problems.append(f"run {info.id}: step times {run.step_ns().tolist()} vs {steps}")
        problems += insane(run.iterations, f"run {info.id} iterations")
        problems += insane(run.layers, f"run {info.id} layers")
    return problems


def check_store(base: Path, seed: int, tmp: Path) -> list[str]:
    folder = tmp / f"store{seed}"
    folder.mkdir()
    path = folder / "runs.db"
    what = mutate_store(base, path, seed)
    label = f"STORE={seed} ({what})"
    url = f"sqlite:///{path}"
    before, problems = digest(folder), []
    with bounded(label, problems):
        try:
            with RunStore(url, create=False, read_only=True) as store:
                problems += [f"{label}: {p}" for p in store_values_wrong(path, store)]
                store.runs_with_tag("a")
                ACCEPTED.append(label)
        except DlprofError as err:
            if "\n" in str(err):
                problems.append(f"{label}: the store's message is not one line")
        except Exception as err:
            problems.append(f"{label}: the store raised {type(err).__name__}: {err}")
        commands = [["runs", "list"], ["runs", "show", "1"], ["runs", "export", "-"]]
        if seed % 5 == 0:
            commands.append(["compare", "1", "2", "-o", str(tmp / f"c{seed}"), "--quiet",
                             "--formats", "json"])  # fmt: skip
        for args in commands:
            code, _, err = cli([*args, "--db", url])
            problems += one_error(code if args[0] != "compare" or code != 1 else 0, err,
                                  f"{label}: {' '.join(args[:2])}")  # fmt: skip
        if digest(folder) != before:
            problems.append(f"{label}: reading changed the store's folder")
        if seed % 4 == 0:  # the one writing command, on a copy
            copy = tmp / f"copy{seed}"
            copy.mkdir()
            shutil.copyfile(path, copy / "runs.db")
            code, _, err = cli(["runs", "rm", "1", "--db", f"sqlite:///{copy / 'runs.db'}"])
            problems += one_error(code, err, f"{label}: runs rm")
            if code == 0 and _canary(copy / "runs.db"):
                problems.append(f"{label}: a trigger of the store ran")
    return problems


@pytest.mark.parametrize("chunk", range(STORE_CHUNKS))
def test_mutated_run_stores(chunk: int, base_store: Path, tmp_path: Path) -> None:
    problems: list[str] = []
    for seed in range(chunk * STORE_SEEDS, (chunk + 1) * STORE_SEEDS):
        problems += check_store(base_store, seed, tmp_path)
    assert not problems, "\n".join(problems)


def test_the_mutators_are_seeded_and_varied(bases: dict[str, Path], base_store: Path,
                                            tmp_path: Path) -> None:  # fmt: skip
    """Same seed, same mutant; the seeds cover each kind of change."""
    kinds: set[str] = set()
    for seed in range(FOLDER_CHUNKS * FOLDER_SEEDS):
        base = bases[BASES[seed % len(BASES)]]
        what = mutate_folder(base, tmp_path / f"m{seed}", seed, tmp_path)
        kinds.update(word for word in ("truncated", "symlink", "fifo", "big", "dtype", "rows",
                                       "summary", "cell", "widen", "categories")
                     if word in what)  # fmt: skip
        if seed < 3:
            again = mutate_folder(base, tmp_path / f"n{seed}", seed, tmp_path)
            assert again == what and digest(tmp_path / f"m{seed}").keys() == \
                digest(tmp_path / f"n{seed}").keys()  # fmt: skip
    assert kinds >= {"truncated", "symlink", "fifo", "big", "dtype", "rows", "summary", "cell",
                     "widen", "categories"}  # fmt: skip
    store_kinds = {mutate_store(base_store, tmp_path / f"s{seed}.db", seed).split(" ")[0]
                   for seed in range(STORE_CHUNKS * STORE_SEEDS)}  # fmt: skip
    assert {"trigger-delete", "view-runs", "file", "version"} <= store_kinds, store_kinds


@pytest.mark.parametrize("case", ["folder", "store"])
def test_the_real_command_line_on_hostile_input(
    case: str, bases: dict[str, Path], base_store: Path, tmp_path: Path
) -> None:
    """A few cases through the installed command (a new process, its own memory): a deep
    JSON table and an endless view."""
    if case == "folder":
        folder = tmp_path / "r"
        shutil.copytree(bases["example"], folder)
        (folder / "layers.json").write_text("[" * 100_000 + "]" * 100_000)
        args = ["report", str(folder)]
    else:
        path = tmp_path / "runs.db"
        shutil.copyfile(base_store, path)
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.executescript(f"ALTER TABLE runs RENAME TO runs_real; CREATE VIEW runs AS {ENDLESS}")
        args = ["runs", "list", "--db", f"sqlite:///{path}"]
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("dlprof-lite: error: ") and "unexpected" not in done.stderr
