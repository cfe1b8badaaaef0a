"""Work done in a forked copy (forked.py), and the report's host analyses done there.

A fork is decided by the process's threads, so the unit cases run in a fresh Python (a
subprocess) where none runs yet. Oracles: the process id that did the work (the copy's is
not the parent's); the same work done without a fork; for the report, every file of the
same export analysed with ``DLPROF_LITE_FORK=0`` (no fork: the host analyses in the
analysing process, as before), byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT
from dlprof_lite import forked
from dlprof_lite.report import build
from make_profile import make_profile
from terminal import run_on_a_terminal

# argv[1] names the case; prints what happened as JSON.
CASES = """
import json, os, sys, time
from dlprof_lite import forked
forked.allow()
case, parent = sys.argv[1], os.getpid()
out = {"parent": parent, "safe": forked.safe_to_fork()}
if case == "value":
    out["pid"] = forked.Forked(os.getpid, fork=True).result()
elif case == "no-fork":
    out["pid"] = forked.Forked(os.getpid, fork=False).result()
elif case == "fails-in-copy":
    def work():
        if os.getpid() != parent:
            raise RuntimeError("only in the copy")
        return "done here"
    out["value"] = forked.Forked(work, fork=True).result()
elif case == "fails-everywhere":
    try:
        forked.Forked(lambda: 1 // 0, fork=True).result()
    except ZeroDivisionError as err:
        out["error"] = str(err)
elif case == "paused-thread":
    from dlprof_lite.progress import _Redraw
    import threading
    with _Redraw(lambda: None) as redraw, forked.paused_for_forks(redraw.paused):
        out["safe_beside_it"] = forked.safe_to_fork()
        out["pid"] = forked.Forked(os.getpid, fork=True).result()
        out["threads_after"] = threading.active_count()
elif case == "left-early":
    try:
        with forked.Forked(lambda: time.sleep(60), fork=True) as helper:
            out["copy"] = helper._pid
            raise KeyError("left")
    except KeyError:
        pass
    try:
        os.kill(out["copy"], 0)
        out["copy_alive"] = True
    except ProcessLookupError:
        out["copy_alive"] = False
print(json.dumps(out))
"""


def case(name: str, **env: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CASES, name], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_work_runs_in_a_copy_and_its_value_comes_back() -> None:
    out = case("value")
    assert out["safe"] is True
    assert isinstance(out["pid"], int) and out["pid"] != out["parent"]
    here = case("no-fork")  # fork=False: the work is done in the calling process
    assert here["pid"] == here["parent"]


def test_a_thread_of_ours_stops_for_the_fork_and_runs_again() -> None:
    out = case("paused-thread")
    assert out["safe_beside_it"] is False  # running, it would forbid the fork ...
    assert isinstance(out["pid"], int) and out["pid"] != out["parent"]  # ... paused, it did not
    assert out["threads_after"] == 2  # and it runs again


def test_a_copy_that_fails_leaves_the_work_to_the_parent() -> None:
    assert case("fails-in-copy")["value"] == "done here"
    assert case("fails-everywhere")["error"] == "integer division or modulo by zero"


def test_leaving_the_block_early_ends_the_copy() -> None:
    out = case("left-early")
    assert isinstance(out["copy"], int)
    assert out["copy_alive"] is False


def test_forbidden_by_the_environment() -> None:
    out = case("value", DLPROF_LITE_FORK="0")
    assert out["safe"] is False


def test_not_allowed_or_with_a_python_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "_allowed", False)
    assert not forked.safe_to_fork()
    monkeypatch.setattr(forked, "_allowed", True)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not forked.safe_to_fork()
    finally:
        stop.set()
        thread.join()


@pytest.fixture(scope="module")
def large_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export with enough ops for the report to fork (forked.FORK_MIN_OPS)."""
    path = tmp_path_factory.mktemp("forked") / "large.sqlite"
    truth = make_profile(path, iterations=1300, layers=8, kernels_per_layer=5)
    assert truth.totals["kernels"] >= forked.FORK_MIN_OPS
    return path


# The command line, with a spy that tells on stderr each copy forked.
COMMAND = """
import sys
from dlprof_lite import forked
real = forked.Forked._fork
def spy(self):
    real(self)
    if self._pid is not None:
        print("forked a copy", file=sys.stderr)
forked.Forked._fork = spy
from dlprof_lite.cli import main
sys.exit(main(sys.argv[1:]))
"""


def analyze(export: Path, out: Path, fork: str, *options: str) -> bool:
    """Whether the command line forked a copy, analysing ``export`` into ``out``."""
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, "analyze", str(export), "-o", str(out), "--no-db",
         "--formats", "csv,json,html", *options],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "DLPROF_LITE_FORK": fork},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return "forked a copy" in done.stderr


def test_report_with_the_host_analyses_forked_is_the_same(
    large_export: Path, tmp_path: Path
) -> None:
    assert analyze(large_export, tmp_path / "forked", "1", "-j", "2")
    assert not analyze(large_export, tmp_path / "here", "0", "-j", "2")
    assert not analyze(large_export, tmp_path / "one", "1", "-j", "1")  # one process asked
    assert not analyze(large_export, tmp_path / "default", "1")  # one process by default
    files = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*")
                   if p.is_file())  # fmt: skip
    assert Path("critical.csv") in files and Path("idle.csv") in files
    for name in files:
        there, here = tmp_path / "forked" / name, tmp_path / "here" / name
        assert there.read_bytes() == here.read_bytes(), name


def test_the_progress_bar_stops_for_the_fork(large_export: Path, tmp_path: Path) -> None:
    """On a terminal the bar's redraw thread runs; it stops while the process forks (a
    fork with a Python thread running is refused), then draws again."""
    code, shown = run_on_a_terminal(
        ["analyze", str(large_export), "-o", str(tmp_path / "out"), "--no-db", "-j", "2"],
        code=COMMAND,
    )  # fmt: skip
    assert code == 0, shown
    assert "forked a copy" in shown
    assert "writing reports" in shown  # the bar went on after the fork


def test_a_small_export_is_analysed_without_a_fork(tmp_path: Path) -> None:
    small = tmp_path / "small.sqlite"
    truth = make_profile(small, iterations=20, layers=4, kernels_per_layer=2)
    assert truth.totals["kernels"] < forked.FORK_MIN_OPS
    assert not analyze(small, tmp_path / "out", "1", "-j", "2")


def test_the_report_forks_where_it_may(
    large_export: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process too, when allowed and it holds no other Python thread: the host
    analyses come from a copy (its pid), and the report equals the one built without."""
    from dlprof_lite.ingest.load import load

    profile = load(large_export)
    monkeypatch.setattr(forked, "_allowed", True)
    if not forked.safe_to_fork():
        pytest.skip("this test process runs threads a fork must not copy")
    pids: list[int | None] = []
    real = forked.Forked._fork

    def spy(self: forked.Forked[object]) -> None:
        real(self)
        pids.append(self._pid)

    monkeypatch.setattr(forked.Forked, "_fork", spy)
    there = build.build_report(profile, parallel=True)
    assert pids and pids[0] is not None and pids[0] != os.getpid()
    here = build.build_report(profile)
    for name in ("idle", "critical", "critical_path", "iterations", "layers"):
        assert getattr(there, name).equals(getattr(here, name)), name
    assert json.dumps(there.summary.row(), default=str) == json.dumps(
        here.summary.row(), default=str
    )
