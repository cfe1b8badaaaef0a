"""Streaming engines against our reader on one export: time, peak memory, exact totals.

Issue 38 asks whether an engine that aggregates in bounded memory (DuckDB, Polars' streaming
engine) should replace or back the pandas path for exports larger than memory. This measures
each on the same file and the same question, the per-kernel-name totals of the kernels table
(instances, total, min and max ns: the kernels table's integer core), each in a fresh process
(its own peak RSS), every answer checked equal to the others, integer for integer:

- ``ours``: ``read_export`` as ``analyze`` runs it (every table the report needs, held in
  memory), then the totals by pandas.
- ``chunks``: no new dependency: the kernels streamed from SQLite by ADBC as Arrow record
  batches of 1M rows, summed batch by batch with numpy (bounded memory, exact int64 sums).
- ``duckdb``: the same Arrow batch stream aggregated by DuckDB (``GROUP BY``, streaming).
  DuckDB's own SQLite reader is an extension downloaded at run time: unavailable offline
  (clusters, CI), so it is not an option for a tool that must run there.
- ``polars``: ``pl.read_database`` on the ADBC connection, then ``group_by``: Polars'
  streaming engine reads only files it can scan (Parquet, CSV, IPC), not SQLite, so the
  table is read whole first.

    .venv/bin/python scripts/bench_engines.py EXPORT [--engines ours,chunks,duckdb,polars]

DuckDB and Polars are not dependencies of dlprof-lite: install them into the environment to
measure them (``pip install duckdb polars``); a missing one is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENGINES = ("ours", "chunks", "duckdb", "polars")
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
QUERY = f'SELECT shortName AS name, "end" - start AS ns FROM {KERNELS}'
BATCH_ROWS = 1 << 20


def totals_ours(path: Path) -> dict[int, list[int]]:
    """Our reader, then pandas: the kernels' names are categories of the read frame."""
    from dlprof_lite.ingest.reader import read_export

    raw = read_export(path)
    kernels = raw.kernels
    grouped = kernels.groupby("short_name", observed=True, sort=False)["dur_ns"].agg(
        ["count", "sum", "min", "max"])  # fmt: skip
    ids = _name_ids(path)
    return {ids[str(n)]: [int(v) for v in row] for n, row in grouped.iterrows()}


def _name_ids(path: Path) -> dict[str, int]:
    """Each kernel short name's StringIds id (ours reads names, the others ids)."""
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(f"SELECT DISTINCT k.shortName, s.value FROM {KERNELS} k "
                            "JOIN StringIds s ON s.id = k.shortName").fetchall()  # fmt: skip
    return {str(value): int(i) for i, value in rows}


def _batches(path: Path) -> tuple[Any, Any, Any]:
    """The kernels as a stream of Arrow record batches (ADBC's SQLite driver), with the
    connection and cursor that must stay open while it is read."""
    import adbc_driver_sqlite.dbapi as adbc
    from adbc_driver_sqlite import StatementOptions

    conn = adbc.connect(f"file:{path}?mode=ro")
    cursor = conn.cursor()
    cursor.adbc_statement.set_options(**{StatementOptions.BATCH_ROWS.value: str(BATCH_ROWS)})
    cursor.execute(QUERY)
    return conn, cursor, cursor.fetch_record_batch()


def totals_chunks(path: Path) -> dict[int, list[int]]:
    """Batch by batch with numpy: each batch sorted by name, reduced per name (exact int64
    sums), and merged into the running totals."""
    import numpy as np

    conn, _cursor, reader = _batches(path)
    out: dict[int, list[int]] = {}
    try:
        for batch in reader:
            names = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
            ns = batch.column(1).to_numpy(zero_copy_only=False).astype(np.int64)
            order = np.argsort(names, kind="stable")
            names, ns = names[order], ns[order]
            starts = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
            sums = np.add.reduceat(ns, starts)
            mins = np.minimum.reduceat(ns, starts)
            maxs = np.maximum.reduceat(ns, starts)
            counts = np.diff(np.r_[starts, len(names)])
            for i, name in enumerate(names[starts].tolist()):
                row = out.setdefault(name, [0, 0, int(mins[i]), int(maxs[i])])
                row[0] += int(counts[i])
                row[1] += int(sums[i])
                row[2] = min(row[2], int(mins[i]))
                row[3] = max(row[3], int(maxs[i]))
    finally:
        conn.close()
    return out


def totals_duckdb(path: Path) -> dict[int, list[int]]:
    import duckdb

    conn, _cursor, reader = _batches(path)
    try:
        db = duckdb.connect()
        db.register("kernels", reader)
        rows = db.execute("SELECT name, count(*), sum(ns)::BIGINT, min(ns), max(ns) "
                          "FROM kernels GROUP BY name").fetchall()  # fmt: skip
    finally:
        conn.close()
    return {int(r[0]): [int(v) for v in r[1:]] for r in rows}


def totals_polars(path: Path) -> dict[int, list[int]]:
    import adbc_driver_sqlite.dbapi as adbc
    import polars as pl

    with adbc.connect(f"file:{path}?mode=ro") as conn:
        frame = pl.read_database(QUERY, connection=conn)
    grouped = frame.lazy().group_by("name").agg(
        pl.len().alias("count"), pl.col("ns").sum(), pl.col("ns").min().alias("min"),
        pl.col("ns").max().alias("max"),
    ).collect()  # fmt: skip
    return {int(r[0]): [int(v) for v in r[1:]] for r in grouped.iter_rows()}


def child(engine: str, path: Path) -> None:
    """One engine in this (fresh) process: prints its totals, seconds and peak RSS."""
    began = time.perf_counter()
    try:
        totals = globals()[f"totals_{engine}"](path)
    except ImportError as err:
        print(json.dumps({"missing": str(err)}))
        return
    seconds = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb,
                      "totals": {str(k): v for k, v in sorted(totals.items())}}))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export", type=Path, help="an nsys SQLite export")
    ap.add_argument("--engines", default=",".join(ENGINES), help="which, comma-separated")
    ap.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.export)
        return 0
    kernels = _count(args.export)
    print(f"{args.export.name}: {kernels} kernels, {args.export.stat().st_size / 2**30:.2f} GiB")
    print(f"{'engine':>8} {'seconds':>8} {'peak MB':>8} {'MB/M kern':>9}  totals")
    reference: dict[str, list[int]] | None = None
    for engine in args.engines.split(","):
        done = subprocess.run([sys.executable, __file__, str(args.export), "--child", engine],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            print(f"{engine:>8} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if "missing" in result:
            print(f"{engine:>8} not installed ({result['missing']})")
            continue
        reference = reference or result["totals"]
        same = "equal" if result["totals"] == reference else "DIFFERENT"
        print(f"{engine:>8} {result['seconds']:8.2f} {result['peak_mb']:8.0f} "
              f"{result['peak_mb'] / (kernels / 1e6):9.0f}  {same} "
              f"({len(result['totals'])} names)")  # fmt: skip
    return 0


def _count(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {KERNELS}").fetchone()[0])


if __name__ == "__main__":
    raise SystemExit(main())
