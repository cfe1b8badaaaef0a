"""The notebook API: analyze -> Report -> save -> open_report, the typed summary, the reprs,
and GPU timelines keyed by (process, device)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pandas as pd
import pytest

import dlprof_lite
from builders import PID, make_profile
from conftest import corpus_files, missing
from dlprof_lite.errors import DlprofError, OutputError
from dlprof_lite.render import output
from dlprof_lite.render.output import GRAPH_FILE, PAGE_FILE, TRACE_FILE
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.model import TABLES, Report
from example_profiles import training_profile

CORPUS = corpus_files()


def assert_same_report(a: Report, b: Report) -> None:
    for name in TABLES[1:]:
        pd.testing.assert_frame_equal(a.table(name), b.table(name), check_exact=True)
    assert a.summary == b.summary
    assert a.table("summary").equals(b.table("summary"))


@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:60] for p in CORPUS])
def test_every_corpus_export_round_trips(path: Path, tmp_path: Path) -> None:
    report = dlprof_lite.analyze(path)
    folder = report.save(tmp_path / "r")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*(f"{t}.{fmt}" for t in TABLES for fmt in ("csv", "json")), GRAPH_FILE, PAGE_FILE,
         TRACE_FILE]
    )  # fmt: skip
    assert_same_report(report, dlprof_lite.open_report(folder))


def test_the_corpus_is_there() -> None:
    if not CORPUS:
        missing("no corpus exports: the round trip of every export was not checked")


def test_round_trip_keeps_dtypes_and_lists(tmp_path: Path) -> None:
    report = build_report(training_profile())
    back = dlprof_lite.open_report(report.save(tmp_path / "r"))
    assert_same_report(report, back)
    assert back.kernels.dtypes.equals(report.kernels.dtypes)
    assert back.summary.advice and back.summary.advice == report.summary.advice
    assert back.summary.gpus == report.summary.gpus


def test_report_open_pairs_with_save_and_build_report_is_public(tmp_path: Path) -> None:
    """``Report.open`` reads what ``save`` wrote; ``dlprof_lite.build_report`` is the report
    ``analyze`` gives for the same profile (the oracle: the internal builder's)."""
    profile = training_profile()
    report = dlprof_lite.build_report(profile)
    assert_same_report(report, build_report(profile))
    back = Report.open(report.save(tmp_path / "r"))
    assert_same_report(report, back)
    assert back.summary == dlprof_lite.open_report(tmp_path / "r").summary


def test_the_cli_writes_the_folder_analyze_and_save_write(tmp_path: Path) -> None:
    from dlprof_lite.cli import main

    path = CORPUS[0] if CORPUS else None
    if path is None:
        missing("no corpus exports")
        return
    assert main(["analyze", str(path), "-o", str(tmp_path / "cli"), "--quiet"]) == 0
    dlprof_lite.analyze(path).save(tmp_path / "api")
    for name in TABLES:
        for fmt in ("csv", "json"):
            cli, api = (tmp_path / d / f"{name}.{fmt}" for d in ("cli", "api"))
            assert cli.read_bytes() == api.read_bytes(), name


def test_save_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    report = build_report(training_profile())
    folder = report.save(tmp_path / "r", formats=("json",))
    before = (folder / "summary.json").read_bytes()
    with pytest.raises(OutputError, match="already exists"):
        report.save(folder)
    assert (folder / "summary.json").read_bytes() == before
    assert not (folder / "summary.csv").exists()
    report.save(folder, force=True)
    assert (folder / "summary.csv").is_file()
    with pytest.raises(OutputError, match="format"):
        report.save(tmp_path / "x", formats=("xml",))


def test_a_failed_write_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = build_report(training_profile())
    real, calls = output.atomic_write, []

    def failing(path: Path, text: str) -> None:  # the disk fills up at the third file
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(output, "atomic_write", failing)
    with pytest.raises(OutputError, match="No space left on device; free some space"):
        report.save(tmp_path / "r")
    assert len(calls) == 3 and os.listdir(tmp_path) == []


def test_open_report_refuses_what_is_not_a_report(tmp_path: Path) -> None:
    with pytest.raises(DlprofError, match="no such report folder"):
        dlprof_lite.open_report(tmp_path / "absent")
    with pytest.raises(DlprofError, match="not a dlprof-lite report"):
        dlprof_lite.open_report(tmp_path)
    folder = build_report(training_profile()).save(tmp_path / "r", formats=("json",))
    (folder / "kernels.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DlprofError, match=r"kernels\.json"):
        dlprof_lite.open_report(folder)
    (folder / "kernels.json").unlink()
    with pytest.raises(DlprofError, match="incomplete report"):
        dlprof_lite.open_report(folder)


def test_a_csv_only_folder_opens_with_its_numbers(tmp_path: Path) -> None:
    report = build_report(training_profile())
    back = dlprof_lite.open_report(report.save(tmp_path / "r", formats=("csv",)))
    assert back.summary.totals == report.summary.totals
    assert back.summary.warnings == report.summary.warnings
    assert [a.metric for a in back.summary.advice] == [a.metric for a in report.summary.advice]
    assert back.kernels["total_ns"].tolist() == report.kernels["total_ns"].tolist()


def test_summary_is_frozen_and_renamed_by_copy() -> None:
    report = build_report(training_profile())
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.summary.system.source = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        report.summary["source"] = "x"  # type: ignore[index]
    moved = report.with_source("elsewhere.sqlite")
    assert moved.summary["source"] == "elsewhere.sqlite"
    assert report.summary["source"] == "test.sqlite"


def test_flat_row_and_json_come_from_the_one_summary(tmp_path: Path) -> None:
    report = build_report(training_profile())
    row = report.summary.row()
    assert list(row) == column_names("summary")
    assert row["advice_count"] == len(report.summary.advice) > 0
    folder = report.save(tmp_path / "r", formats=("json",))
    doc = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    flat = {k: v for k, v in row.items() if k != "warnings"}
    assert {k: doc[k] for k in flat} == flat
    assert "; ".join(doc["warnings"]) == row["warnings"]
    assert doc["gpus"][0]["device_id"] == 0 and doc["gpus"][0]["pid"] == PID


def test_reprs_are_short() -> None:
    report = build_report(training_profile())
    lines = repr(report).splitlines()
    assert len(lines) <= 8
    text = "\n".join(lines)
    assert "test.sqlite" in text and "NVIDIA H100" in text
    assert "3 iterations" in text and report.summary.advice[0].problem in text
    assert "top layer: " in text and "fc1" in text
    profile_repr = repr(training_profile())
    assert len(profile_repr.splitlines()) == 1 and "kernels=12" in profile_repr


def test_two_processes_on_device_0_are_two_timelines() -> None:
    # pid 1 busy [0, 4000) on device 0; pid 2 busy [2000, 3000) and [5000, 6000) on its own
    # "device 0". Merged by device id they would be one GPU busy 5000 ns of 10 000.
    kernels = [
        dict(name="k", start_ns=0, dur_ns=4000, pid=1, device_id=0),
        dict(name="k", start_ns=2000, dur_ns=1000, pid=2, device_id=0),
        dict(name="k", start_ns=5000, dur_ns=1000, pid=2, device_id=0),
    ]
    s = build_report(make_profile(kernels=kernels)).summary
    assert [(g.pid, g.device_id, g.busy_ns, g.utilization) for g in s.gpus] == [
        (1, 0, 4000, 0.4),
        (2, 0, 2000, 0.2),
    ]
    assert s["devices"] == 2
    assert s["gpu_busy_ns"] == 6000
    assert s["gpu_utilization"] == pytest.approx(6000 / (10_000 * 2))
    assert s["active_utilization"] == pytest.approx(6000 / (4000 + 4000))
    # One step over the session: 2 timelines x 10 000 ns, 6000 busy, 14 000 idle.
    report = build_report(make_profile(kernels=kernels, iterations=[(0, 10_000, False, True)]))
    step = report.iterations.iloc[0]
    assert (step["gpu_busy_ns"], step["phase_idle_ns"]) == (6000, 14_000)
    assert report.summary["step_utilization"] == pytest.approx(0.3)


def test_api_is_exported_without_importing_pandas() -> None:
    import subprocess
    import sys

    assert {"analyze", "analyze_ranks", "build_report", "open_report", "load", "Report",
            "Summary"} <= set(dlprof_lite.__all__)  # fmt: skip
    assert dlprof_lite.Report is Report
    code = "import sys, dlprof_lite; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_docs_reference_is_generated_from_the_registry() -> None:
    import gen_reference

    assert gen_reference.stale() == [], "run python scripts/gen_reference.py"
    assert gen_reference.main(["--check"]) == 0


def test_readme_notebook_example_names_the_api() -> None:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## In a notebook") :]
    for name in ("analyze", "open_report", "load"):
        assert f"dlprof_lite.{name}(" in section
    assert "report.save(" in section
