"""Names that cannot attack the terminal or a spreadsheet (issue 13, item 8), and the console's
projection line.

The hostile export is a COPY of a real corpus export whose four busiest kernels, GPU name and
one NVTX range text are replaced by Rich markup, an OSC sequence with BEL, an ESC colour code
and a spreadsheet formula, read from a path holding ``[red]``. Oracles: the names themselves
(they must appear literally, control characters as visible escapes), the absence of raw ESC
and BEL bytes, the CSV property that no text cell starts a formula, and the JSON's raw names.
The projection line is checked against the round numbers of ``test_projection.two_epochs``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from dlprof_lite import open_report
from dlprof_lite.durations import long as _long
from dlprof_lite.durations import span as _span
from dlprof_lite.render.console import render
from dlprof_lite.render.writers import formula_safe, quote_cell, unquote_cell
from dlprof_lite.report.build import build_report
from dlprof_lite.report.steps.projection import NO_PROJECTION, ProjectionInput, reproject
from dlprof_lite.safe_text import printable
from terminal import run_on_a_terminal
from test_projection import two_epochs

SOURCE = "MohanadOdema__DLProf__nsys_profile.nsys-rep.sqlite"
OSC = "\x1b]0;owned\x07"  # would retitle the terminal and ring its bell
FORMULA = "=cmd|' /C calc'!A0"
KERNELS = ("[/bold]", "[link=http://x]y[/link]", OSC, FORMULA)
GPU = "[bold red]GPU[/] \x1b[31mX"
RANGE = "@[/]\x1b[2J "  # a formula start, markup, and ESC: clear the screen
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _hostile(folder: Path, corpus: Path) -> Path:
    path = folder / "in[red]put.sqlite"
    path.write_bytes((corpus / SOURCE).read_bytes())
    conn = sqlite3.connect(path)
    try:
        # The kernels table ranks kernels by their (demangled) name: each of the four
        # busiest gets one hostile short name, a new StringIds row of its own.
        busiest = [row[0] for row in conn.execute(
            "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName"
            " ORDER BY SUM(end - start) DESC LIMIT 4")]  # fmt: skip
        top = conn.execute("SELECT MAX(id) FROM StringIds").fetchone()[0]
        for i, (name_id, name) in enumerate(zip(busiest, KERNELS, strict=True), top + 1):
            conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (i, name))
            conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = ?"
                         " WHERE demangledName = ?", (i, name_id))  # fmt: skip
        conn.execute("UPDATE TARGET_INFO_GPU SET name = ?", (GPU,))
        # Every range the script recorded starts with hostile text, the busiest included.
        conn.execute("UPDATE NVTX_EVENTS SET text = ? || text WHERE text LIKE '{%'", (RANGE,))
        conn.commit()
    finally:
        conn.close()
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "COLUMNS": "200"}  # no wrapping: each name on one line
    return subprocess.run([sys.executable, "-m", "dlprof_lite", *args], cwd=cwd,
                          capture_output=True, timeout=300, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory, corpus_dir: Path):
    folder = tmp_path_factory.mktemp("hostile")
    path = _hostile(folder, corpus_dir)
    done = _cli("analyze", path.name, "-o", "out[link=x]", "--all-iterations", cwd=folder)
    return folder, done


@pytest.mark.corpus
def test_hostile_names_are_printed_as_text(hostile_run) -> None:
    folder, done = hostile_run
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    for stream in (done.stdout, done.stderr):
        assert b"\x1b" not in stream and b"\x07" not in stream
    assert "Traceback" not in err and "MarkupError" not in err
    for name in ("[/bold]", "[link=http://x]y[/link]", FORMULA):
        assert name in out
    assert printable(OSC) == "\\x1b]0;owned\\x07" and printable(OSC) in out
    assert printable(GPU) in out  # "[bold red]GPU[/] \x1b[31mX", markup and escape shown
    assert "in[red]put.sqlite" in out
    assert printable(RANGE) in out  # the ranges table: "@[/]\x1b[2J ..."
    assert f"report: {folder / 'out[link=x]'}" in out or "report: out[link=x]" in out


@pytest.mark.corpus
def test_a_terminal_gets_only_our_own_styles(tmp_path: Path, corpus_dir: Path) -> None:
    """On a real terminal rich colours its own words; a name's OSC, hyperlink or colour code
    never gets through (OSC 8 would be rich acting on ``[link=...]``)."""
    path = _hostile(tmp_path, corpus_dir)
    args = ["analyze", str(path), "-o", str(tmp_path / "r"), "--all-iterations"]
    code, shown = run_on_a_terminal(args, stream="stdout")
    assert code == 0, shown
    assert "\x07" not in shown and "\x1b]" not in shown  # no OSC at all, so no OSC 8 link
    assert "\x1b[31mX" not in shown and "\x1b[2J" not in shown
    assert "\\x1b]0;owned\\x07" in shown and "[link=http://x]y[/link]" in shown


@pytest.mark.corpus
def test_csv_cells_never_start_a_formula_and_json_keeps_raw_names(hostile_run) -> None:
    folder, _ = hostile_run
    report = folder / "out[link=x]"
    starting = []
    for table in report.glob("*.csv"):
        for row in csv.reader(io.StringIO(table.read_text(encoding="utf-8"), newline="")):
            for cell in row:
                if cell.startswith(TRIGGERS) and not _is_number(cell):
                    starting.append((table.name, cell))
    assert not starting, starting[:5]
    kernels = (report / "kernels.csv").read_text(encoding="utf-8")
    assert "'" + FORMULA in kernels
    rows = json.loads((report / "kernels.json").read_text(encoding="utf-8"))["rows"]
    names = {r["short_name"] for r in rows}
    assert set(KERNELS) <= names  # raw in JSON, ESC and BEL included
    ranges = json.loads((report / "ranges.json").read_text(encoding="utf-8"))["rows"]
    assert any(str(r["name"]).startswith(RANGE) for r in ranges)
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    assert summary["gpus"][0]["name"] == GPU


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.corpus
def test_a_csv_only_report_reads_back_the_raw_names(tmp_path: Path, corpus_dir: Path) -> None:
    path = _hostile(tmp_path, corpus_dir)
    done = _cli("analyze", path.name, "-o", "csv-only", "--formats", "csv", "--quiet",
                "--all-iterations", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    back = open_report(tmp_path / "csv-only")
    assert set(KERNELS) <= set(back.kernels["short_name"].astype(str))
    assert not any(str(n).startswith("'") for n in back.kernels["short_name"])


def test_errors_and_warnings_show_control_characters_as_escapes(tmp_path: Path) -> None:
    missing = f"no{OSC}such[/bold].sqlite"
    done = _cli("analyze", missing, cwd=tmp_path)
    assert done.returncode == 2
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
    line = done.stderr.decode()
    assert line.startswith("dlprof-lite: error: ") and "Traceback" not in line
    assert "no\\x1b]0;owned\\x07such[/bold].sqlite" in line


def test_printable_makes_every_control_visible_and_keeps_text() -> None:
    assert printable("conv2d [1, 3] é µs ✓") == "conv2d [1, 3] é µs ✓"
    assert printable("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert printable("\x00\x7f\x9b\x85") == "\\x00\\x7f\\x9b\\x85"  # NUL, DEL, C1 CSI, NEL
    assert printable("abc\u202edef\u2066") == "abc\\u202edef\\u2066"  # bidi override


def test_formula_cells_are_quoted_reversibly() -> None:
    import pandas as pd

    cells = ["=1+1", "+1", "-x", "@SUM(A1)", "\tx", "\rx", "'=a", "plain", "a=b"]
    frame = pd.DataFrame({"text": cells, "cat": pd.Categorical(cells), "n": range(-4, 5)})
    safe = formula_safe(frame)
    for column in ("text", "cat"):
        quoted = [str(v) for v in safe[column]]
        assert quoted[:7] == ["'" + c for c in cells[:7]]
        assert quoted[7:] == cells[7:]
        assert [unquote_cell(v) for v in quoted] == cells
    assert safe["n"].tolist() == list(range(-4, 5))  # numbers, negative ones too, untouched
    assert quote_cell(-3) == -3
    clean = pd.DataFrame({"text": cells[7:], "cat": pd.Categorical(cells[7:])})
    assert formula_safe(clean) is clean  # nothing to quote: no copy


def _rendered(report, width: int = 200) -> str:
    buffer = io.StringIO()
    render(report, None, Console(file=buffer, width=width, highlight=False))
    return buffer.getvalue()


def test_projection_line_from_round_numbers() -> None:
    """two_epochs: 3 steps per epoch of 1600 ns (p10 1000, p90 2600), 5000 ns outside steps
    per epoch, start-up 18400 ns: epoch 3 x 1600 + 5000 = 9800 (p10 8000, p90 12800), one
    epoch of training 18400 + 9800 = 28200 ns."""
    report = build_report(two_epochs())
    lines = [ln for ln in _rendered(report).splitlines() if ln.startswith("projected:")]
    assert lines == [
        "projected: epoch 9.8 µs (p10–p90 8.0–12.8 µs), 3 steps of 1.6 µs (dataloader: 3 "
        "batches); training 28.2 µs for 1 epoch (start-up 18.4 µs, outside steps 5.0 µs/epoch)"
    ]


def test_projection_line_for_given_steps_and_epochs() -> None:
    """--steps-per-epoch 10 --epochs 3: 10 x 1600 + 10000 outside = 26000 per epoch,
    18400 + 3 x 26000 = 96400 ns."""
    profile = two_epochs(loaders=())
    report = build_report(profile)
    assert "projected:" not in _rendered(report)  # none: the reason is a warning instead
    assert any(w.startswith(NO_PROJECTION) for w in report.summary.warnings)
    summary = reproject(report.summary, profile, report.iterations, ProjectionInput(10, 3))
    text = _rendered(replace(report, summary=summary))
    assert ("projected: epoch 26.0 µs (p10–p90 20.0–36.0 µs), 10 steps of 1.6 µs "
            "(--steps-per-epoch); training 96.4 µs for 3 epochs (start-up 18.4 µs, outside "
            "steps 10.0 µs/epoch)") in text  # fmt: skip


def test_long_durations_reach_hours() -> None:
    assert _long(3.6e12) == "1.0 h"
    assert _long(12.34e9) == "12.3 s"
    assert _long(90e9) == "1.5 min"
    assert _span(11.9e9, 12.8e9) == "11.9–12.8 s"


def test_console_text_acts_on_no_markup_or_emoji_code() -> None:
    from dlprof_lite.render.console_lines import line_text as _text

    buffer = io.StringIO()
    Console(file=buffer, width=200, force_terminal=True).print(
        _text(("warning:", "yellow"), " :smile: [/bold] [link=http://x]y[/link] \x1b[2J")
    )
    shown = buffer.getvalue()
    assert ":smile: [/bold] [link=http://x]y[/link] \\x1b[2J" in shown
    assert "\x1b[2J" not in shown and "\x1b]8;" not in shown  # no clear screen, no OSC 8 link
    assert "\x1b[33mwarning:" in shown  # our own style still applies


@pytest.mark.corpus
def test_the_progress_bar_shows_the_file_name_as_text(tmp_path: Path, corpus_dir: Path) -> None:
    """On a terminal stderr carries the stage bar, labelled with the input's name; a file
    name cannot hold '/', but it can hold an opening tag, a link, or an ESC."""
    path = tmp_path / "p[bold]q[link=http:x]r\x1b[2J.sqlite"
    path.write_bytes((corpus_dir / SOURCE).read_bytes())
    code, shown = run_on_a_terminal(["analyze", str(path), "-o", str(tmp_path / "r")])
    assert code == 0, shown
    assert "\x1b]8;" not in shown and "\x1b[2J" not in shown
    assert "p[bold]q[link=http:x]r\\x1b[2J.sqlite" in shown


def test_usage_errors_quote_the_command_line_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's own messages (an unknown option) show control characters escaped."""
    from dlprof_lite.cli import main

    assert main(["analyze", "a.sqlite", "--\x1b]0;owned\x07"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned\\x07" in err
