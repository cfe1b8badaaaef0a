"""The run store on SQLite: a report recorded and read back equal, find/filter/remove, errors.

Oracles: the report itself (``dlprof_lite.analyze`` of real corpus exports and the hand-built
example profile) must come back field for field, its tables equal with their dtypes; filters
are checked against runs recorded with known tags, scripts and times; error cases are real
broken inputs (random bytes, an nsys export, a stamped unknown revision).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.report.build import build_report
from dlprof_lite.store.database import RunStore, StoreError, default_url
from dlprof_lite.store.engine import DEFAULT_DB_ENV, default_path
from dlprof_lite.store.record import RunContext, RunRecord

# Real exports with layers, kernels or many iterations (checked below to be non-empty).
CORPUS_EXPORTS = (
    "MohanadOdema__DLProf__nsys_profile.sqlite",
    "GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite",
    "VerticalResearchGroup__casio__nerf_output-file.sqlite",
)
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def context(**fields: object) -> RunContext:
    base = RunContext(
        created_at=T0, tag="fp32", command=("python", "train.py", "--lr", "0.1"),
        cwd="/home/me/proj", script="/home/me/proj/train.py", host="node-1",
        git_commit="0123abcd", git_dirty=True, report_dir="/tmp/r", tool_version="0.1.0",
    )  # fmt: skip
    return replace(base, **fields)  # type: ignore[arg-type]


def synthetic_record(**fields: object) -> RunRecord:
    """The hand-built three-step example profile (two analysed steps) as a run."""
    from example_profiles import training_profile

    return RunRecord.from_report(build_report(training_profile()), context(**fields))


def corpus_record(name: str, **fields: object) -> RunRecord:
    path = CORPUS / name
    if not path.is_file():
        from conftest import missing

        missing(f"no corpus export {path}")
    return RunRecord.from_report(dlprof_lite.analyze(path), context(**fields))


def hostile_record() -> RunRecord:
    """Names a strict database refuses in text columns (NUL, a lone surrogate), a formula,
    NaN and NA cells, and categories that are not the sorted distinct values."""
    run = synthetic_record()
    kernels = run.kernels.copy()
    names = ["=cmd|' /C calc'!A0", "k\x00nul", "tab\tname", "日本語 ✓"]
    kernels["name"] = pd.Categorical(names, categories=[*reversed(names), "unused"])
    kernels["avg_ns"] = [np.nan, 1.5, np.inf, 2.0]
    layers = run.layers.copy()
    layers["calls"] = pd.array([pd.NA, 3], dtype="Int64")
    layers["layer"] = pd.Series(["model.\x00odd", "model.surrogate\udcff"], dtype=object)
    return replace(run, kernels=kernels, layers=layers)


def assert_same(back: RunRecord, run: RunRecord, run_id: int) -> None:
    assert back.run_id == run_id
    assert back.context == run.context
    assert back.summary == run.summary
    for name in ("iterations", "layers", "kernels"):
        expected = getattr(run, name)
        if name == "kernels" and (expected["avg_ns"] == np.inf).any():
            expected = expected.assign(avg_ns=expected["avg_ns"].replace(np.inf, np.nan))
        pd.testing.assert_frame_equal(getattr(back, name), expected, check_exact=True)
    pd.testing.assert_frame_equal(back.phases(), run.phases(), check_exact=True)
    np.testing.assert_array_equal(back.step_ns(), run.step_ns())


def round_trip(url: str, run: RunRecord) -> RunRecord:
    with RunStore(url) as store:
        run_id = store.record(run)
        back = store.get(run_id)
    assert_same(back, run, run_id)
    return back


def sqlite_url(tmp_path: Path, name: str = "runs.db") -> str:
    return f"sqlite:///{tmp_path / name}"


@pytest.mark.corpus
@pytest.mark.parametrize("name", CORPUS_EXPORTS)
def test_round_trip_of_real_reports(tmp_path: Path, name: str) -> None:
    run = corpus_record(name)
    assert len(run.layers) or len(run.kernels) or len(run.iterations)
    round_trip(sqlite_url(tmp_path), run)


def test_round_trip_of_example_profile(tmp_path: Path) -> None:
    run = synthetic_record()
    assert len(run.step_ns()) == 2  # the oracle: iterations 1 and 2 analysed, 0 warm-up
    back = round_trip(sqlite_url(tmp_path), run)
    assert back.step_ns().tolist() == [2000.0, 3000.0]


def test_round_trip_of_hostile_names(tmp_path: Path) -> None:
    round_trip(sqlite_url(tmp_path), hostile_record())


def test_summary_facts_fill_the_run_row(tmp_path: Path) -> None:
    """The summary's GPUs, nsys version and source land in their columns; the command
    line's host wins over the summary's; the steps are the analysed ones."""
    run = synthetic_record(host=None)
    with RunStore(sqlite_url(tmp_path)) as store:
        run_id = store.record(run)
        (info,) = store.find()
        row = _one(store, f"SELECT gpus, nsys_version, source, host FROM runs WHERE id={run_id}")
    assert (info.id, info.steps, info.step_median_ns, info.step_mean_ns) == (run_id, 2, 2500, 2500)
    assert row[:3] == (run.summary["gpu_names"], run.summary["nsys_version"],
                       run.summary["source"])  # fmt: skip
    assert row[3] == run.summary["host"]  # None unless the summary knows the host
    with RunStore(sqlite_url(tmp_path)) as store:
        assert store.get(store.record(synthetic_record(host="mine"))).context.host == "mine"


def _one(store: RunStore, sql: str) -> tuple:
    with store.engine.connect() as connection:
        return tuple(connection.exec_driver_sql(sql).one())


def counts(store: RunStore) -> dict[str, int]:
    tables = ("runs", "run_iterations", "run_layers", "run_kernels", "run_phases")
    return {t: _one(store, f"SELECT count(*) FROM {t}")[0] for t in tables}


def test_failure_in_the_middle_leaves_no_row(tmp_path: Path) -> None:
    """A database error on the kernels' insert (after the run, its iterations and layers
    were inserted in the same transaction) leaves nothing of the run."""
    url = sqlite_url(tmp_path)
    with RunStore(url) as store:
        with store.engine.begin() as connection:
            connection.exec_driver_sql(
                "CREATE TRIGGER fail BEFORE INSERT ON run_kernels "
                "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        with pytest.raises(StoreError, match="disk on fire") as err:
            store.record(synthetic_record())
        assert "\n" not in str(err.value)
        assert counts(store) == dict.fromkeys(counts(store), 0)


def _stored_runs(store: RunStore) -> dict[str, int]:
    when = {"old": T0 - timedelta(days=10), "mid": T0, "new": T0 + timedelta(days=1)}
    ids = {
        "old": store.record(synthetic_record(tag="fp32", created_at=when["old"])),
        "mid": store.record(synthetic_record(tag="amp", created_at=when["mid"],
                                             script="/other/train.py")),
        "new": store.record(synthetic_record(tag=None, group="rep-1", repeat_index=0,
                                             created_at=when["new"], script="eval.py")),
        "grp": store.record(synthetic_record(tag="fp32", group="rep-1", repeat_index=1,
                                             created_at=when["new"] + timedelta(hours=1))),
    }  # fmt: skip
    return ids


def test_find_filters_and_orders(tmp_path: Path) -> None:
    with RunStore(sqlite_url(tmp_path)) as store:
        ids = _stored_runs(store)

        def found(**kw: object) -> list[int]:
            return [i.id for i in store.find(**kw)]  # type: ignore[arg-type]

        assert found() == [ids["grp"], ids["new"], ids["mid"], ids["old"]]  # newest first
        assert found(tag="fp32") == [ids["grp"], ids["old"]]
        assert found(group="rep-1") == [ids["grp"], ids["new"]]
        assert found(script="train.py") == [ids["grp"], ids["mid"], ids["old"]]
        assert found(script="proj/train.py") == [ids["grp"], ids["old"]]
        assert found(script="eval.py") == [ids["new"]]
        assert found(script="rain.py") == []  # a name, not any suffix
        assert found(script="%.py") == []  # LIKE wildcards are literal
        assert found(since=T0) == [ids["grp"], ids["new"], ids["mid"]]  # inclusive
        assert found(until=T0) == [ids["old"]]  # exclusive
        assert found(since=T0, until=T0 + timedelta(days=1)) == [ids["mid"]]
        assert found(limit=2) == [ids["grp"], ids["new"]]
        (info,) = store.find(tag="amp")
        assert info.created_at == T0 and info.created_at.tzinfo is not None
        assert info.command == ("python", "train.py", "--lr", "0.1")
        assert (info.git_commit, info.git_dirty, info.host) == ("0123abcd", True, "node-1")


def test_naive_times_are_local(tmp_path: Path) -> None:
    with RunStore(sqlite_url(tmp_path)) as store:
        ids = _stored_runs(store)
        local = T0.astimezone().replace(tzinfo=None)  # the same instant, naive local
        assert [i.id for i in store.find(until=local)] == [ids["old"]]


def test_runs_with_tag_pools_tag_and_group(tmp_path: Path) -> None:
    with RunStore(sqlite_url(tmp_path)) as store:
        ids = _stored_runs(store)
        assert [r.run_id for r in store.runs_with_tag("fp32")] == [ids["old"], ids["grp"]]
        assert [r.run_id for r in store.runs_with_tag("rep-1")] == [ids["new"], ids["grp"]]
        assert store.runs_with_tag("nothing") == []


def test_remove_cascades(tmp_path: Path) -> None:
    with RunStore(sqlite_url(tmp_path)) as store:
        ids = _stored_runs(store)
        before = counts(store)
        assert before["run_iterations"] == 4 * 3 and before["run_phases"] == 4 * 6
        with pytest.raises(StoreError, match=r"no run 999 in .*; nothing removed"):
            store.remove([ids["old"], ids["mid"], 999])  # all there, or none removed
        assert counts(store) == before
        assert store.remove([ids["old"], ids["mid"]]) == 2
        after = counts(store)
        assert after == {t: n // 2 for t, n in before.items()}
        assert [i.id for i in store.find()] == [ids["grp"], ids["new"]]
        with pytest.raises(StoreError, match=f"no run {ids['old']} in "):
            store.get(ids["old"])
        assert store.remove([]) == 0


def test_export_csv(tmp_path: Path) -> None:
    with RunStore(sqlite_url(tmp_path)) as store:
        store.record(synthetic_record(tag="=HYPERLINK(1)", command=("python", "a b.py")))
        out = io.StringIO()
        store.export_csv(store.find(), out)
        store.export_csv(store.find(), tmp_path / "runs.csv")
    assert (tmp_path / "runs.csv").read_text(encoding="utf-8") == out.getvalue()
    (row,) = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert row["tag"] == "'=HYPERLINK(1)"  # a spreadsheet sees text
    assert row["command"] == "python 'a b.py'"
    assert row["steps"] == "2" and float(row["step_median_ns"]) == 2500
    assert datetime.fromisoformat(row["created_at"]) == T0


def test_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DEFAULT_DB_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_url() == f"sqlite:///{tmp_path}/xdg/dlprof-lite/runs.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_path() == Path.home() / ".local/share/dlprof-lite/runs.db"
    monkeypatch.setenv(DEFAULT_DB_ENV, sqlite_url(tmp_path, "env.db"))
    with RunStore() as store:
        store.record(synthetic_record())
    assert (tmp_path / "env.db").is_file()


def test_default_database_is_created_with_its_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(DEFAULT_DB_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with pytest.raises(StoreError, match=r"no run database at .* \(no run recorded yet\)"):
        RunStore(create=False)
    assert not (tmp_path / "xdg").exists()  # reading creates nothing
    with RunStore() as store:
        assert store.find() == []
    with RunStore(create=False) as store:
        assert store.find() == []


def one_line_error(url: str, **kw: bool) -> str:
    with pytest.raises(StoreError) as err:
        RunStore(url, **kw)
    message = str(err.value)
    assert "\n" not in message and message
    return message


def test_bad_urls() -> None:
    assert "not a database URL: 'no url here'" in one_line_error("no url here")
    assert "unknown database kind 'nosuch'" in one_line_error("nosuch://u:pw@h/db")
    message = one_line_error("mysql+pymysql://me:s3cret@127.0.0.1/runs")
    assert "driver for mysql+pymysql is not installed" in message
    assert "s3cret" not in message


def test_not_a_database_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(bytes(range(256)) * 64)
    message = one_line_error(f"sqlite:///{junk}")
    assert message == f"run database {junk}: file is not a database"
    assert junk.read_bytes() == bytes(range(256)) * 64
    assert "is a folder" in one_line_error(f"sqlite:///{tmp_path}")


@pytest.mark.corpus
def test_an_nsys_export_is_not_written(tmp_path: Path) -> None:
    source = CORPUS / CORPUS_EXPORTS[0]
    if not source.is_file():
        pytest.skip(f"no corpus export {source}")
    export = tmp_path / "profile.sqlite"
    export.write_bytes(source.read_bytes())
    message = one_line_error(f"sqlite:///{export}")
    assert "is a database but not a dlprof-lite run store" in message
    assert export.read_bytes() == source.read_bytes()


def stamp_newer(url: str) -> None:
    with RunStore(url) as store, store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE dlprof_lite_version SET version_num = '9999_future'")


def test_schema_newer_than_the_tool(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    stamp_newer(url)
    message = one_line_error(url)
    assert "schema revision 9999_future, unknown to this dlprof-lite" in message
    assert "newer version" in message


def test_empty_database_and_create_false(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    sa.create_engine(url).connect().close()  # an empty SQLite file
    assert "holds no runs yet" in one_line_error(url, create=False)


def test_big_run_records_in_seconds(tmp_path: Path) -> None:
    """10,000 layer rows and 50,000 kernel rows: recorded and read back whole, each within
    a bound relative to encoding the same rows as JSON (load on the machine scales both)."""
    import json

    from dlprof_lite.render.writers import records

    run = big_record(layers=10_000, kernels=50_000)
    start = time.perf_counter()
    encoded = [json.dumps(records(t)) for t in (run.layers, run.kernels)]
    encode_s = time.perf_counter() - start
    assert sum(map(len, encoded)) > 10_000_000
    with RunStore(sqlite_url(tmp_path)) as store:
        start = time.perf_counter()
        run_id = store.record(run)
        record_s = time.perf_counter() - start
        start = time.perf_counter()
        back = store.get(run_id)
        get_s = time.perf_counter() - start
    assert_same(back, run, run_id)
    print(f"encode {encode_s:.2f} s, record {record_s:.2f} s, get {get_s:.2f} s")
    assert record_s < 15 * encode_s + 1 and get_s < 15 * encode_s + 1


def big_record(*, layers: int, kernels: int) -> RunRecord:
    """The example run with its layer and kernel rows repeated under distinct names."""
    run = synthetic_record()
    big_layers = run.layers.iloc[np.arange(layers) % len(run.layers)].reset_index(drop=True)
    big_layers["layer"] = [f"model.blocks.{i}.fc" for i in range(layers)]
    big_kernels = run.kernels.iloc[np.arange(kernels) % len(run.kernels)].reset_index(drop=True)
    names = [f"void kernel_{i}<float, 128>(float*, int)" for i in range(kernels)]
    big_kernels["name"] = pd.Categorical(names)
    big_kernels["total_ns"] = np.arange(kernels, dtype=np.int64) * 1000
    return replace(run, layers=big_layers, kernels=big_kernels)


@pytest.mark.corpus
def test_system_facts_of_a_real_export(tmp_path: Path) -> None:
    """Host and driver come from the export's system table when the command line has no
    host (a report analysed later); versions it does not know stay empty."""
    run = corpus_record(CORPUS_EXPORTS[0], host=None)
    summary = run.summary
    assert summary["host"] and summary["driver_version"]  # the export knows them
    columns = ("host", "driver_version", "cuda_version", "torch_version", "python_version",
               "gpus", "nsys_version", "source")  # fmt: skip
    expected = [summary[c] for c in columns[:5]]
    expected += [summary["gpu_names"], summary["nsys_version"], summary["source"]]
    with RunStore(sqlite_url(tmp_path)) as store:
        run_id = store.record(run)
        assert list(_one(store, f"SELECT {', '.join(columns)} FROM runs WHERE id={run_id}")) == (
            expected
        )
        assert store.get(run_id).context.host == summary["host"]


def check_hostile_context(url: str) -> None:
    """A tag with NUL and a non-UTF-8 script path (Python decodes it to a lone surrogate)
    are recorded, not a traceback: the text columns keep a readable form, the command
    (JSON) keeps the exact text, and find() with the same text finds the run."""
    script = "/data/caf\udce9/train.py"
    run = synthetic_record(tag="a\x00b", script=script, cwd="/data/caf\udce9",
                           command=("python", script))  # fmt: skip
    with RunStore(url) as store:
        run_id = store.record(run)
        back = store.get(run_id).context
        assert (back.tag, back.script, back.cwd) == (
            "a\ufffdb",
            "/data/caf?/train.py",
            "/data/caf?",
        )
        assert back.command == ("python", script)
        assert [i.id for i in store.find(tag="a\x00b", script="train.py")] == [run_id]
        assert [r.run_id for r in store.runs_with_tag("a\x00b")] == [run_id]


def test_hostile_context(tmp_path: Path) -> None:
    check_hostile_context(sqlite_url(tmp_path))


def test_sqlite_path_with_tilde(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with RunStore("sqlite:///~/sub/runs.db") as store:
        assert store.display == str(tmp_path / "sub" / "runs.db")
    assert (tmp_path / "sub" / "runs.db").is_file()
