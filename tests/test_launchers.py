"""Distributed launchers and the separation of the program's output from nsys's messages.

Command lines are checked against torch's own torchrun parser (where torch is installed):
our split of a torchrun command must find the same training script and arguments. The
``nsys`` tests run the real torchrun on CPU (gloo, two workers, a tiny DDP model) under the
real nsys and check the export itself: ranges from both worker pids, one ``iteration`` per
optimizer step of each rank (the script's own step count), the ``process`` fact of each rank,
and the exit code that torchrun alone gives for the same command.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builders import query
from dlprof_lite.annotate import bootstrap
from dlprof_lite.errors import InputError
from dlprof_lite.launch.launchers import (
    BOOTSTRAP,
    TORCHRUN_FLAGS,
    check_unsupported,
    split_torchrun,
)
from dlprof_lite.launch.nsys import reason_line
from dlprof_lite.launch.run import program_command
from dlprof_lite.launch.supervise import Tee, nsys_notices
from dlprof_lite.rules.facts import parse_fact
from dlprof_lite.rules.names import DOMAIN
from terminal import run_on_a_terminal

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "tests" / "launch_scripts" / "ddp_train.py"
SCRIPT = str(DDP)
BOOT = ["--annotate", "modules", "--status-file", "/s/status-{rank}.json"]

# Real command shapes: (command, the training program torchrun runs).
TORCHRUN_FORMS = [
    (["torchrun", "--nproc_per_node=2", SCRIPT, "--lr", "1"], [SCRIPT, "--lr", "1"]),
    (["torchrun", "--standalone", "--nproc-per-node", "2", SCRIPT], [SCRIPT]),
    (["torchrun", "--nnodes", "1:2", "--rdzv-backend=c10d", "--rdzv_endpoint", "h:29400",
      "--max-restarts", "0", "-r", "3", "--tee=3", SCRIPT, "-m", "x"], [SCRIPT, "-m", "x"]),
    (["torchrun", "--standalone", "-m", "pkg.train", "--epochs", "1"],
     ["pkg.train", "--epochs", "1"]),
    (["torchrun", "--no-python", "python3", SCRIPT], ["python3", SCRIPT]),
    (["torchrun", "--run-path", "--nproc_per_node", "2", SCRIPT, "a"], [SCRIPT, "a"]),
    (["torchrun", "--nproc_per_node=2", "--", SCRIPT, "--x"], [SCRIPT, "--x"]),
]  # fmt: skip


@pytest.mark.parametrize(("cmd", "program"), TORCHRUN_FORMS)
def test_torchrun_split_matches_torchs_parser(cmd: list[str], program: list[str]) -> None:
    parts = split_torchrun(cmd)
    assert parts is not None and parts.program == program
    run = pytest.importorskip("torch.distributed.run")
    args = run.get_args_parser().parse_args(cmd[1:])  # the oracle: torchrun's own parser
    assert [args.training_script, *args.training_script_args] == program


def test_torchrun_flags_are_torchs_flags() -> None:
    run = pytest.importorskip("torch.distributed.run")
    for action in run.get_args_parser()._actions:
        for option in action.option_strings:
            assert (option in TORCHRUN_FLAGS) == (action.nargs == 0), option


def test_torchrun_commands_start_workers_through_the_bootstrap(tmp_path: Path) -> None:
    status = "/s/status-{rank}.json"
    argv, warnings = program_command(TORCHRUN_FORMS[0][0], annotate="modules", depth=None,
                                     status_file=status)  # fmt: skip
    assert argv == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                    "-m", BOOTSTRAP, *BOOT, SCRIPT, "--lr", "1"]  # fmt: skip
    assert warnings == []
    argv, _ = program_command(TORCHRUN_FORMS[3][0], annotate="modules", depth=None,
                              status_file=status)  # fmt: skip
    assert argv[3:] == ["--standalone", "-m", BOOTSTRAP, *BOOT, "-m", "pkg.train", "--epochs",
                        "1"]  # fmt: skip
    argv, _ = program_command(TORCHRUN_FORMS[4][0], annotate="modules", depth=None,
                              status_file=status)  # fmt: skip
    assert argv[3:] == ["--no-python", sys.executable, "-m", BOOTSTRAP, *BOOT, SCRIPT]
    argv, _ = program_command(TORCHRUN_FORMS[5][0], annotate="modules", depth=None,
                              status_file=status)  # fmt: skip
    assert argv[6] == bootstrap.__file__ and argv[7:] == [*BOOT, SCRIPT, "a"]
    # python -m torch.distributed.launch keeps the interpreter's flags and the launcher.
    cmd = ["python", "-u", "-m", "torch.distributed.launch", "--use-env", SCRIPT]
    argv, _ = program_command(cmd, annotate="modules", depth=None, status_file=status)
    assert argv == [sys.executable, "-u", "-m", "torch.distributed.launch", "--use-env",
                    "-m", BOOTSTRAP, *BOOT, SCRIPT]  # fmt: skip
    argv, warnings = program_command(["torchrun", "--no-python", "/bin/true"], annotate="modules",
                                     depth=None, status_file=status)  # fmt: skip
    assert argv[-1] == "/bin/true" and "without annotation ranges" in warnings[0]


@pytest.mark.parametrize(
    "cmd",
    [["torchrun"], ["torchrun", "--standalone", "--nproc_per_node=2"], ["torchrun", "--help"],
     ["python", "-m", "torch.distributed.run"], ["torchrun", "missing_script.py"]],
)  # fmt: skip
def test_torchrun_without_a_script_is_an_input_error(cmd: list[str]) -> None:
    with pytest.raises(InputError, match=r"training script|no such file"):
        program_command(cmd, annotate="modules", depth=None, status_file="s")


@pytest.mark.parametrize(
    ("cmd", "says"),
    [(["accelerate", "launch", "train.py"], "torchrun"),
     (["/opt/bin/deepspeed", "--num_gpus=2", "train.py"], "torchrun"),
     (["mpirun", "-np", "2", "python", "train.py"], "inside it"),
     (["srun", "python", "train.py"], "inside it"),
     (["python", "-m", "accelerate.commands.launch", "train.py"], "torchrun")],
)  # fmt: skip
def test_other_launchers_are_named_with_what_to_do(cmd: list[str], says: str) -> None:
    with pytest.raises(InputError, match=says):
        check_unsupported(cmd)
    with pytest.raises(InputError):
        program_command(cmd, annotate="modules", depth=None, status_file="s")


def test_bootstrap_hands_local_rank_on_and_names_its_status(monkeypatch) -> None:
    opts = bootstrap.parse_args(["--local-rank=1", "--annotate", "phases", "train.py", "--x"])
    assert (opts.target, opts.args, opts.annotate) == ("train.py", ["--local-rank=1", "--x"],
                                                       "phases")  # fmt: skip
    opts = bootstrap.parse_args(["--local_rank=0", "-m", "pkg", "a"])
    assert (opts.kind, opts.target, opts.args) == ("module", "pkg", ["--local_rank=0", "a"])
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert bootstrap.process_fact() == {"rank": None, "local_rank": None, "world_size": None}
    assert bootstrap.status_path("/t/status-{rank}.json") == "/t/status-0.json"
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert bootstrap.process_fact() == {"rank": 3, "local_rank": 1, "world_size": 4}
    assert bootstrap.status_path("/t/status-{rank}.json") == "/t/status-3.json"


# --- nsys's messages apart from the program's output ----------------------------------

NSYS_OUTPUT = (
    "Collecting data...\n"
    "Generating '/tmp/nsys-report-6fcd.qdstrm'\n"
    "[1/1] [0%          ] o.nsys-rep[1/1] [=====100%] o.nsys-rep\n"
    "Generated:\n    /tmp/x/o.nsys-rep\n"
    "WARNING: CPU context switch tracing not supported, disabling.\n"
)


class Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def drain(data: bytes, mixed: bool) -> tuple[str, str, str]:
    read, write = os.pipe()
    program, nsys = Sink(), Sink()
    with open(read, "rb", buffering=0) as source:
        tee = Tee(source, program, nsys, mixed)
        tee.start()
        os.write(write, data)
        os.close(write)
        tee.join(timeout=10)
    return program.text, nsys.text, bytes(tee.tail).decode()


def test_mixed_stream_keeps_the_programs_lines_and_holds_nsys_lines_back() -> None:
    first, rest = "epoch 1 loss 0.5\n", "  indented /not/a/report.txt\nno newline at the end"
    program, nsys, tail = drain((first + NSYS_OUTPUT + rest).encode(), mixed=True)
    assert program == first + rest
    assert nsys == tail == NSYS_OUTPUT
    # With the program writing to our streams itself, every byte in the pipe is nsys's.
    program, nsys, tail = drain(NSYS_OUTPUT.encode(), mixed=False)
    assert program == "" and nsys == tail == NSYS_OUTPUT


def test_nsys_failures_are_named_by_their_reason() -> None:
    usage = ("Illegal --trace argument 'bogus'\nPossible --trace values are one or more of "
             "'cuda', 'nvtx'\n\nusage: nsys profile [<args>] [application]\n"
             "Try 'nsys profile --help' for more information.\n")  # fmt: skip
    assert reason_line(usage) == "Illegal --trace argument 'bogus'"
    assert reason_line("Generating '/t/x.qdstrm'\n[1/1] [==50%  ] x\nStopped.\n") == "Stopped."


def test_nsys_warnings_are_kept() -> None:
    assert nsys_notices(NSYS_OUTPUT) == [
        "nsys: WARNING: CPU context switch tracing not supported, disabling."
    ]


# --- the real torchrun under the real nsys ---------------------------------------------


def nvtx_by_pid(sqlite_path: Path) -> tuple[dict[int, int], list[dict]]:
    """Iteration ranges of our domain per process id, and the process facts, read straight
    from the export's tables."""
    domain = "(SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?)"
    text = "coalesce(e.text, (SELECT value FROM StringIds WHERE id = e.textId))"
    rows = query(
        sqlite_path,
        f"SELECT (e.globalTid >> 24) & 16777215, {text}, e.eventType FROM NVTX_EVENTS e "
        f"WHERE e.eventType IN (34, 59, 60) AND e.domainId IN {domain}", (DOMAIN,)
    )  # fmt: skip
    steps: dict[int, int] = {}
    facts = []
    for pid, name, kind in rows:
        if kind in (59, 60) and name == "iteration":
            steps[pid] = steps.get(pid, 0) + 1
        fact = parse_fact(name or "") if kind == 34 else None
        if fact is not None and fact[0] == "process":
            facts.append(fact[1])
    return steps, facts


def torch_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlprof_lite", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.nsys
@pytest.mark.slow
def test_torchrun_two_workers_under_nsys(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    out = tmp_path / "ddp.dlprof"
    cmd = ["torchrun", "--standalone", "--nproc_per_node=2", SCRIPT, "--steps", "5"]
    done = torch_cli("--nsys", nsys, "-o", str(out), "--quiet", "--", *cmd, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # The program's own output, unchanged; nsys's messages nowhere.
    assert "rank 0/2: 5 steps" in done.stdout and "rank 1/2: 5 steps" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == f"report: {out}"
    for noise in ("Generating '", "Generated:", "[1/1]", ".qdstrm"):
        assert noise not in done.stdout + done.stderr, noise
    steps, facts = nvtx_by_pid(out / "profile.sqlite")
    assert len(steps) == 2 and sorted(steps.values()) == [5, 5]  # the script's step count
    assert sorted((f["rank"], f["local_rank"], f["world_size"]) for f in facts) == [
        (0, 0, 2), (1, 1, 2)]  # fmt: skip
    with open(out / "iterations.csv", newline="", encoding="utf-8") as fh:
        iterations = list(csv.DictReader(fh))
    assert len(iterations) >= 5  # found, at least from one rank
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    if "rank" not in iterations[0]:  # ranks merged: said so, not a confident figure
        assert any("2 processes ran annotated iterations" in w for w in summary["warnings"])


@pytest.mark.nsys
@pytest.mark.slow
def test_failing_rank_gives_torchruns_exit_code(nsys: str, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    script = ["--nproc_per_node=2", SCRIPT, "--steps", "2", "--fail-rank", "1", "--code", "3"]
    plain = subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--master-port",
                            "29531", *script], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path)  # fmt: skip
    assert plain.returncode != 0  # the oracle: what the launcher alone gives
    out = tmp_path / "fail.dlprof"
    done = torch_cli("--nsys", nsys, "-o", str(out), "--quiet", "--", "python", "-m",
                     "torch.distributed.launch", "--master-port", "29532", *script,
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == plain.returncode, done.stderr[-3000:]
    assert "warning: rank 1 exited with code 3" in done.stderr
    steps, _ = nvtx_by_pid(out / "profile.sqlite")  # the report is still written
    assert sorted(steps.values()) == [2, 2] and (out / "summary.csv").is_file()


PRINTS = textwrap.dedent("""
    import os, sys
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    print("Generated: not nsys, the program", flush=True)
    print("tty", os.isatty(1))
""")


@pytest.mark.nsys
def test_program_output_is_unchanged_and_nsys_speaks_only_with_debug(
    nsys: str, tmp_path: Path
) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS, encoding="utf-8")
    args = ["--nsys", nsys, "--annotate", "none", "--quiet", str(script)]
    done = torch_cli("-o", str(tmp_path / "a"), *args, cwd=tmp_path)
    assert done.stdout.splitlines()[:4] == [
        "to stdout", "Generated: not nsys, the program", "tty False", f"report: {tmp_path / 'a'}"
    ]  # fmt: skip
    assert done.stderr.splitlines()[0] == "to stderr"
    assert "Generating '" not in done.stderr and "[1/1]" not in done.stderr
    done = torch_cli("-o", str(tmp_path / "b"), "--debug", *args, cwd=tmp_path)
    assert "to stdout" in done.stdout and "Generating '" not in done.stdout
    assert "Generating '" in done.stderr and "Generated:" in done.stderr


@pytest.mark.nsys
def test_program_on_a_terminal_sees_a_terminal(nsys: str, tmp_path: Path) -> None:
    """Progress bars (tqdm, rich) draw only on a terminal: the program must still see one."""

    script = tmp_path / "prints.py"
    script.write_text(PRINTS, encoding="utf-8")
    code, shown = run_on_a_terminal(
        ["--nsys", nsys, "--annotate", "none", "--quiet", "-o", str(tmp_path / "t"), str(script)],
        stream="stdout", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0 and "tty True" in shown and "to stdout" in shown


@pytest.mark.nsys
def test_nsys_failure_is_one_line_with_nsys_reason(nsys: str, tmp_path: Path) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS, encoding="utf-8")
    done = torch_cli("--nsys", nsys, "--nsys-args=--trace=bogus", "-o", str(tmp_path / "x"),
                     str(script), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "dlprof-lite: error: nsys profile wrote no report (exit code 1): "
        "Illegal --trace argument 'bogus'"
    ]
    assert not (tmp_path / "x").exists()


def write_statuses(folder: Path, *statuses: dict) -> None:
    for status in statuses:
        rank = status.get("rank") if status.get("rank") is not None else 0
        (folder / f"status-{rank}.json").write_text(json.dumps(status), encoding="utf-8")


def test_a_launched_program_ends_when_every_local_worker_has(tmp_path: Path) -> None:
    from dlprof_lite.launch.run import _ended, read_statuses

    assert not _ended(tmp_path, launcher=True)
    write_statuses(tmp_path, {"rank": 1, "local_world_size": 2, "exit_code": 0, "pid": 11},
                   {"rank": 0, "local_world_size": 2, "exit_code": None, "pid": 10})  # fmt: skip
    assert [s["rank"] for s in read_statuses(tmp_path)] == [0, 1]
    assert not _ended(tmp_path, launcher=True)
    write_statuses(tmp_path, {"rank": 0, "local_world_size": 2, "exit_code": 3, "pid": 10})
    assert _ended(tmp_path, launcher=True)
    single = tmp_path / "single"
    single.mkdir()
    write_statuses(single, {"rank": None, "local_world_size": None, "exit_code": 0})
    assert _ended(single, launcher=False)


def test_exit_codes_of_launched_and_single_programs() -> None:
    from dlprof_lite.launch.run import _exit_code
    from dlprof_lite.launch.supervise import Outcome

    ranks = [{"rank": 0, "exit_code": 0}, {"rank": 1, "exit_code": 3}]
    # nsys ended by itself: it passed the launcher's own code back (torchrun: 1).
    code, warnings = _exit_code(ranks, Outcome(1, "", []), True, None, True)
    assert code == 1 and warnings == ["rank 1 exited with code 3"]
    # nsys had to be stopped: the first failing rank's code.
    code, _ = _exit_code(ranks, Outcome(-9, "", ["stopped"]), True, None, True)
    assert code == 3
    code, warnings = _exit_code([], Outcome(1, "", []), True, None, True)
    assert code == 1 and "no worker of the launcher started" in warnings[0]
    assert _exit_code([{"exit_code": 7}], Outcome(0, "", []), False, None, True) == (7, [])
    code, warnings = _exit_code([{"exit_code": None}], Outcome(-15, "", []), False, 2.0, True)
    assert code == 0 and "--duration 2 s" in warnings[0]
