"""keep_freed_memory: a freed large block backs the next one without new page faults."""

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
