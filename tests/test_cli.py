"""The ``dlprof-lite`` command: both forms, output folder rules, errors and exit codes.

Most tests replace ``dlprof_lite.ingest.load`` (and the launchers) with fakes that return a
hand-built Profile, so they test the command itself. The tests at the end run the real
pipeline on bad inputs and on corpus files, in-process and as ``python -m dlprof_lite``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from builders import foreign_sqlite
from dlprof_lite import __version__
from dlprof_lite.cli import main
from dlprof_lite.errors import InputError, NsysError, SchemaError
from dlprof_lite.ingest.columns import empty_frame
from dlprof_lite.ingest.selection import StepSelection
from dlprof_lite.render.output import GRAPH_FILE, PAGE_FILE, TRACE_FILE
from dlprof_lite.report.model import TABLES
from example_profiles import training_profile

# every table in each format, and the module tree (render/graph.py), whatever the formats
ALL_FILES = sorted(
    [*(f"{t}.{f}" for t in TABLES for f in ("csv", "json")), GRAPH_FILE, PAGE_FILE, TRACE_FILE]
)


class FakeLoad:
    """Stands in for ``dlprof_lite.ingest.load.load``; raises for paths named in ``fail``."""

    def __init__(self, fail: dict[str, BaseException] | None = None) -> None:
        self.calls: list[tuple[Path, dict]] = []
        self.fail = fail or {}

    def __call__(self, path, *, hand_over: bool = False, **options):
        # hand_over (enrich may let the read frames go) changes no result: not recorded
        self.calls.append((Path(path), options))
        for word, error in self.fail.items():
            if word in Path(path).name:
                raise error
        profile = training_profile()  # like the real load, it names its input
        meta = dataclasses.replace(profile.meta, source=os.fspath(path))
        return dataclasses.replace(profile, meta=meta)


class FakeRaw(os.PathLike[str]):
    """What the fake ``load_raw`` reads: its path, and no NVTX (one process, no ranks)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.marks, self.nvtx = empty_frame("marks"), empty_frame("nvtx_events")

    def __fspath__(self) -> str:
        return str(self.path)


@pytest.fixture
def fake_load(monkeypatch) -> FakeLoad:
    fake = FakeLoad()
    stub = types.ModuleType("dlprof_lite.ingest.load")
    stub.load = fake  # type: ignore[attr-defined]
    # The pipeline reads an export once (load_raw) and analyses it (enrich): the fake stands
    # for both, called with the path and the options as the real load is.
    stub.load_raw = lambda path, **_: FakeRaw(path)  # type: ignore[attr-defined]
    stub.enrich = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dlprof_lite.ingest.load", stub)
    return fake


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "run.sqlite"
    path.write_bytes(b"stand-in: the fake load never reads it")
    return path


def error_line(err: str) -> str:
    """The one line an error prints (and check that it is one line, without a traceback)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dlprof-lite: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_version_and_help(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dlprof-lite {__version__}"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "SCRIPT [ARGS...]" in out and "analyze PATH [PATH...]" in out and "-- COMMAND" in out
    assert main(["analyze", "--help"]) == 0
    assert "--key-range" in capsys.readouterr().out


def test_analyze_writes_a_new_folder_beside_the_input(fake_load, src: Path, capsys) -> None:
    assert main(["analyze", str(src), "--quiet"]) == 0
    first = src.parent / "run.dlprof"
    assert sorted(p.name for p in first.iterdir()) == ALL_FILES
    assert capsys.readouterr().out == f"report: {first}\n"  # --quiet: the folder, one line
    stamp = (first / "summary.json").stat().st_mtime_ns
    assert main(["analyze", str(src), "--quiet"]) == 0  # never overwrites: a new name
    assert sorted(p.name for p in (src.parent / "run.dlprof-2").iterdir()) == ALL_FILES
    assert (first / "summary.json").stat().st_mtime_ns == stamp
    assert fake_load.calls[0] == (src, {"steps": StepSelection()})


def test_console_summary(fake_load, src: Path, capsys) -> None:
    assert main(["analyze", str(src)]) == 0
    out = capsys.readouterr().out
    for text in ("H100", "Top layers", "fc1", "Top kernels", "sgemm_128x64_nt",
                 "Top NVTX ranges", "iterations 3 (1 warm-up, 2 analysed)", "advice",
                 "Launch-bound", f"report: {src.parent / 'run.dlprof'}"):  # fmt: skip
        assert text in out, text


def test_existing_output_needs_force(fake_load, src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["analyze", str(src), "-o", str(out), "--quiet"]) == 2
    assert "already exists; pass --force" in error_line(capsys.readouterr().err)
    assert not fake_load.calls  # refused before any work
    assert main(["analyze", str(src), "-o", str(out), "--quiet", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ALL_FILES


def test_formats_and_options(fake_load, src: Path, tmp_path: Path, capsys) -> None:
    args = ["analyze", str(src), "-o", str(tmp_path / "j"), "--formats", "json", "--quiet",
            "--key-range", "^step", "--iter-start", "2", "--iter-stop", "5"]  # fmt: skip
    assert main(args) == 0
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == sorted(
        [*(f"{t}.json" for t in TABLES), GRAPH_FILE, TRACE_FILE]  # no html: no page
    )
    assert fake_load.calls[0][1] == {"steps": StepSelection("^step", 2, 5)}
    for bad in (["--formats", "xml"], ["--formats", ""], ["--key-range", "("],
                ["--iter-start", "-1"], ["--iter-stop", "x"]):  # fmt: skip
        assert main(["analyze", str(src), *bad]) == 2
        assert "error:" in capsys.readouterr().err


def test_several_inputs(fake_load, tmp_path: Path, capsys) -> None:
    paths = []
    for sub in ("rank0", "rank1"):
        (tmp_path / sub).mkdir()
        paths.append(tmp_path / sub / "report.nsys-rep.sqlite")
        paths[-1].write_text("x")
    assert main(["analyze", *map(str, paths), "--quiet", "--jobs", "1"]) == 0
    parent = tmp_path / "rank0" / "dlprof-lite-reports"
    names = sorted(p.name for p in parent.iterdir())
    assert names == ["report.dlprof", "report.dlprof-2", "summary.csv", "summary.json"]
    with open(parent / "summary.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["source"] for r in rows] == [str(p) for p in paths]
    assert [r["report_dir"] for r in rows] == [str(parent / "report.dlprof"),
                                               str(parent / "report.dlprof-2")]  # fmt: skip
    assert rows[0]["kernel_ns"] == "1110" and rows[0]["error"] == ""
    doc = json.loads((parent / "summary.json").read_text(encoding="utf-8"))
    assert doc["table"] == "runs" and len(doc["rows"]) == 2 and "error" in doc["definitions"]


def test_several_inputs_one_bad(fake_load, tmp_path: Path, capsys) -> None:
    good, bad = tmp_path / "good.sqlite", tmp_path / "bad.sqlite"
    good.write_text("x")
    bad.write_text("x")
    fake_load.fail = {"bad": InputError(f"{bad}: not an nsys export")}
    out = tmp_path / "reports"
    # --jobs 1: the fake load is patched into this process only.
    argv = ["analyze", str(good), str(bad), "-o", str(out), "--formats", "csv", "--jobs", "1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"{bad}: not an nsys export" in error_line(captured.err)
    assert sorted(p.name for p in out.iterdir()) == ["good.dlprof", "summary.csv"]
    with open(out / "summary.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[1]["source"] == str(bad) and "not an nsys export" in rows[1]["error"]
    assert "good.sqlite" in captured.out
    # nothing good at all: no folder.
    fake_load.fail = {"": InputError("broken")}
    argv = ["analyze", str(good), str(bad), "-o", str(tmp_path / "none"), "--quiet", "--jobs", "1"]
    assert main(argv) == 2
    assert not (tmp_path / "none").exists()


class FakeRun:
    """Stands in for ``dlprof_lite.launch.run.profile_program``."""

    def __init__(self, exit_code: int = 0) -> None:
        self.exit_code = exit_code
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        sqlite = Path(kwargs["out_dir"]) / "profile.sqlite"
        sqlite.write_text("captured")
        return types.SimpleNamespace(sqlite_path=sqlite, exit_code=self.exit_code,
                                     warnings=("no NVTX ranges arrived",),
                                     no_ranges_hint=None)  # fmt: skip


@pytest.fixture
def fake_run(monkeypatch) -> FakeRun:
    fake = FakeRun(exit_code=3)
    stub = types.ModuleType("dlprof_lite.launch.run")
    stub.profile_program = fake  # type: ignore[attr-defined]
    stub.ProfileRun = types.SimpleNamespace  # type: ignore[attr-defined]  # launch/__init__
    monkeypatch.setitem(sys.modules, "dlprof_lite.launch.run", stub)
    return fake


def test_run_form(fake_load, fake_run, tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "r"
    code = main([
        "-o", str(out), "--quiet", "--annotate", "phases", "--depth", "2",
        "--nsys-args=--cuda-graph-trace=node", "train.py", "--epochs", "1", "-o", "x",
    ])  # fmt: skip
    assert code == 3  # the program's exit code
    cmd, kwargs = fake_run.calls[0]
    assert cmd == ["train.py", "--epochs", "1", "-o", "x"]
    assert (kwargs["annotate"], kwargs["depth"], kwargs["nsys_args"]) == (
        "phases", 2, "--cuda-graph-trace=node",
    )  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == sorted([*ALL_FILES, "profile.sqlite"])
    captured = capsys.readouterr()
    assert captured.out == f"report: {out}\n"  # --quiet: the report folder, one line
    err = captured.err
    assert "warning: no NVTX ranges arrived" in err and "exited with code 3" in err
    monkeypatch.chdir(tmp_path)
    fake_run.exit_code = 0
    assert main(["--quiet", "--", "python", "-m", "pkg.train", "--lr", "1"]) == 0
    assert fake_run.calls[1][0] == ["python", "-m", "pkg.train", "--lr", "1"]
    assert (tmp_path / "train.dlprof" / "kernels.csv").is_file()


def test_run_form_keeps_the_profile_when_analysis_fails(
    fake_load, fake_run, tmp_path: Path, capsys
) -> None:
    fake_load.fail = {"profile": InputError("profile.sqlite: no CUDA data")}
    out = tmp_path / "r"
    assert main(["-o", str(out), "--quiet", "train.py"]) == 3
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if line.startswith("dlprof-lite: error:")]
    assert errors == [
        f"dlprof-lite: error: profile.sqlite: no CUDA data (the profile is kept in {out})"
    ]
    assert [p.name for p in out.iterdir()] == ["profile.sqlite"]


def test_run_form_usage_errors(fake_run, capsys) -> None:
    assert main([]) == 2
    assert "no program to profile" in error_line(capsys.readouterr().err)
    assert main(["run.sqlite"]) == 2
    assert "dlprof-lite analyze run.sqlite" in error_line(capsys.readouterr().err)
    assert main(["--annotate", "everything", "train.py"]) == 2  # argparse choices
    assert not fake_run.calls


@pytest.mark.parametrize(
    ("error", "code"),
    [(InputError("bad input"), 2), (NsysError("nsys missing"), 3), (SchemaError("col"), 70)],
)
def test_errors_are_one_line_with_their_exit_code(fake_load, src, capsys, error, code) -> None:
    fake_load.fail = {"run": error}
    assert main(["analyze", str(src), "--quiet"]) == code
    assert error_line(capsys.readouterr().err).endswith(str(error))
    assert not (src.parent / "run.dlprof").exists()


def test_unexpected_errors(fake_load, src: Path, capsys) -> None:
    fake_load.fail = {"run": ValueError("boom")}
    assert main(["analyze", str(src)]) == 1
    line = error_line(capsys.readouterr().err)
    assert (
        line
        == "dlprof-lite: error: unexpected ValueError: boom (rerun with --debug for the traceback)"
    )
    assert main(["analyze", str(src), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == (
        "dlprof-lite: error: unexpected ValueError: boom"
    )


def test_interrupt_exits_130_and_leaves_nothing(fake_load, src: Path, capsys) -> None:
    fake_load.fail = {"run": KeyboardInterrupt()}
    assert main(["analyze", str(src)]) == 130
    assert error_line(capsys.readouterr().err) == "dlprof-lite: error: interrupted"
    assert sorted(p.name for p in src.parent.iterdir()) == ["run.sqlite"]


# --- the real pipeline: bad inputs and corpus files ------------------------------------


def _bad_inputs(tmp_path: Path, corpus: Path) -> dict[str, Path]:
    text = tmp_path / "notes.sqlite"
    text.write_text("just some text, not a database\n")
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    other = foreign_sqlite(tmp_path / "other.sqlite")
    whole = (corpus / "quasiben__nvtx-examples__cupy.sqlite").read_bytes()
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(whole[: len(whole) // 2])
    folder = tmp_path / "folder.sqlite"
    folder.mkdir()
    return {
        "missing": tmp_path / "missing.sqlite", "text": text, "empty": empty,
        "not nsys": other, "truncated": truncated, "folder": folder,
    }  # fmt: skip


BAD = ("missing", "text", "empty", "not nsys", "truncated", "folder")


@pytest.mark.corpus
@pytest.mark.parametrize("kind", BAD)
def test_bad_input_in_process(corpus_dir: Path, tmp_path: Path, capsys, kind: str) -> None:
    path = _bad_inputs(tmp_path, corpus_dir)[kind]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["analyze", str(path)]) == InputError.exit_code
    assert str(path) in error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no report folder


@pytest.mark.corpus
@pytest.mark.parametrize("kind", BAD)
def test_bad_input_as_a_command(corpus_dir: Path, tmp_path: Path, kind: str) -> None:
    path = _bad_inputs(tmp_path, corpus_dir)[kind]
    proc = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", str(path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == InputError.exit_code, proc.stderr
    error_line(proc.stderr)
    assert proc.stdout == ""


@pytest.mark.corpus
def test_corpus_file_end_to_end(corpus_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "cupy.sqlite"
    shutil.copy(corpus_dir / "quasiben__nvtx-examples__cupy.sqlite", src)
    before = src.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", str(src)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Top kernels" in proc.stdout and "Traceback" not in proc.stderr
    out = tmp_path / "cupy.dlprof"
    assert sorted(p.name for p in out.iterdir()) == ALL_FILES
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["kernel_count"] == 15  # MANIFEST.tsv: 15 kernels
    assert src.read_bytes() == before  # the input is never modified


@pytest.mark.corpus
@pytest.mark.nsys
def test_report_files_are_exported_with_nsys(corpus_dir: Path, nsys: str, tmp_path: Path) -> None:
    rep = tmp_path / "cupy.qdrep"
    shutil.copy(corpus_dir / "raw" / "quasiben__nvtx-examples__cupy.qdrep", rep)
    assert main(["analyze", str(rep), "--quiet", "--formats", "json"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cupy.dlprof", "cupy.qdrep"]
    summary = json.loads((tmp_path / "cupy.dlprof" / "summary.json").read_text(encoding="utf-8"))
    assert (summary["source"], summary["kernel_count"]) == (str(rep), 15)


@pytest.mark.corpus
@pytest.mark.nsys
def test_a_report_from_a_newer_nsys(corpus_dir: Path, nsys: str, tmp_path: Path, capsys) -> None:
    rep = tmp_path / "fuser.nsys-rep"
    shutil.copy(corpus_dir / "raw" / "NVIDIA__Fuser__report1.nsys-rep", rep)  # nsys 2025.1
    version = subprocess.run([nsys, "--version"], capture_output=True, text=True, check=False)
    code = main(["analyze", str(rep), "--quiet"])
    if "2022." in version.stdout:  # too old to export it: one clear line, nothing written
        assert code == NsysError.exit_code
        assert "newer Nsight Systems" in error_line(capsys.readouterr().err)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["fuser.nsys-rep"]
    else:
        assert code == 0
        assert (tmp_path / "fuser.dlprof" / "summary.json").is_file()


SCRIPT = """
import sys, time, nvtx
for i in range(4):
    with nvtx.annotate("iteration", domain="dlprof-lite"):
        with nvtx.annotate("data", domain="dlprof-lite"):
            time.sleep(0.01)
        with nvtx.annotate("forward", domain="dlprof-lite"):
            time.sleep(0.005)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_run_form_under_the_real_nsys(nsys: str, tmp_path: Path, capsys) -> None:
    script = tmp_path / "steps.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "r"
    args = ["--annotate", "none", "--nsys", nsys, "-o", str(out), "--quiet"]
    assert main([*args, str(script), "5"]) == 5  # the script's exit code comes back
    assert {"profile.nsys-rep", "profile.sqlite", *ALL_FILES} <= {p.name for p in out.iterdir()}
    with open(out / "iterations.csv", newline="", encoding="utf-8") as fh:
        walls = [int(r["wall_ns"]) for r in csv.DictReader(fh)]
    assert len(walls) == 4 and all(w >= 15_000_000 for w in walls[1:])  # 10 + 5 ms of sleep
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["key_range"] == "iteration" and summary["iterations_count"] == 4
    assert any("no CUDA kernels" in w for w in summary["warnings"])
    assert "exited with code 5" in capsys.readouterr().err


def _words(text: str) -> str:
    return " ".join(text.split())


def test_nsys_args_extend_the_defaults_as_help_and_docs_say(capsys, monkeypatch) -> None:
    from dlprof_lite.launch.nsys import PROFILE_DEFAULTS, Nsys, profile_args

    monkeypatch.setenv("COLUMNS", "400")  # argparse folds help lines at hyphens

    page = Path(__file__).resolve().parents[1] / "docs" / "profiling.md"
    readme = _words(page.read_text("utf-8"))
    row = next(line for line in readme.split("| `") if line.startswith("--nsys-args"))
    assert main(["--help"]) == 0
    help_text = _words(capsys.readouterr().out)
    defaults = " ".join(PROFILE_DEFAULTS)
    for text in (row, help_text):
        assert "added to the defaults" in text and "replaces the default of the same name" in text
    assert defaults in readme and defaults in help_text
    # What the code does: a switch given replaces its default, the others stay.
    nsys = Nsys("/opt/nsys", (2022, 4), "2022.4")
    added = profile_args(nsys, Path("/o/p"), ["prog"], extra=["--cuda-graph-trace=node"])
    assert [*PROFILE_DEFAULTS, "--cuda-graph-trace=node"] == [
        a for a in added if a in PROFILE_DEFAULTS or a.startswith("--cuda-graph")
    ]
    replaced = profile_args(nsys, Path("/o/p"), ["prog"], extra=["-t", "cuda,nvtx"])
    assert PROFILE_DEFAULTS[0] not in replaced and set(PROFILE_DEFAULTS[1:]) <= set(replaced)
