"""Report folders and stored runs written before a column or summary field existed (metrics
ADDED_LATER) read back with it empty and compare with today's; any other missing column is
still refused with one line.

The older folder is made from a real analysis of a generated profile by removing exactly
what the schema gained since its first release, from the JSON and the CSV files alike.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

import dlprof_lite
from dlprof_lite.cli import main
from dlprof_lite.errors import InputError
from dlprof_lite.report.metrics import ADDED_LATER
from make_profile import make_profile


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("older")
    export = root / "run.sqlite"
    make_profile(export, iterations=20, layers=4, kernels_per_layer=2, seed=5)
    new = root / "new.dlprof"
    assert main(["analyze", str(export), "-o", str(new), "--quiet", "--no-db"]) == 0
    old = root / "old.dlprof"
    shutil.copytree(new, old)
    for table, names in ADDED_LATER.items():
        _drop(old, table, names)
    return old, new


def _drop(folder: Path, table: str, names: frozenset[str]) -> None:
    """``names`` removed from ``table``'s JSON and CSV, as an older writer wrote them."""
    path = folder / f"{table}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    if table == "summary":
        doc = {k: v for k, v in doc.items() if k not in names}
    else:
        doc["dtypes"] = {k: v for k, v in doc["dtypes"].items() if k not in names}
        doc["categories"] = {k: v for k, v in doc["categories"].items() if k not in names}
        doc["rows"] = [{k: v for k, v in row.items() if k not in names} for row in doc["rows"]]
    path.write_text(json.dumps(doc), encoding="utf-8")
    path = folder / f"{table}.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    kept = [c for c in rows[0] if c not in names] if rows else []
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=kept, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")


def test_an_older_folder_reads_back_with_the_newer_fields_empty(
    folders: tuple[Path, Path],
) -> None:
    old, new = folders
    before, now = dlprof_lite.open_report(old), dlprof_lite.open_report(new)
    assert now.summary["between_steps_ns"] is not None
    assert before.summary["between_steps_ns"] is None
    assert before.summary.totals.kernel_count == now.summary.totals.kernel_count
    assert list(before.layers.columns) == list(now.layers.columns)
    assert before.layers["wrapper"].isna().all()
    assert list(before.iterations["wall_ns"]) == list(now.iterations["wall_ns"])


def test_an_older_folder_compares_with_a_new_one(
    folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    old, new = folders
    code = main(["compare", str(old), str(new), "-o", str(tmp_path / "c"), "--quiet",
                 "--db", f"sqlite:///{tmp_path / 'runs.db'}"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "c" / "compare.json").read_text(encoding="utf-8"))
    step = doc["steps"][0]
    assert step["verdict"] == "not tested (one run a side)"
    assert step["median_ns"]["value"] == 0 and step["mean_ns"]["value"] == 0  # the same steps


def test_a_column_of_the_first_release_missing_is_still_refused(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    old, _ = folders
    broken = tmp_path / "broken.dlprof"
    shutil.copytree(old, broken)
    _drop(broken, "iterations", frozenset({"in_window"}))
    with pytest.raises(InputError, match="in_window"):
        dlprof_lite.open_report(broken)
