"""The run store's own process (store/beside.py): a run recorded through it is the run
recorded here, row for row; stopped, killed or refused, it says so as the store does.

The fork happens only in a process without threads, so each case runs in a fresh Python
(a subprocess) that forks before anything imports numpy, as the command line does. Oracles:
the same run recorded in this process (``RunStore.record``) into a second database, every
row of every table compared; the store's own error line for a file that is not a database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import ROOT
from dlprof_lite.store import beside
from dlprof_lite.store.database import RunStore, StoreError
from dlprof_lite.store.schema import metadata

TESTS = Path(__file__).parent

# Forks first (no thread yet), then builds the hostile run of test_store and records it
# through the child into argv[1] and here into argv[2]; prints what happened as JSON.
RECORD_BOTH = """
import json, sys
from dlprof_lite.store import beside
child = beside.start()
assert child is not None, "no fork in a fresh process"
sys.path.insert(0, {tests!r})
from test_store import hostile_record
from dlprof_lite.store.database import RunStore
run = hostile_record()
out = {{"beside": child.record(sys.argv[1], run)}}
with RunStore(sys.argv[2]) as store:
    out["here"] = store.record(run)
print(json.dumps(out))
"""

# Forks, then ends the child one way (argv[2]: stop, kill) or records a tiny run into a bad
# store (record); prints the outcome as JSON.
END_CHILD = """
import json, os, signal, sys
from dlprof_lite.store import beside
child = beside.start()
assert child is not None
how, url = sys.argv[1], sys.argv[2]
out = {"pid": child.pid}
if how == "stop":
    child.stop()
else:
    if how == "kill":
        os.kill(child.pid, signal.SIGKILL)
    sys.path.insert(0, sys.argv[3])
    from test_store import synthetic_record
    from dlprof_lite.errors import StoreError
    try:
        out["run_id"] = child.record(url, synthetic_record())
    except StoreError as err:
        out["error"] = str(err)
try:
    os.waitpid(child.pid, os.WNOHANG)
    out["reaped"] = False
except ChildProcessError:
    out["reaped"] = True
print(json.dumps(out))
"""


def python(code: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def all_rows(url: str) -> dict[str, list[tuple[object, ...]]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return {table.name: [tuple(r) for r in connection.execute(sa.select(table))]
                    for table in metadata.sorted_tables}  # fmt: skip
    finally:
        engine.dispose()


def test_a_run_recorded_beside_is_the_run_recorded_here(tmp_path: Path) -> None:
    there, here = f"sqlite:///{tmp_path / 'beside.db'}", f"sqlite:///{tmp_path / 'here.db'}"
    ids = python(RECORD_BOTH.format(tests=str(TESTS)), there, here)
    assert ids == {"beside": 1, "here": 1}
    a, b = all_rows(there), all_rows(here)
    assert sum(len(rows) for rows in a.values()) > 10  # the run, its tables, its phases
    assert a == b  # every row of every table (the version table included)


def test_stopped_it_leaves_no_store_behind(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = python(END_CHILD, "stop", f"sqlite:///{db}")
    assert out["reaped"] is True
    assert not db.exists()  # an analysis that failed creates no store


def test_a_child_gone_is_a_store_error_and_nothing_recorded(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    out = python(END_CHILD, "kill", f"sqlite:///{db}", str(TESTS))
    assert out["error"] == "the run store's process ended before recording the run"
    assert out["reaped"] is True and "run_id" not in out
    assert not db.exists()


def test_a_bad_store_is_the_same_error_line(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    db.write_bytes(os.urandom(4096))
    before = db.read_bytes()
    url = f"sqlite:///{db}"
    with pytest.raises(StoreError) as here:
        RunStore(url)
    out = python(END_CHILD, "record", url, str(TESTS))
    assert out["error"] == str(here.value)
    assert out["reaped"] is True
    assert db.read_bytes() == before


def test_recorded_through_it_a_good_store_gives_the_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunStore(url):
        pass  # an existing, empty store: the child's run is its first
    out = python(END_CHILD, "record", url, str(TESTS))
    assert out["run_id"] == 1 and out["reaped"] is True
    with RunStore(url) as store:
        assert [info.id for info in store.find()] == [1]


def test_no_fork_where_threads_run() -> None:
    # numpy's pool already runs in this test process; a Python thread counts too.
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not beside.can_fork()
        assert beside.start() is None
    finally:
        stop.set()
        thread.join()


def test_the_store_process_imports_no_pandas() -> None:
    code = ("import json, sys\n"
            "import dlprof_lite.store.beside, dlprof_lite.store.database\n"
            "print(json.dumps({m: m in sys.modules for m in ('pandas', 'numpy')}))")  # fmt: skip
    assert python(code) == {"pandas": False, "numpy": False}


def test_a_failed_analysis_creates_no_store(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(os.urandom(8192))
    db = tmp_path / "runs.db"
    env = {**os.environ, "DLPROF_LITE_DB": f"sqlite:///{db}"}
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", "analyze", str(bad),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "error" in done.stderr
    assert not db.exists() and not (tmp_path / "out").exists()
