"""The critical path on every real export of the corpus: replaying the graph unchanged gives
the export's times back exactly, and each step's path adds up to its time, never more.

A step's time (report/critical/path.py) runs from the previous step's completion, or its
start if later, to its own completion: the path ends on the step's last dependency by
construction, so it equals the step there, and it never starts before the step does.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import corpus_files
from dlprof_lite.ingest.load import load
from dlprof_lite.report.critical.graph import build_graph
from dlprof_lite.report.critical.path import critical_paths
from dlprof_lite.report.critical.replay import replay

pytestmark = pytest.mark.corpus
CORPUS = corpus_files()


def test_the_corpus_is_there(corpus_dir) -> None:
    """The corpus fixture: a skip with its reason on a user's clone, a failure under CI."""
    assert list(corpus_dir.glob("*.sqlite"))


@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_path_and_replay_on_real_exports(path) -> None:
    p = load(path)
    g = build_graph(p.kernels, p.memops, p.api, p.ranges, p.iterations,
                    span=(p.meta.session_start_ns, p.meta.session_end_ns))  # fmt: skip
    if g.size == 0:
        pytest.skip("no main thread: no ranges, no launch calls")
    again = replay(g, np.ones(g.size))
    assert np.array_equal(again.start, g.start) and np.array_equal(again.end, g.end)
    assert (g.slack >= -1).all()
    path = critical_paths(g)
    p = path.pieces(g)
    per_step = np.bincount(p.step, weights=p.t1 - p.t0,
                           minlength=g.step_start.size).astype(np.int64)  # fmt: skip
    assert np.array_equal(per_step, path.length)
    assert (p.t1 > p.t0).all()
    # never before the step's start, never after its completion
    assert (p.t0 >= path.begin[p.step]).all()
    assert (p.t1 <= path.completion[p.step]).all()
    assert (path.begin >= g.step_start).all()
    # the chunks the table sums are the same pieces
    chunked = sum(int((c.t1 - c.t0).sum()) for c in path.chunks(g))
    assert chunked == int(path.length.sum())


@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_the_recorded_sync_streams_are_the_exports(path) -> None:
    """api.sync_stream against SQL on the file itself: each CUDA call's first
    synchronisation record (same process and correlation id) and its stream, where it names
    one (CUPTI writes 2^32 - 1 for none)."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" not in tables:
            api = load(path).api
            assert "sync_stream" not in api.columns
            return
        want = {}
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
            if table not in tables:
                continue
            rows = con.execute(
                f"SELECT r.start, y.streamId FROM {table} r JOIN "
                "(SELECT correlationId, globalPid, streamId, MIN(rowid) FROM "
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION GROUP BY correlationId, globalPid) y "
                "ON y.correlationId = r.correlationId "
                "AND ((y.globalPid >> 24) & 16777215) = ((r.globalTid >> 24) & 16777215) "
                "WHERE y.streamId >= 0 AND y.streamId < 2147483647").fetchall()
            want.update({int(s): int(k) for s, k in rows})
    api = load(path).api
    got = api[api["sync_stream"].notna().to_numpy(bool)]
    assert dict(zip(got["start_ns"].tolist(), got["sync_stream"].astype(int).tolist(),
                    strict=True)) == want  # fmt: skip
