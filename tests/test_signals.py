"""SIGTERM and SIGHUP in the run form do what SIGINT does (issue 13, item 1).

A job scheduler ends a job with SIGTERM; a closed terminal sends SIGHUP. These tests run the
real nsys on a real PyTorch training loop, send the signal to dlprof-lite alone in the middle
of the run, and check what a user and their cluster see: the exit code (143, 129), a report
folder written from what was captured (its iterations at least those the script had finished
when the signal came, by the script's own count), and nothing left behind — no process of
dlprof-lite's session, nsys's or the program's (read from /proc, zombies included), no
``dlprof-lite-*`` temporary folder, no hidden staging folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dlprof_lite.cli import main
from dlprof_lite.launch.signals import (
    Terminated,
    deferred_signals,
    members,
    signal_of,
    signals_as_interrupts,
)
from test_timeouts import fake_nsys

TRAIN = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn

    ready = sys.argv[1]
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    steps = 0
    for epoch in range(1000):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            steps += 1
            time.sleep(0.02)
            if steps >= 10:  # the script's own count, for the test to compare with
                tmp = ready + ".tmp"
                with open(tmp, "w") as fh:
                    json.dump({"steps": steps, "sid": os.getsid(0), "pid": os.getpid()}, fh)
                os.replace(tmp, ready)
    """
)


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, session) of a live process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), int(fields[3])


def _descendant_sessions(root: int) -> set[int]:
    """The sessions of ``root`` and every process descended from it, now."""
    parents: dict[int, int] = {}
    sessions: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            parents[int(entry)], sessions[int(entry)] = stat
    found = {sessions[root]} if root in sessions else set()
    for pid in parents:
        walk = pid
        while walk in parents and walk not in (0, 1):
            if walk == root:
                found.add(sessions[pid])
                break
            walk = parents[walk]
    return found


# The same loop in a script that swallows the interrupt and exits 0, as a program does when
# Ctrl-C lands inside a long native call it then returns from cleanly.
SWALLOWS = "import sys\ntry:\n" + textwrap.indent(TRAIN, "    ") + (
    "except KeyboardInterrupt:\n    sys.exit(0)\n"
)


@pytest.mark.parametrize(
    ("signum", "everyone", "script_text"),
    [(signal.SIGTERM, False, TRAIN), (signal.SIGHUP, False, TRAIN),
     (signal.SIGINT, False, TRAIN), (signal.SIGTERM, True, TRAIN),
     (signal.SIGINT, False, SWALLOWS), (signal.SIGTERM, False, SWALLOWS)],
    ids=["SIGTERM", "SIGHUP", "SIGINT", "SIGTERM-to-every-process", "SIGINT-swallowed",
         "SIGTERM-swallowed"],
)  # fmt: skip
def test_signal_mid_run_writes_report_and_leaves_nothing(
    nsys: str, tmp_path: Path, signum: signal.Signals, everyone: bool, script_text: str
) -> None:
    """``everyone``: as a scheduler ending a job does, every process of the run gets the
    signal at once (nsys, its helpers and the program too, not only dlprof-lite). The exit
    code is the signal's (130, 143, 129) whatever the program did with it."""
    pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    script = tmp_path / "train.py"
    script.write_text(script_text)
    ready = tmp_path / "ready.json"
    tmp = tmp_path / "tmp"  # dlprof-lite's temporary folders go here (TMPDIR), to be checked
    tmp.mkdir()
    out = tmp_path / "reports" / "train.dlprof"
    env = {**os.environ, "TMPDIR": str(tmp)}
    # A session of its own, as a batch job has: every process it starts is findable by it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlprof_lite", "--quiet", "-o", str(out), str(script),
         str(ready)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not ready.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.is_file(), f"the script never reached its 10th step: {proc.communicate()}"
        time.sleep(0.5)
        sessions = _descendant_sessions(proc.pid) | {proc.pid}
        program = json.loads(ready.read_text())
        sessions.add(program["sid"])
        assert len(sessions) >= 3  # ours, nsys's and the program's (nsys gives it its own)
        steps_at_signal = json.loads(ready.read_text())["steps"]
        if everyone:
            for pid in members(sessions):
                os.kill(pid, signum)
        else:
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, stderr
    if everyone and not out.exists():
        # nsys's own agent got SIGTERM too and nsys wrote nothing (nsys 2022.4 does so with
        # the CUDA trace's agent): one line says so and what to do; still nothing left.
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "nsys wrote no report after SIGTERM" in lines[0], stderr
        assert_nothing_left(sessions, tmp, out)
        return
    # The program's own KeyboardInterrupt traceback reaches stderr unchanged; none of ours.
    assert "dlprof_lite/cli.py" not in stderr and "dlprof_lite/launch" not in stderr
    if signum != signal.SIGINT:
        assert "Traceback" not in stderr
    assert f"report: {out}" in stdout, (stdout, stderr)  # stderr says why when it is not
    assert f"stopped by {signum.name}" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert isinstance(summary, dict)
    iterations = json.loads((out / "iterations.json").read_text())
    rows = iterations["rows"] if isinstance(iterations, dict) else iterations
    assert len(rows) >= steps_at_signal - 1  # the step in flight may be cut
    assert_nothing_left(sessions, tmp, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["train.dlprof"]


def assert_nothing_left(sessions: set[int], tmp: Path, out: Path) -> None:
    left: dict[int, str] = {}
    for _ in range(50):  # the last processes may still be on their way out
        left = members(sessions)
        if not left:
            break
        time.sleep(0.1)
    assert left == {}, f"processes left behind (pid: state): {left}"
    assert list(tmp.glob("dlprof-lite-*")) == []
    assert [p.name for p in out.parent.glob(".*")] == []


def test_signals_as_interrupts_raises_and_restores() -> None:
    """In-process: SIGTERM and SIGHUP become Terminated (a KeyboardInterrupt with the exit
    code the shell would give), and the previous handlers come back afterwards."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)
    for signum, code in ((signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        with pytest.raises(Terminated) as caught, signals_as_interrupts():
            os.kill(os.getpid(), signum)
            time.sleep(1)  # the handler runs at the next bytecode boundary
        assert isinstance(caught.value, KeyboardInterrupt)
        assert caught.value.exit_code == code and signal_of(caught.value) == signum
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)) == before
    assert signal_of(KeyboardInterrupt()) == signal.SIGINT


def test_a_signal_during_cleanup_waits_for_it() -> None:
    """The cleanup that stops every process of a run must not be cut short by one more
    signal: it is held back until the cleanup ends, then raised. A thread is running, as
    the output-draining ones are in a run (a per-thread signal mask would not hold there)."""
    threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
    finished = False
    with pytest.raises(Terminated), signals_as_interrupts():
        with deferred_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)  # no Terminated here
            finished = True
        time.sleep(1)
    assert finished


def test_signal_while_analysing_keeps_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """nsys has written the profile; SIGTERM comes while it is analysed (a real signal to
    this process, from inside the analysis step): the profile is kept under the final
    name, nothing is left in staging, the exit code is 143 and one line says where it is.
    The stand-in nsys writes the profile at once (the real one is tested above)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    nsys = fake_nsys(tools, version="ok", profile="run", export="garbage")
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")

    def analysis(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode boundary

    import dlprof_lite.pipeline

    monkeypatch.setattr(dlprof_lite.pipeline, "report_profiled", analysis)
    monkeypatch.chdir(tmp_path)
    before = signal.getsignal(signal.SIGTERM)
    code = main(["--quiet", "--annotate", "none", "--nsys", str(nsys), str(script)])
    assert code == 143
    assert signal.getsignal(signal.SIGTERM) == before
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("dlprof-lite: error:")]
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0], err
    final = tmp_path / "train.dlprof"
    assert str(final) in lines[0] and ".partial" not in lines[0]
    assert (final / "profile.nsys-rep").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "train.dlprof", "train.py"]
