"""Leftovers and paths (issue 13, item 9).

- Staging leftovers of exactly our naming (``.NAME.<token>.partial``/``.old`` folders,
  ``.NAME.<token>.tmp`` files), old and not locked by a live run, are swept by the next
  report written into the same parent; look-alikes, fresh ones and locked ones stay.
- ``-- python -m ../../tmp/x`` writes its report inside the current folder.
- An nsys that writes a garbage export gets an error naming the report's final folder, not
  the staging folder that was renamed into it.

The last two run the command line with a stand-in ``nsys`` (from test_timeouts): a garbage
export is what the real nsys does not produce on demand.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlprof_lite.cli_run import program_name as _program_name
from dlprof_lite.render.output import staged_folder
from dlprof_lite.staging import STALE_AFTER_S, sweep_stale
from test_timeouts import fake_nsys

TOKEN = "0123456789"
OLD = time.time() - STALE_AFTER_S - 60


def aged(path: Path, mtime: float = OLD) -> Path:
    os.utime(path, (mtime, mtime))
    return path


def folder(path: Path, *, age: float = OLD) -> Path:
    path.mkdir()
    (path / "profile.nsys-rep").write_bytes(b"half")
    return aged(path, age)


def leftovers(parent: Path) -> tuple[list[Path], list[Path]]:
    """(ours and stale: to be swept, everything else: to be kept)."""
    (parent / f".summary.json.{TOKEN}.tmp").write_text("{")
    ours = [folder(parent / f".train.dlprof.{TOKEN}.partial"),
            folder(parent / ".train.dlprof-2.abcdef0123.old"),
            aged(parent / f".summary.json.{TOKEN}.tmp")]  # fmt: skip
    kept = [
        folder(parent / f".train.dlprof.{TOKEN}1.partial"),  # 11 digits: not our token
        folder(parent / ".train.dlprof.partial"),  # no token
        folder(parent / f"train.dlprof.{TOKEN}.partial"),  # not hidden
        folder(parent / f".train.dlprof.{TOKEN.upper()}ABCDEF.partial"),  # not hex-10
        folder(parent / f".train.dlprof.{TOKEN}.partial.bak"),  # another suffix
        folder(parent / f".notes.{TOKEN}.tmp"),  # a folder where ours is a file
        folder(parent / "train.dlprof"),  # a finished report
        folder(parent / f".fresh.dlprof.{TOKEN}.partial", age=time.time()),  # too recent
    ]
    plain = parent / f".data.{TOKEN}.partial"  # a file where ours is a folder
    plain.write_text("user data")
    kept.append(aged(plain))
    outside = parent / "elsewhere"
    outside.mkdir()
    target = folder(outside / f".x.{TOKEN}.partial")
    link = parent / f".link.{TOKEN}.partial"  # a symlink named like ours: never followed
    link.symlink_to(target, target_is_directory=True)
    kept += [target, link]
    return ours, kept


def test_sweep_removes_only_our_stale_leftovers(tmp_path: Path) -> None:
    ours, kept = leftovers(tmp_path)
    swept = sweep_stale(tmp_path)
    assert sorted(swept) == sorted(ours)
    assert [p for p in ours if os.path.lexists(p)] == []
    assert [p for p in kept if not os.path.lexists(p)] == []
    assert (tmp_path / "elsewhere" / f".x.{TOKEN}.partial" / "profile.nsys-rep").is_file()
    assert (tmp_path / f".data.{TOKEN}.partial").read_text() == "user data"


def test_sweep_keeps_a_folder_a_live_run_holds(tmp_path: Path) -> None:
    """A long profiling run writes nothing into its staging folder for hours: the age alone
    cannot tell it from a killed run's. Its lock can."""
    target = tmp_path / "long.dlprof"
    with staged_folder(target) as stage:
        aged(stage)
        assert sweep_stale(tmp_path) == [] and stage.is_dir()
        (stage / "summary.json").write_text("{}")
    assert (target / "summary.json").is_file()
    # A killed run's lock is gone with it; a lock held in another process blocks the sweep.
    stale = folder(tmp_path / f".other.dlprof.{TOKEN}.partial")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], "
         "os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); "
         "time.sleep(60)", str(stale)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        aged(stale)
        assert sweep_stale(tmp_path) == [] and stale.is_dir()
    finally:
        holder.kill()
        holder.wait()
    assert sweep_stale(tmp_path) == [stale]


def test_the_next_report_into_the_parent_sweeps(tmp_path: Path) -> None:
    ours, kept = leftovers(tmp_path)
    with staged_folder(tmp_path / "next.dlprof") as stage:
        (stage / "summary.json").write_text("{}")
    assert [p for p in ours if os.path.lexists(p)] == []
    assert [p for p in kept if not os.path.lexists(p)] == []
    assert (tmp_path / "next.dlprof" / "summary.json").is_file()


def test_lock_is_exclusive_while_staging(tmp_path: Path) -> None:
    with staged_folder(tmp_path / "r.dlprof") as stage:
        fd = os.open(stage, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


@pytest.mark.parametrize(
    ("cmd", "name"),
    [
        (["python", "-m", "../../tmp/x"], "x"),
        (["python3", "-m", "pkg.train"], "train"),
        (["python", "-m", "/abs/path/mod"], "mod"),
        (["python", "-m", ".."], "run"),
        (["python", "-m", "a b;c"], "a_b_c"),
        (["torchrun", "--nproc_per_node=2", "-m", "../../evil"], "evil"),
    ],
)
def test_module_names_stay_plain(cmd: list[str], name: str) -> None:
    assert _program_name(cmd) == name
    assert "/" not in name and name not in (".", "..")


def run_cli(cwd: Path, nsys: Path, *program: str) -> subprocess.CompletedProcess[str]:
    tmp = cwd / "tmpdir"
    tmp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "--annotate", "none", "--nsys", str(nsys),
         "--nsys-timeout", "60", *program],
        cwd=cwd, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip


def error_lines(stderr: str, *, program_failed: bool = False) -> list[str]:
    if not program_failed:  # a program that fails prints its own traceback: not ours
        assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("dlprof-lite: error:")]


def test_garbage_export_error_names_the_final_folder(tmp_path: Path) -> None:
    nsys = fake_nsys(tmp_path, version="ok", profile="run", export="garbage")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('trained')\n")
    stale = folder(work / f".train.dlprof.{TOKEN}.partial")  # a killed run's
    done = run_cli(work, nsys, "train.py")
    assert done.returncode == 2, done.stderr
    lines = error_lines(done.stderr)
    assert len(lines) == 1
    final = work / "train.dlprof"
    assert str(final / "profile.sqlite") in lines[0]
    assert ".partial" not in lines[0]
    assert (final / "profile.sqlite").is_file()  # the profile is kept where the line says
    assert not stale.exists()
    assert sorted(p.name for p in work.iterdir()) == ["tmpdir", "train.dlprof", "train.py"]


def test_module_path_report_stays_in_the_current_folder(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    nsys = fake_nsys(tools, version="ok", profile="run", export="garbage")
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    before = set(tmp_path.rglob("*"))
    done = run_cli(work, nsys, "--", "python", "-m", "../../x")
    assert done.returncode != 0
    made = {p for p in set(tmp_path.rglob("*")) - before
            if not {"tmpdir", "bin"} & set(p.relative_to(tmp_path).parts)}  # fmt: skip
    assert made and all(p.is_relative_to(work / "x.dlprof") for p in made), made
    lines = error_lines(done.stderr, program_failed=True)
    assert any(str(work / "x.dlprof") in line for line in lines), done.stderr
