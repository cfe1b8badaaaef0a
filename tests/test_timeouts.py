"""Every stage that waits on nsys is bounded (issue 13, item 2).

A hang is exactly what the real nsys cannot be made to do on purpose, so these tests put a
stand-in ``nsys`` shell script first in line (``--nsys``): it answers ``--version`` or not,
hangs in ``profile`` before starting the program, or hangs in ``export``, and records the
pid of itself and of the ``sleep`` it hangs in. The checks are what a user sees: exit code 3,
one ``dlprof-lite: error:`` line naming the stage that hung, no traceback, within the limit
given (measured against the test's own clock), and no process of the stand-in left running,
no staging folder, no temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlprof_lite.errors import InputError
from dlprof_lite.launch.nsys import STAGE_TIMEOUTS, TIMEOUT_ENV, stage_timeout

VERSION = "NVIDIA Nsight Systems version 2022.4.2.1-fake"


def fake_nsys(folder: Path, *, version: str, profile: str, export: str) -> Path:
    """A stand-in nsys. ``version``: ok|hang; ``profile``: hang (before the program starts)
    |run (writes a .nsys-rep, then runs the program)|linger (the same, then hangs); ``export``:
    hang|garbage (writes a file that is not SQLite). Each process appends its pid to PIDS."""
    pids = folder / "PIDS"
    hang = f'sleep 300 & echo $! >> "{pids}"; wait; exit 1'
    script = textwrap.dedent(
        f"""\
        #!/bin/sh
        echo $$ >> "{pids}"
        cmd="$1"; shift
        case "$cmd" in
        --version)
            {hang if version == "hang" else f'echo "{VERSION}"; exit 0'} ;;
        profile)
            {hang if profile == "hang" else ":"}
            out=""
            while [ $# -gt 0 ]; do
                case "$1" in
                --output=*) out="${{1#--output=}}"; shift ;;
                -*) shift ;;
                *) break ;;
                esac
            done
            printf 'not a report' > "$out.nsys-rep"
            "$@"
            code=$?
            {hang if profile == "linger" else ":"}
            exit $code ;;
        export)
            {hang if export == "hang" else ":"}
            for arg in "$@"; do
                case "$arg" in --output=*) printf 'garbage, not SQLite' > "${{arg#--output=}}" ;;
                esac
            done
            exit 0 ;;
        esac
        exit 2
        """
    )
    path = folder / "nsys"
    path.write_text(script)
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def run_cli(tmp_path: Path, nsys: Path, *extra: str, env: dict[str, str] | None = None,
            limit: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "--annotate", "none", "--nsys", str(nsys),
         *extra, str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=limit,
        env={**os.environ, "TMPDIR": str(tmp), **(env or {})},
    )  # fmt: skip
    return done, time.monotonic() - started


def still_alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running after a few seconds' grace."""
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def assert_nothing_left(tmp_path: Path) -> None:
    pids = [int(line) for line in (tmp_path / "PIDS").read_text().split()]
    assert len(pids) >= 2  # the stand-in and its sleep at least
    assert still_alive(pids) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert not (tmp_path / "train.dlprof").exists()


def one_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1 and lines[0].startswith("dlprof-lite: error: "), stderr
    return lines[0]


def test_version_probe_that_hangs_is_stopped_with_its_child(tmp_path: Path) -> None:
    nsys = fake_nsys(tmp_path, version="hang", profile="hang", export="hang")
    done, took = run_cli(tmp_path, nsys, "--nsys-timeout", "2")
    assert done.returncode == 3
    line = one_error(done.stderr)
    assert "version probe" in line and "2 s" in line and "--nsys-timeout" in line
    assert took < 60  # the 60 s default would have been waited out otherwise
    assert_nothing_left(tmp_path)


def test_profile_that_never_starts_the_program_is_stopped(tmp_path: Path) -> None:
    """The stand-in answers --version, then hangs in profile before running anything; the
    limit comes from the environment variable this time."""
    nsys = fake_nsys(tmp_path, version="ok", profile="hang", export="hang")
    done, took = run_cli(tmp_path, nsys, env={TIMEOUT_ENV: "3"})
    assert done.returncode == 3
    line = one_error(done.stderr)
    assert "profile start-up" in line and "3 s" in line
    assert "trained" not in done.stdout
    assert took < 60
    assert_nothing_left(tmp_path)


def test_export_that_hangs_is_stopped(tmp_path: Path) -> None:
    nsys = fake_nsys(tmp_path, version="ok", profile="run", export="hang")
    done, took = run_cli(tmp_path, nsys, "--nsys-timeout", "3")
    assert done.returncode == 3
    line = one_error(done.stderr.replace("trained\n", ""))
    assert "export" in line and "3 s" in line
    assert "trained" in done.stdout + done.stderr  # the program itself did run
    assert took < 60
    assert_nothing_left(tmp_path)


def test_stage_timeout_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert stage_timeout("export") == STAGE_TIMEOUTS["export"]
    assert stage_timeout("version probe") == STAGE_TIMEOUTS["version probe"]
    assert stage_timeout("export", 7) == 7.0
    monkeypatch.setenv(TIMEOUT_ENV, "12.5")
    assert stage_timeout("profile start-up") == 12.5
    assert stage_timeout("profile start-up", 3) == 3.0  # the flag wins over the variable
    for bad in ("soon", "0", "-1", "nan", "inf"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(InputError, match=TIMEOUT_ENV):
            stage_timeout("export")


@pytest.mark.parametrize("value", ["0", "-5", "x", "inf"])
def test_bad_flag_value_is_a_usage_error(tmp_path: Path, value: str) -> None:
    nsys = fake_nsys(tmp_path, version="ok", profile="hang", export="hang")
    done, _ = run_cli(tmp_path, nsys, f"--nsys-timeout={value}")
    assert done.returncode == 2 and "--nsys-timeout" in done.stderr
    assert "Traceback" not in done.stderr


def test_analyze_export_that_hangs_is_stopped(tmp_path: Path) -> None:
    """``analyze run.nsys-rep`` exports with the nsys on PATH; DLPROF_NSYS_TIMEOUT bounds it."""
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_nsys(tools, version="ok", profile="hang", export="hang")
    (tmp_path / "tmp").mkdir()
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"a report")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "analyze", str(report)], cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
             "TMPDIR": str(tmp_path / "tmp"), TIMEOUT_ENV: "2"},
    )  # fmt: skip
    assert done.returncode == 3
    line = one_error(done.stderr)
    assert "export" in line and "2 s" in line
    assert time.monotonic() - started < 60
    pids = [int(line) for line in (tools / "PIDS").read_text().split()]
    assert len(pids) >= 3 and still_alive(pids) == []  # --version, export, its sleep
    assert report.read_bytes() == b"a report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "run.nsys-rep", "tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_nsys_that_lingers_after_the_program_is_stopped(tmp_path: Path) -> None:
    """The finalize stage (nsys writing its report after the program ended) is bounded by
    --nsys-timeout too: a warning names it, nsys is stopped, and the run goes on with what
    was written (here a garbage export, so one error line naming the final folder)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    nsys = fake_nsys(tools, version="ok", profile="linger", export="garbage")
    done, took = run_cli(tmp_path, nsys, "--nsys-timeout", "2")
    assert "Traceback" not in done.stderr
    assert "nsys hung in the profile finalize stage" in done.stderr
    assert "still running 2 s after the program ended" in done.stderr
    assert took < 60
    assert done.returncode == 2
    pids = [int(line) for line in (tools / "PIDS").read_text().split()]
    assert still_alive(pids) == []
    assert (tmp_path / "train.dlprof" / "profile.nsys-rep").is_file()
