"""keep_freed_memory: a freed large block backs the next one without new page faults;
collect_less_often: only the command line changes the cyclic collector's thresholds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Touch a 200 MB array, free it, touch another: page faults of the second allocation.
PROBE = """
import json, resource, sys
import numpy as np
from dlprof_lite.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
np.ones(25_000_000)  # 200 MB, freed at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(25_000_000)
print(json.dumps({"applied": applied,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _probe(mode: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    # 4 KiB pages, so that fault counts are proportional to fresh memory touched.
    clean |= {"NUMPY_MADVISE_HUGEPAGE": "0", **env}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=clean, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and "glibc" in os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="the setting applies to glibc's malloc on Linux only")
def test_freed_large_blocks_are_reused_without_page_faults() -> None:
    plain, kept = _probe("plain"), _probe("keep")
    assert kept["applied"] is True
    # Without the setting the second 200 MB (~49k pages) is mapped afresh.
    assert plain["faults"] > 40_000
    assert kept["faults"] < plain["faults"] / 10


def test_a_users_own_malloc_tuning_wins() -> None:
    assert _probe("keep", MALLOC_ARENA_MAX="2")["applied"] is False


# Which pool Arrow allocates from once the command line's settings are applied.
ARROW_POOL = """
import sys
from dlprof_lite.memory import keep_freed_memory
keep_freed_memory()
import pyarrow
print(pyarrow.default_memory_pool().backend_name)
"""


@pytest.mark.skipif(not _glibc(), reason="the setting applies to glibc's malloc on Linux only")
@pytest.mark.parametrize(("users", "expected"), [(None, "system"), ("jemalloc", "jemalloc")])
def test_arrow_allocates_from_the_heap_unless_the_user_chose(users, expected) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "ARROW_DEFAULT_MEMORY_POOL"}  # fmt: skip
    if users is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = users
    out = subprocess.run([sys.executable, "-c", ARROW_POOL], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.split()[-1] == expected


# The command line, then a library user: the collector's thresholds each process ends with.
THRESHOLDS = """
import contextlib, gc, io, json, sys
import dlprof_lite.cli as cli
from dlprof_lite.ingest.load import load
imported = gc.get_threshold()
if sys.argv[1] == "cli":
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        cli.main(["--help"])
print(json.dumps({"imported": imported, "after": gc.get_threshold()}))
"""


def _thresholds(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", THRESHOLDS, mode], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


def test_only_the_command_line_collects_less_often() -> None:
    from dlprof_lite.memory import COLLECT_THRESHOLDS

    default = json.loads(subprocess.run(
        [sys.executable, "-c", "import gc, json; print(json.dumps(gc.get_threshold()))"],
        capture_output=True, text=True, check=True).stdout)  # fmt: skip
    library, command = _thresholds("library"), _thresholds("cli")
    # Importing the package (a notebook) leaves the interpreter's collector as it was.
    assert library["imported"] == library["after"] == default
    assert command["imported"] == default
    assert command["after"] == list(COLLECT_THRESHOLDS) != default
