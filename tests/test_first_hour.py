"""Messages for the first hour (issue 27): commands and their spellings, --nsys wherever a
report is exported, options placed after the script, the -o help.

Real command lines through ``main``; the exports are real nsys reports of the corpus and the
run form runs the real nsys.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlprof_lite
from dlprof_lite.cli import COMMANDS, main
from dlprof_lite.errors import DlprofError

RAW = "raw/MohanadOdema__DLProf__nsys_profile.nsys-rep"


def test_analyse_is_analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's own spelling reaches the analyze command (here its missing-file error)."""
    assert main(["analyse", str(tmp_path / "none.sqlite")]) == 2
    missing = tmp_path / "none.sqlite"
    assert capsys.readouterr().err == f"dlprof-lite: error: {missing}: no such file\n"


@pytest.mark.parametrize(("typed", "meant"), [("analize", "analyze"), ("comapre", "compare"),
                                              ("rnus", "runs"), ("reprot", "report")])  # fmt: skip
def test_a_mistyped_command_names_the_nearest(
    typed: str, meant: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert main([typed, "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"did you mean 'dlprof-lite {meant}'" in err, err


def test_a_script_named_like_a_command_is_still_run(tmp_path: Path) -> None:
    """A word that is an existing file is the program, never a mistyped command."""
    (tmp_path / "analize").write_text("")
    from dlprof_lite.cli import _check_command

    os.chdir(tmp_path)
    _check_command(["analize"])  # no error: the run form takes it


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n  {name} " in out, name
    assert "beside the input" in out and "current folder" in out  # -o says what it does


def test_help_lists_exactly_the_commands_main_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Each listed command has its own parser (``--help`` names it), and every word ``main``
    dispatches on is listed: no command is hidden from the top-level help."""
    from dlprof_lite import cli

    assert set(cli.HANDLERS) == set(COMMANDS)
    for name in COMMANDS:
        assert main([name, "--help"]) == 0
        assert f"usage: dlprof-lite {name}" in capsys.readouterr().out, name


@pytest.fixture
def no_nsys_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys: str) -> str:
    """PATH without nsys (Python stays reachable); returns the real nsys's path."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(bare))
    assert shutil.which("nsys") is None
    return nsys


@pytest.mark.nsys
@pytest.mark.corpus
def test_nsys_option_for_analyze_compare_and_the_api(
    corpus_dir: Path, tmp_path: Path, no_nsys_on_path: str, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Without nsys on PATH each way in says to pass --nsys; each accepts it."""
    report = corpus_dir / RAW
    assert main(["analyze", str(report), "-o", str(tmp_path / "a"), "--no-db"]) != 0
    assert "--nsys PATH" in capsys.readouterr().err
    assert main(["analyze", str(report), "-o", str(tmp_path / "a"), "--no-db", "--quiet",
                 "--nsys", no_nsys_on_path]) == 0  # fmt: skip
    assert (tmp_path / "a" / "summary.json").is_file()
    capsys.readouterr()
    # compare exports an .nsys-rep side the same way (this export has no training steps, so
    # compare then refuses it: after the export, which --nsys made possible).
    sides = ["compare", str(report), str(tmp_path / "a"), "-o", str(tmp_path / "c"), "--quiet",
             "--db", f"sqlite:///{tmp_path / 'runs.db'}"]  # fmt: skip
    assert main(sides) != 0
    assert "--nsys PATH" in capsys.readouterr().err
    assert main([*sides, "--nsys", no_nsys_on_path]) == 2
    assert "no analysed steps" in capsys.readouterr().err
    with pytest.raises(DlprofError, match="--nsys"):
        dlprof_lite.analyze(report)
    again = dlprof_lite.analyze(report, nsys=no_nsys_on_path)
    assert again.summary.totals.kernel_count == dlprof_lite.open_report(
        tmp_path / "a").summary.totals.kernel_count


SCRIPT = """
import argparse, torch
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.nsys
@pytest.mark.slow
def test_options_after_the_script_lead_with_the_programs_failure(
    tmp_path: Path, nsys: str
) -> None:
    """``dlprof-lite train.py --steps 5 -o x --force``: the script rejects -o and --force and
    exits 2 before its first step. Our first line says so and where options go; the warnings
    that follow from it (no optimizer step, no NVTX ranges) are not printed."""
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "--no-db", "--nsys", nsys, "train.py",
         "--steps", "5", "-o", "x", "--force"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("dlprof-lite")]
    assert len(ours) == 1, done.stderr
    assert "exited with code 2 before its first training step" in ours[0]
    assert "-o --force after the script went to the script" in ours[0]
    assert "unrecognized arguments: -o x --force" in done.stderr  # the program's own error
    assert "warning" not in done.stderr, done.stderr
    assert "report: " in done.stdout and "train.dlprof" in done.stdout


@pytest.mark.nsys
@pytest.mark.slow
def test_repeat_prints_one_combined_summary(tmp_path: Path, nsys: str) -> None:
    """``--repeat 3``: a line per run and one summary with both spreads, not three full
    summaries; each warning once."""
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "--no-db", "--nsys", nsys, "--repeat", "3",
         "-o", "runs", "train.py", "--steps", "6"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert len(out) <= 12, done.stdout
    assert sum(line.startswith("  run ") for line in out) == 3, done.stdout
    assert any("within runs" in line and "between runs" in line for line in out), done.stdout
    assert "15 analysed steps" in done.stdout  # 3 runs x (6 steps - 1 warm-up)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == len(set(warnings)), done.stderr


@pytest.mark.corpus
@pytest.mark.parametrize("columns", [80, 120])
def test_console_names_are_readable_and_distinct(
    corpus_dir: Path, tmp_path: Path, columns: int
) -> None:
    """A DLProf export on a terminal of 80 and 120 columns: ranges are shown by the layer
    their payload names (never the raw dict text), every line fits, and the shortened names
    of different layers stay different."""
    from terminal import run_on_a_terminal

    export = corpus_dir / "MohanadOdema__DLProf__nsys_profile.sqlite"
    env_free = ["analyze", str(export), "-o", str(tmp_path / "r"), "--no-db", "--top", "10"]
    code, screen = run_on_a_terminal(env_free, stream="stdout", columns=columns)
    assert code == 0, screen
    plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)  # colours are no width
    lines = [line.rstrip("\r") for line in plain.split("\n")]
    assert "{'traceMarker'" not in screen and "{'mod'" not in screen, screen
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)
    layers = _table_rows(lines, "Top layers")
    assert len(layers) == len(set(layers)) and len(layers) >= 2, layers


def _table_rows(lines: list[str], title: str) -> list[str]:
    """The first cells of a console table's rows (after its ━ rule, up to a blank line)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if "━" in lines[i])
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(line.split("│")[0].strip())
    return rows


def test_each_dataloader_is_named_in_the_settings() -> None:
    """A training and a validation loader with the same settings read apart: each is named
    by its dataset's class and length (the annotation's dataloader fact)."""
    from builders import build_marks, fact_mark
    from dlprof_lite.ingest.facts import facts_of
    from dlprof_lite.report.run_facts import dataloader_summary, read_run_facts

    same = {"num_workers": 0, "batch_size": 32, "pin_memory": False,
            "persistent_workers": False}  # fmt: skip
    marks = build_marks([
        fact_mark("dataloader", {"dataset": "CIFAR10", "length": 1563, **same}, 100),
        fact_mark("dataloader", {"dataset": "CIFAR10", "length": 313, **same}, 200),
    ])  # fmt: skip
    settings = str(dataloader_summary(read_run_facts(facts_of(marks)))["dataloader_settings"])
    assert settings.split("; ") == [
        "CIFAR10 loader (1563 batches): num_workers=0, batch_size=32, pin_memory=False, "
        "persistent_workers=False",
        "CIFAR10 loader (313 batches): num_workers=0, batch_size=32, pin_memory=False, "
        "persistent_workers=False",
    ]
