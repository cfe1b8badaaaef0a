"""The progress bar: on stderr only when it is a terminal, never with --quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlprof_lite.progress import stage_progress
from terminal import run_on_a_terminal


def test_silent_when_stderr_is_not_a_terminal() -> None:
    with stage_progress("x.sqlite") as advance:  # pytest captures stderr: not a TTY
        assert advance is None


def _run_on_a_terminal(args: list[str]) -> str:
    """Run dlprof-lite with stderr on a pseudo-terminal; return what reached it."""
    code, shown = run_on_a_terminal(args, stream="stderr")
    assert code == 0
    return shown


@pytest.mark.corpus
def test_bar_on_a_terminal_and_quiet_silences_it(corpus_dir: Path, tmp_path: Path) -> None:
    src = corpus_dir / "quasiben__nvtx-examples__workflow.sqlite"
    shown = _run_on_a_terminal(["analyze", str(src), "-o", str(tmp_path / "a")])
    assert "workflow.sqlite" in shown and "reading" in shown
    quiet = _run_on_a_terminal(["analyze", str(src), "-o", str(tmp_path / "b"), "--quiet"])
    # no bar: only the summary's warnings, which --quiet keeps (docs/profiling.md)
    assert "reading" not in quiet
    assert all(line.startswith("dlprof-lite: warning: ") for line in quiet.splitlines()), quiet
