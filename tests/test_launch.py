"""The launcher: command lines, nsys discovery and errors, and real ``nsys profile`` runs.

The unit tests need neither torch nor nsys. The ``nsys`` tests run the real nsys (2022.4 in
CI) on short programs: the examples with few steps, scripts that fail, a broken nsys install
that leaves only a ``.qdstrm``, and an nsys that hangs after the program ends.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import builders
import dlprof_lite
from dlprof_lite.cli import main
from dlprof_lite.errors import InputError, NsysError
from dlprof_lite.launch import export_sqlite, find_nsys, profile_program
from dlprof_lite.launch.nsys import (
    KNOWN_IMPORTERS,
    Nsys,
    import_failure,
    merge_switches,
    profile_args,
)
from dlprof_lite.launch.run import (
    BOOTSTRAP,
    _no_ranges_cause,
    program_command,
)
from dlprof_lite.rules.names import DOMAIN

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "examples" / "lenet.py"
RESNET = ROOT / "examples" / "resnet.py"
FAKE = Nsys("/opt/nsys", (2022, 4, 2, 1), "NVIDIA Nsight Systems version 2022.4.2.1")
LENET_LAYERS = ["conv1", "relu1", "pool1", "conv2", "pool2", "tanh", "flatten", "affine1",
                "relu2", "affine2", "softmax"]  # fmt: skip


def count_annotation_ranges(sqlite_path: Path) -> int:
    """How many ranges of our domain an export holds, read straight from its tables
    (an independent check of what the annotation layer wrote)."""
    query = (
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND domainId IN "
        "(SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?)"
    )
    try:
        return int(builders.query(sqlite_path, query, (DOMAIN,))[0][0])
    except sqlite3.OperationalError:  # no NVTX_EVENTS table at all
        return 0


# --- command lines ---------------------------------------------------------------------


def test_program_command_forms(tmp_path: Path) -> None:
    status = tmp_path / "s.json"
    script = tmp_path / "train.py"
    script.write_text("")
    argv, warnings = program_command([str(script), "--lr", "1"], annotate="modules", depth=2,
                                     status_file=status)  # fmt: skip
    assert argv == [sys.executable, "-m", BOOTSTRAP, "--annotate", "modules", "--depth", "2",
                    "--status-file", str(status), str(script), "--lr", "1"]  # fmt: skip
    assert warnings == []
    argv, _ = program_command(["python3", "-u", "-X", "dev", "-m", "pkg.train", "-m", "x"],
                              annotate="phases", depth=None, status_file=status)  # fmt: skip
    assert argv == [sys.executable, "-u", "-X", "dev", "-m", BOOTSTRAP, "--annotate", "phases",
                    "--status-file", str(status), "-m", "pkg.train", "-m", "x"]  # fmt: skip
    argv, _ = program_command(["/opt/py/bin/python3.12", str(script)], annotate="none",
                              depth=None, status_file=status)  # fmt: skip
    assert argv[0] == "/opt/py/bin/python3.12" and argv[-1] == str(script)
    binary = tmp_path / "a.out"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    argv, warnings = program_command([str(binary), "x"], annotate="modules", depth=None,
                                     status_file=status)  # fmt: skip
    assert argv == [str(binary), "x"] and "not a Python program" in warnings[0]
    for bad in ([], [str(tmp_path / "missing.py")], ["python"], ["python", "-"],
                ["no-such-command-here"]):  # fmt: skip
        with pytest.raises(InputError):
            program_command(bad, annotate="modules", depth=None, status_file=status)


def test_nsys_args_replace_defaults() -> None:
    args = profile_args(FAKE, Path("/o/p"), ["prog"], delay=2, duration=1.5,
                        extra=["-t", "cuda,nvtx", "--sample=cpu"])  # fmt: skip
    assert args[:2] == ["/opt/nsys", "profile"] and args[-1] == "prog"
    assert "--trace=cuda,nvtx,osrt,cublas,cudnn" not in args
    assert "--sample=none" not in args and "--cpuctxsw=none" in args
    assert args[-4:-1] == ["-t", "cuda,nvtx", "--sample=cpu"]
    assert "--delay=2" in args and "--duration=1.5" in args and "--output=/o/p" in args
    assert merge_switches(["--output", "a", "--x=1"], ["-o", "b"]) == ["--x=1", "-o", "b"]
    with pytest.raises(InputError):
        profile_args(FAKE, Path("p"), ["prog"], duration=0)
    with pytest.raises(InputError, match="may not set --output"):
        profile_args(FAKE, Path("p"), ["prog"], extra=["-o", "elsewhere"])


def test_no_ranges_warning_names_the_cause() -> None:
    status = {"nvtx_version": "0.2.14"}
    assert "nvtx<=0.2.11" in _no_ranges_cause(status, [], FAKE)
    assert "without nvtx" in _no_ranges_cause(status, ["--trace=cuda,osrt"], FAKE)
    newer = Nsys("nsys", (2024, 5), "2024.5")
    assert "nvtx<=0.2.11" not in _no_ranges_cause(status, [], newer)


def test_missing_nsys_is_a_clean_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NsysError, match=r"not on PATH.*install"):
        find_nsys()
    with pytest.raises(NsysError, match="not on PATH"):
        profile_program([str(LENET)], out_dir=tmp_path / "out")
    with pytest.raises(NsysError, match="is not an executable"):
        find_nsys(tmp_path / "nsys")


def test_cli_without_nsys_prints_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", str(LENET)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlprof-lite: error:"), done.stderr
    assert "install" in lines[0] and "Traceback" not in done.stderr


def test_export_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        export_sqlite(tmp_path / "none.nsys-rep", tmp_path / "o.sqlite", nsys=FAKE)
    other = tmp_path / "x.txt"
    other.write_text("x")
    with pytest.raises(InputError, match="not an nsys report"):
        export_sqlite(other, tmp_path / "o.sqlite", nsys=FAKE)


# --- real nsys runs --------------------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.nsys
def test_profile_lenet_and_export_again(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    run = profile_program([str(LENET), "--steps", "3", "--batch-size", "8"],
                          out_dir=tmp_path / "out", nsys=nsys, annotate="modules-all",
                          echo=False)  # fmt: skip  (every layer's ranges, every step)
    assert run.exit_code == 0 and run.warnings == ()
    assert run.report_path == tmp_path / "out" / "profile.nsys-rep"
    assert count_annotation_ranges(run.sqlite_path) > 3 * 2 * 13
    before = digest(run.report_path)
    again = export_sqlite(run.report_path, tmp_path / "again" / "x.sqlite", nsys=nsys)
    assert digest(run.report_path) == before
    assert count_annotation_ranges(again) == count_annotation_ranges(run.sqlite_path)
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["x.sqlite"]


@pytest.mark.nsys
def test_failing_program_keeps_exit_code_and_report(nsys: str, tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        from dlprof_lite import annotate
        with annotate.range("before_failure"):
            pass
        if sys.argv[1] == "raise":
            raise RuntimeError("the script failed")
        sys.exit(int(sys.argv[1]))
    """)
    )
    for arg, code in (("raise", 1), ("7", 7)):
        run = profile_program([sys.executable, str(script), arg], out_dir=tmp_path / arg,
                              nsys=nsys, annotate="phases", echo=False)  # fmt: skip
        assert run.exit_code == code
        assert count_annotation_ranges(run.sqlite_path) == 1
        assert "never imported torch" in " ".join(run.warnings)


@pytest.mark.nsys
def test_annotate_none_and_trace_without_nvtx(
    nsys: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    cmd = [str(LENET), "--steps", "2", "--batch-size", "4"]
    run = profile_program(cmd, out_dir=tmp_path / "none", nsys=nsys, annotate="none",
                          echo=False)  # fmt: skip
    assert run.exit_code == 0 and run.warnings == () and run.no_ranges_hint is None
    ranges = dlprof_lite.load(run.sqlite_path).ranges
    assert not (ranges["domain"].astype(str) == DOMAIN).any()
    # nvtx left out of --trace: the CLI names that as the reason no range arrived.
    out = tmp_path / "osrt"
    argv = ["--nsys", nsys, "--nsys-args=--trace=osrt", "-o", str(out), "--quiet", *cmd]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "no dlprof-lite NVTX ranges" in err and "--trace" in err


@pytest.mark.nsys
def test_newer_report_is_named_as_such(nsys: str, corpus_dir: Path, tmp_path: Path) -> None:
    newer = corpus_dir / "raw" / "NVIDIA__Fuser__report1.nsys-rep"
    if not newer.is_file():
        pytest.skip(f"{newer} is not in the corpus")
    if find_nsys(nsys).version >= (2025,):
        pytest.skip("this nsys can export 2025 reports")
    with pytest.raises(NsysError, match="newer Nsight Systems than the local nsys"):
        export_sqlite(newer, tmp_path / "fuser.sqlite", nsys=nsys)
    assert list(tmp_path.iterdir()) == []


def broken_install(nsys: str, root: Path) -> Path:
    """An nsys with its target folder but no importer beside it, as Debian's split leaves."""
    real = Path(os.path.realpath(nsys))
    target = root / real.parent.name
    target.mkdir(parents=True)
    for item in real.parent.iterdir():
        if item.name != real.name:
            (target / item.name).symlink_to(item)
    shutil.copy2(real, target / real.name)  # a copy: nsys finds its folder from its own path
    return target / real.name


@pytest.mark.nsys
def test_lone_qdstrm_is_imported(nsys: str, tmp_path: Path) -> None:
    if not any(p.is_file() for p in KNOWN_IMPORTERS):
        pytest.skip("no QdstrmImporter in Debian's place to recover with")
    fake = broken_install(nsys, tmp_path / "nsys")
    script = tmp_path / "short.py"
    script.write_text("from dlprof_lite import annotate\nwith annotate.range('r'):\n    pass\n")
    run = profile_program([str(script)], out_dir=tmp_path / "out", nsys=fake, echo=False)
    assert (tmp_path / "out" / "profile.qdstrm").is_file()
    assert run.report_path.name == "profile.nsys-rep" and run.report_path.is_file()
    assert count_annotation_ranges(run.sqlite_path) == 1


IMPORTER_OUTPUT = Path(__file__).parent / "fixtures" / "importer"
IMPORTER = Nsys("/usr/bin/nsys", (2022, 4, 2, 1), "2022.4.2.1")


def test_import_failure_names_a_cuda_newer_than_the_importer() -> None:
    """QdstrmImporter 2022.4's real output on a CUDA 13 program's trace (an H200 run, see
    docs/gpu-validation.md): one line that says why, not the importer's boilerplate."""
    output = (IMPORTER_OUTPUT / "unknown_api.txt").read_text(encoding="utf-8")
    line = import_failure(Path("run.qdstrm"), IMPORTER, output)
    assert "\n" not in line and "Diagnostics Summary" not in line
    assert "(driver API 719)" in line and "newer CUDA" in line and "2022.4" in line


def test_import_failure_names_the_release_that_wrote_the_qdstrm() -> None:
    output = (IMPORTER_OUTPUT / "other_release.txt").read_text(encoding="utf-8")
    line = import_failure(Path("run.qdstrm"), IMPORTER, output)
    assert "written by Nsight Systems 2025.3.1.0" in line and "2022.4" in line


def test_import_failure_otherwise_gives_the_last_line() -> None:
    line = import_failure(Path("run.qdstrm"), IMPORTER, "Processing\nError: disk full\n")
    assert line == "importing run.qdstrm failed: Error: disk full"


@pytest.mark.nsys
def test_hung_nsys_is_stopped(nsys: str, tmp_path: Path) -> None:
    wrapper = tmp_path / "nsys"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = profile ]; then "{nsys}" "$@"; sleep 300\n'
                       f'else exec "{nsys}" "$@"; fi\n')  # fmt: skip
    wrapper.chmod(0o755)
    script = tmp_path / "quick.py"
    script.write_text("print('done')\n")
    started = time.monotonic()
    run = profile_program([str(script)], out_dir=tmp_path / "out", nsys=wrapper, echo=False,
                          annotate="none", finalize_timeout=3)  # fmt: skip
    assert time.monotonic() - started < 120
    assert run.exit_code == 0 and run.sqlite_path.is_file()
    assert any("still running 3 s after the program ended" in w for w in run.warnings)


@pytest.mark.nsys
@pytest.mark.slow
def test_cli_profiles_lenet(nsys: str, tmp_path: Path) -> None:
    """The acceptance run: ``dlprof-lite examples/lenet.py --steps 20``."""
    pytest.importorskip("torch")
    out = tmp_path / "lenet.dlprof"
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "-o", str(out), str(LENET), "--steps", "20"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "layers.csv", newline="") as table:
        layers = {row["layer"]: row for row in csv.DictReader(table)}
    for layer in [*LENET_LAYERS, "model"]:
        if layers[layer]["folded_call_ns"]:  # too short to time: folded into the model
            assert layers[layer]["parent"] == "model" and not layers[layer]["calls"], layer
            continue
        assert int(layers[layer]["forward_wall_ns"]) > 0, layer
        assert int(layers[layer]["backward_wall_ns"]) > 0, layer
    with open(out / "iterations.csv", newline="") as table:
        iterations = list(csv.DictReader(table))
    assert len(iterations) == 20
    phases = ("data", "forward", "backward", "optimizer")
    spans = builders.query(
        out / "profile.sqlite",
        "SELECT coalesce(e.text, s.value), e.start, e.end FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 60",
    )
    steps = [(s, e) for name, s, e in spans if name == "iteration"]
    assert len(steps) == 20
    covered = sum(e - s for name, s, e in spans if name in phases)
    total = sum(e - s for s, e in steps)
    assert abs(covered - total) <= 0.05 * total


@pytest.mark.nsys
def test_duration_stops_the_program_as_success(nsys: str, tmp_path: Path) -> None:
    script = tmp_path / "long.py"
    script.write_text("import time\nfor _ in range(600):\n    time.sleep(0.1)\n")
    started = time.monotonic()
    run = profile_program([str(script)], out_dir=tmp_path / "out", nsys=nsys, echo=False,
                          duration=2)  # fmt: skip
    assert time.monotonic() - started < 50
    assert run.exit_code == 0
    assert any("--duration 2 s" in w for w in run.warnings)
