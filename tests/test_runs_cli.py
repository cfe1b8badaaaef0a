"""``dlprof-lite runs`` and the recording of every report, through the command line.

Generated exports (scripts/make_profile.py) are analysed into a store of the test; what
``runs`` lists is checked against what was analysed (tags, steps, report folders), and a
store that cannot be written never costs the report.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dlprof_lite import open_report
from dlprof_lite.cli import main
from dlprof_lite.store.database import RunStore
from make_profile import make_profile
from postgres_server import pg_url, postgres  # noqa: F401


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("exports")
    paths = []
    for seed in (1, 2, 3):
        path = root / f"p{seed}.sqlite"
        make_profile(path, iterations=8, layers=3, kernels_per_layer=1, seed=seed)
        paths.append(path)
    return paths


def _analyze(export: Path, out: Path, db: str, *extra: str) -> int:
    return main(["analyze", str(export), "-o", str(out), "--quiet", "--db", db, *extra])


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    capsys.readouterr()
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_every_report_is_recorded_and_listed(exports, tmp_path, capsys) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    assert _analyze(exports[0], tmp_path / "one", db, "--tag", "base") == 0
    assert _analyze(exports[1], tmp_path / "two", db, "--tag", "amp") == 0
    listed = _json(capsys, "runs", "--json", "--db", db)
    assert [r["tag"] for r in listed] == ["amp", "base"]  # newest first
    assert [r["report_dir"] for r in listed] == [str(tmp_path / "two"), str(tmp_path / "one")]
    report = open_report(tmp_path / "one")
    assert listed[1]["steps"] == report.summary["iterations_analysed"]
    assert listed[1]["step_median_ns"] == pytest.approx(report.summary["iterations_median_ns"])
    assert [r["id"] for r in _json(capsys, "runs", "list", "--tag", "base", "--json",
                                   "--db", db)] == [listed[1]["id"]]  # fmt: skip
    shown = _json(capsys, "runs", "show", str(listed[1]["id"]), "--json", "--db", db)
    assert shown["summary"] == report.summary.document()
    assert shown["context"]["tag"] == "base"
    # The table form names the runs too.
    assert main(["runs", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "amp" in table and "base" in table


def test_export_remove_and_no_db(exports, tmp_path, capsys) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    for i, export in enumerate(exports):
        assert _analyze(export, tmp_path / f"r{i}", db) == 0
    assert _analyze(exports[0], tmp_path / "not-recorded", db, "--no-db") == 0
    out = tmp_path / "runs.csv"
    assert main(["runs", "export", str(out), "--db", db]) == 0
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["report_dir"] for r in rows) == [str(tmp_path / f"r{i}") for i in range(3)]
    assert main(["runs", "export", str(out), "--db", db]) != 0  # exists: needs --force
    assert "--force" in capsys.readouterr().err
    ids = [int(r["id"]) for r in rows]
    assert main(["runs", "rm", str(ids[0]), "--db", db]) == 0
    with RunStore(db) as store:
        assert sorted(i.id for i in store.find()) == sorted(ids[1:])
    capsys.readouterr()
    assert main(["runs", "rm", str(ids[0]), "--db", db]) == 2  # gone already: one error line
    err = capsys.readouterr().err
    store = tmp_path / "runs.db"
    assert err == f"dlprof-lite: error: no run {ids[0]} in {store}; nothing removed\n"


def test_a_batch_records_each_input(exports, tmp_path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    code = main(["analyze", *map(str, exports), "-o", str(tmp_path / "batch"), "--quiet",
                 "--db", db, "--tag", "batch", "-j", "1"])  # fmt: skip
    assert code == 0
    with RunStore(db) as store:
        found = store.find(tag="batch")
    assert len(found) == len(exports)
    assert all(Path(str(i.report_dir)).parent == tmp_path / "batch" for i in found)


@pytest.mark.parametrize("why", ["closed port", "newer schema", "not a database"])
def test_a_store_that_fails_costs_one_warning_not_the_report(
    exports, tmp_path, capsys, why
) -> None:
    if why == "closed port":
        pytest.importorskip("psycopg")
        db = "postgresql+psycopg://someone:secret@127.0.0.1:9/runs"
    elif why == "newer schema":
        db = f"sqlite:///{tmp_path / 'runs.db'}"
        with RunStore(db) as store, store.engine.begin() as connection:
            connection.exec_driver_sql("UPDATE dlprof_lite_version SET version_num = 'zz_next'")
    else:
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"not a database at all" * 100)
        db = f"sqlite:///{junk}"
    code = _analyze(exports[0], tmp_path / "report", db)
    err = capsys.readouterr().err
    assert code == 0
    assert (tmp_path / "report" / "summary.json").is_file()  # the report is whole
    warnings = [line for line in err.splitlines() if "run store" in line]
    assert len(warnings) == 1 and warnings[0].startswith("dlprof-lite: warning: run not recorded")
    assert "secret" not in err and "Traceback" not in err


def test_runs_on_a_missing_store_is_one_line(tmp_path, capsys) -> None:
    """Reading commands never create the store they name (issue 40)."""
    for args in (["show", "7"], ["list"], ["export", "-"], ["rm", "7"]):
        code = main(["runs", *args, "--db", f"sqlite:///{tmp_path / 'runs.db'}"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (args, err)
        assert f"no run database at {tmp_path / 'runs.db'}" in err
        assert list(tmp_path.iterdir()) == []


def test_the_whole_loop_on_a_real_postgresql_server(
    exports, tmp_path, capsys, pg_url  # noqa: F811
) -> None:
    """Record two tagged runs on PostgreSQL, list them, compare them by tag: the same
    comparison as of their folders."""
    for export, tag in ((exports[0], "pg-a"), (exports[1], "pg-b")):
        assert _analyze(export, tmp_path / tag, pg_url, "--tag", tag) == 0
    listed = _json(capsys, "runs", "--json", "--db", pg_url)
    assert [r["tag"] for r in listed] == ["pg-b", "pg-a"]
    docs = []
    for names in (("pg-a", "pg-b"), (str(tmp_path / "pg-a"), str(tmp_path / "pg-b"))):
        out = tmp_path / f"cmp{len(docs)}"
        assert main(["compare", *names, "-o", str(out), "--quiet", "--db", pg_url]) == 0
        docs.append(json.loads((out / "compare.json").read_text()))
    assert docs[0]["steps"][0]["median_ns"] == docs[1]["steps"][0]["median_ns"]
    relabelled = [{**d, "label": "pg-b", "baseline": "pg-a"} for d in docs[1]["deltas"]]
    assert docs[0]["deltas"] == relabelled
