"""What the system and the profiled process were: the summary's host, OS, driver, CUDA,
torch, Python and command fields.

Oracles: the export's own ``TARGET_INFO_SYSTEM_ENV`` rows read here with ``sqlite3`` (every
corpus export), published NVIDIA driver releases and CUDA's documented version encoding
(``1000 * major + 10 * minor``), and, for one real ``dlprof-lite`` run under the real nsys,
the test interpreter's own ``torch.__version__``, ``platform.python_version()`` and the
arguments it passed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dlprof_lite
from builders import build_marks, fact_mark
from conftest import corpus_files
from dlprof_lite.annotate import bootstrap
from dlprof_lite.ingest.facts import facts_of
from dlprof_lite.render.console_lines import header_lines as _header_lines
from dlprof_lite.report.run_facts import process_summary, read_run_facts

FIELDS = {"Hostname": "host", "OsDescription": "os", "NvDriverVersion": "driver_version",
          "CudaDriverVersion": "cuda_driver_version"}  # fmt: skip
PROCESS_FIELDS = ("torch_version", "cuda_version", "python_version", "command")
# Driver releases as NVIDIA publishes them, for exports that store the digits only.
KNOWN_DRIVERS = {
    "MohanadOdema__DLProf__nsys_profile.sqlite": "515.43.04",
    "Yu-gyoung-Yun__alpa__examples_jax_profile_mem.nsys-rep.sqlite": "525.125.06",
    "hpcgroup__pipit__pipit_tests_data_saxpy-mpi-cuda_nsys_perlmutter0.sqlite": "525.105.17",
    "wenscarl__cutlass_benchmark__report1.sqlite": "470.57.02",  # stored dotted
}
KNOWN_CUDA = {"wenscarl__cutlass_benchmark__report1.sqlite": "12.2",
              "MohanadOdema__DLProf__nsys_profile.sqlite": "11.7",
              "NVIDIA__Fuser__report1.sqlite": "12.8"}  # fmt: skip


def system_env(path: Path) -> dict[str, str]:
    """The export's system rows we report, straight from the file (empty: no table)."""
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'TARGET_INFO_SYSTEM_ENV'"
                            ).fetchone():  # fmt: skip
            return {}
        rows = conn.execute(
            "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN "
            f"({', '.join('?' * len(FIELDS))})",
            tuple(FIELDS),
        ).fetchall()
    return {name: str(value) for name, value in rows}


def check_driver(name: str, raw: str | None, got: object) -> None:
    if raw is None or raw == "0":
        assert got is None, name
        return
    assert isinstance(got, str), name
    if "." in raw:
        assert got == raw, name
    else:
        assert got.replace(".", "") == raw and re.fullmatch(r"\d{3}\.\d{2,3}\.\d{2}", got), name
    if name in KNOWN_DRIVERS:
        assert got == KNOWN_DRIVERS[name]


def test_every_corpus_export_reports_the_system_its_table_names(corpus_dir: Path) -> None:
    seen = dict.fromkeys(FIELDS.values(), 0)
    without_table = 0
    for path in corpus_files():
        raw = system_env(path)
        without_table += not raw
        summary = dlprof_lite.analyze(path).summary
        assert summary["host"] == raw.get("Hostname"), path.name
        assert summary["os"] == raw.get("OsDescription"), path.name
        check_driver(path.name, raw.get("NvDriverVersion"), summary["driver_version"])
        cuda = raw.get("CudaDriverVersion")
        want = None if cuda is None else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}"
        assert summary["cuda_driver_version"] == want, path.name
        if path.name in KNOWN_CUDA:
            assert want == KNOWN_CUDA[path.name]
        for key in PROCESS_FIELDS:  # no dlprof-lite annotation in any of them
            assert summary[key] is None, (path.name, key)
        for field, value in summary.system.items():
            seen[field] = seen.get(field, 0) + (value is not None)
    # Not vacuous: each field is known somewhere, and some exports (2020.3) have no table.
    assert all(seen[f] > 0 for f in FIELDS.values()), seen
    assert without_table > 0


def crafted(tmp_path: Path, corpus_dir: Path, *sql: str) -> Path:
    path = tmp_path / "crafted.sqlite"
    shutil.copyfile(corpus_dir / "MohanadOdema__DLProf__nsys_profile.sqlite", path)
    with sqlite3.connect(path) as conn:
        for statement in sql:
            conn.execute(statement)
    return path


def test_the_environment_row_never_reaches_the_report(tmp_path: Path, corpus_dir: Path) -> None:
    secret = "HF_TOKEN=hf_dlprof_secret_4711"
    path = crafted(
        tmp_path, corpus_dir,
        f"UPDATE TARGET_INFO_SYSTEM_ENV SET value = '{secret}' WHERE name = 'DeviceEnvironment'",
        # A crafted file: a host name that is not UTF-8 text (with an ESC), an OS name of 100 kB.
        "UPDATE TARGET_INFO_SYSTEM_ENV SET value = CAST(x'6e6f6465ff311b5b33316d' AS TEXT) "
        "WHERE name = 'Hostname'",
        "UPDATE TARGET_INFO_SYSTEM_ENV SET value = printf('%.100000c', 'x') "
        "WHERE name = 'OsDescription'",
    )  # fmt: skip
    report = dlprof_lite.analyze(path)
    folder = report.save(tmp_path / "report")
    for file in folder.iterdir():
        assert "hf_dlprof_secret" not in file.read_text(encoding="utf-8", errors="replace")
    assert report.summary["host"] == "node\ufffd1\x1b[31m"  # raw in the report files
    header = str(_header_lines(report.summary)[0])  # on the console, escaped
    assert "host node\ufffd1\\x1b[31m" in header and "\x1b" not in header
    os_name = report.summary["os"]
    assert isinstance(os_name, str) and set(os_name) == {"x"} and len(os_name) <= 200
    assert report.summary["driver_version"] == "515.43.04"  # the rest still read


def test_an_unreadable_system_table_is_a_warning(tmp_path: Path, corpus_dir: Path) -> None:
    path = crafted(tmp_path, corpus_dir,
                   "ALTER TABLE TARGET_INFO_SYSTEM_ENV RENAME COLUMN value TO v")  # fmt: skip
    summary = dlprof_lite.analyze(path).summary
    assert all(summary[f] is None for f in FIELDS.values())
    assert any("TARGET_INFO_SYSTEM_ENV could not be read" in w for w in summary.warnings)
    assert summary["kernel_count"] == 46  # the analysis went on (MANIFEST: 46 kernels)


# --- the process fact ------------------------------------------------------------------


def test_runtime_fact_imports_nothing_and_caps_argv() -> None:
    code = textwrap.dedent("""
        import json, sys
        from dlprof_lite.annotate.bootstrap import runtime_fact
        sys.argv = ["train.py", "--name", "two words"] + ["y" * 1000] * 10
        fact = runtime_fact()
        print(json.dumps([fact, "torch" in sys.modules, "pandas" in sys.modules]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    fact, torch_loaded, pandas_loaded = json.loads(done.stdout)
    assert not torch_loaded and not pandas_loaded
    assert fact["torch"] is None and fact["cuda"] is None
    assert fact["python"] == platform.python_version()
    assert fact["argv"][:3] == ["train.py", "--name", "two words"]
    assert sum(map(len, fact["argv"])) == bootstrap.ARGV_CHARS and fact["argv_truncated"]
    assert len(json.dumps(fact)) < 2 * bootstrap.ARGV_CHARS


def test_the_lowest_rank_speaks_and_torch_disagreement_warns() -> None:
    rank1 = dict(rank=1, torch="2.4.0", cuda="12.1", python="3.11.9",
                 argv=["train.py", "--local-rank=1"])  # fmt: skip
    rank0 = dict(rank=0, torch="2.5.0", cuda="12.4", python="3.11.9",
                 argv=["train.py", "--local-rank=0", "a b"])  # fmt: skip
    marks = build_marks([fact_mark("process", rank1, 10, pid=2),
                         fact_mark("process", rank0, 20, pid=1)])  # fmt: skip
    flat, warnings = process_summary(read_run_facts(facts_of(marks)))
    assert flat == {"torch_version": "2.5.0", "cuda_version": "12.4",
                    "python_version": "3.11.9",
                    "command": "train.py --local-rank=0 'a b'"}  # fmt: skip
    assert len(warnings) == 1 and "torch 2.5.0 on rank 0; torch 2.4.0 on rank 1" in warnings[0]
    # Without ranks: the first process to record one; equal versions: no warning.
    marks = build_marks([fact_mark("process", {**rank1, "rank": None, "torch": "2.5.0"}, 5,
                                   pid=7),
                         fact_mark("process", {**rank0, "rank": None}, 9, pid=3)])  # fmt: skip
    flat, warnings = process_summary(read_run_facts(facts_of(marks)))
    assert flat["command"] == "train.py --local-rank=1" and warnings == []


def test_facts_of_an_older_annotation_or_none_leave_the_fields_empty() -> None:
    old = build_marks([fact_mark("process", dict(rank=None, local_rank=None), 10)])
    for marks in (old, build_marks([])):
        flat, warnings = process_summary(read_run_facts(facts_of(marks)))
        assert flat == dict.fromkeys(PROCESS_FIELDS) and warnings == []


# --- one real run under the real nsys -------------------------------------------------

TINY = textwrap.dedent("""
    import sys
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(16, 4)).sum().backward()
        opt.step()
    print("args:", sys.argv[1:])
""")


@pytest.mark.nsys
def test_a_real_run_records_its_torch_python_and_command(nsys: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    script = tmp_path / "tiny.py"
    script.write_text(TINY, encoding="utf-8")
    args = ["--name", "two words", "it's", "-x", ""]
    out = tmp_path / "out"
    env = {**os.environ, "COLUMNS": "400"}  # the header line on one line
    done = subprocess.run(
        [sys.executable, "-m", "dlprof_lite", "--nsys", nsys, "-o", str(out), str(script),
         *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"args: {args!r}" in done.stdout  # the script saw its arguments unchanged
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["torch_version"] == torch.__version__
    assert summary["cuda_version"] == torch.version.cuda
    assert summary["python_version"] == platform.python_version()
    command = summary["command"]
    assert shlex.split(command) == [str(script), *args]
    assert command.endswith(shlex.join(args))
    raw = system_env(out / "profile.sqlite")
    assert summary["host"] == raw.get("Hostname") == socket.gethostname()
    check_driver("real run", raw.get("NvDriverVersion"), summary["driver_version"])
    header = next(line for line in done.stdout.splitlines() if line.startswith("dlprof-lite "))
    assert f"host {socket.gethostname()}" in header and f"torch {torch.__version__}" in header
    # The same header from the summary read back: one line.
    lines = _header_lines(dlprof_lite.open_report(out).summary)
    assert f"torch {torch.__version__}" in str(lines[0])
