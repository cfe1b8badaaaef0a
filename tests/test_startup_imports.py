"""Each command imports only what it needs (issue 17: start-up must not dominate a small run).

Oracle: ``sys.modules`` of a fresh interpreter after the command ran. ``--help`` imports no
library of the analysis; a whole ``analyze`` (every default report, report.html included,
recorded in a run store already at its schema's head) imports neither plotly's Python
figure classes nor SQLAlchemy (its run store's own process records the run), nor torch; that
process imports neither Alembic nor pandas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dlprof_lite.store.database import RunStore

RUN = """
import json, sys
from dlprof_lite.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
tops = {m.split(".")[0] for m in sys.modules}
print(json.dumps(sorted(tops & {"pandas", "sqlalchemy", "alembic", "plotly", "torch", "scipy"})))
"""


def imported(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True,
                          check=True)  # fmt: skip
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_help_imports_no_analysis_library() -> None:
    assert imported("--help") == []


OPEN_STORE = """
import json, sys
from dlprof_lite.store.database import RunStore
RunStore(sys.argv[1]).close()
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"pandas", "alembic"})))
"""


def test_analyze_imports_no_plotly_classes_nor_alembic(corpus_dir: Path, tmp_path: Path) -> None:
    export = corpus_dir / "quasiben__nvtx-examples__cupy.sqlite"
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    imported("analyze", str(export), "-o", str(tmp_path / "a"), "--quiet", "--db", url)
    assert db.is_file()  # the first run created the store (a migration ran)
    found = imported("analyze", str(export), "-o", str(tmp_path / "b"), "--quiet", "--db", url)
    assert (tmp_path / "b" / "report.html").is_file()
    assert "pandas" in found  # the oracle sees imports
    # The run is recorded by the store's own process (store/beside.py): the analysing one
    # never imports SQLAlchemy; that process, opening a store at its head, imports neither
    # Alembic nor pandas.
    assert not {"plotly", "alembic", "torch", "scipy", "sqlalchemy"} & set(found), found
    with RunStore(url) as store:
        assert len(store.find()) == 2
    done = subprocess.run([sys.executable, "-c", OPEN_STORE, url], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
