"""Benchmark: ``dlprof-lite analyze`` of a job's many rank exports on a Dask cluster.

Not a test: it prints figures measured in one run. It makes (or reuses) ``--ranks`` synthetic
rank exports of ``--kernels`` kernels each (``make_profile.py``, each recording its rank; rank
``--slow-rank`` runs two more kernels per layer, the straggler), then for each worker count of
``--workers`` starts a Dask ``LocalCluster`` (one thread per worker process) and runs

    dlprof-lite analyze rank*.sqlite -o OUT --no-db --formats csv,json --dask-scheduler ADDR

in a child process, timing it and sampling every worker's memory. It prints the wall time,
the driver's peak RSS (the child's own), the largest worker's peak RSS beside one rank analysed
alone (``analyze rank00.sqlite``), checks the outputs (a report per rank, the cross-rank
tables, the straggler named) and the speed-up from 1 to 2 workers.

    python scripts/bench_ranks.py --ranks 64 --kernels 200000 --workers 1,2
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import measure
from make_profile import make_profile

LAYERS, PER_LAYER = 8, 12  # the benchmark's main shape: 194 kernels per iteration


def exports(work: Path, ranks: int, kernels: int, slow: int) -> list[Path]:
    paths = []
    per_iteration = 2 * LAYERS * PER_LAYER + max(1, LAYERS // 4)
    for rank in range(ranks):
        path = work / f"rank{rank:03d}.sqlite"
        if not path.exists():
            make_profile(path, iterations=max(1, round(kernels / per_iteration)), layers=LAYERS,
                         kernels_per_layer=PER_LAYER + (2 if rank == slow else 0), seed=rank,
                         rank=rank, world_size=ranks)  # fmt: skip
        paths.append(path)
    return paths


class WorkerMemory:
    """The peak RSS of each worker process of a cluster, sampled every 0.1 s."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self._procs = [psutil.Process(p) for p in pids]
        self.peak = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in self._procs:
                with contextlib.suppress(Exception):  # a worker gone: nothing to sample
                    self.peak[proc.pid] = max(self.peak[proc.pid], proc.memory_info().rss)
            time.sleep(0.1)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return max(self.peak.values()) / 2**20


def run(paths: list[Path], workers: int, out: Path, timeout: float) -> tuple[float, float, float]:
    import os

    from distributed import Client, LocalCluster

    shutil.rmtree(out, ignore_errors=True)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit=0) as cluster, Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        memory = WorkerMemory(pids)
        cmd = [sys.executable, "-m", "dlprof_lite", "analyze", *map(str, paths), "-o", str(out),
               "--quiet", "--no-db", "--formats", "csv,json", "--dask-scheduler",
               cluster.scheduler_address]  # fmt: skip
        done = measure(cmd, timeout)
        worker_mb = memory.stop()
    if done.returncode != 0:
        raise SystemExit(f"analyze exited {done.returncode}")
    return done.wall_s, done.peak_rss_mb, worker_mb


def check(out: Path, ranks: int, slow: int) -> str:
    folders = [p for p in out.iterdir() if p.is_dir() and p.name.endswith(".dlprof")]
    with open(out / "ranks.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    named = [int(r["rank"]) for r in table if r["straggler"] == "True"]
    ok = len(folders) == ranks and len({r["rank"] for r in table}) == ranks and named == [slow]
    return (f"{len(folders)} rank reports, ranks table of {len({r['rank'] for r in table})} "
            f"ranks, straggler {named or 'none'} (planted {slow}): {'ok' if ok else 'WRONG'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=200_000, help="per rank")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--slow-rank", type=int, default=17)
    ap.add_argument("--work", type=Path, default=Path("/tmp/dlprof-bench-ranks"))
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = exports(args.work, args.ranks, args.kernels, args.slow_rank)
    print(f"{args.ranks} rank exports of ~{args.kernels} kernels ({time.perf_counter() - t0:.0f} s"
          f" to make or find)", flush=True)  # fmt: skip
    alone = measure([sys.executable, "-m", "dlprof_lite", "analyze", str(paths[0]), "-o",
                     str(args.work / "alone"), "--force", "--quiet", "--no-db", "--formats",
                     "csv,json"], args.timeout)  # fmt: skip
    print(f"one rank alone: {alone.wall_s:.2f} s, peak RSS {alone.peak_rss_mb:.0f} MB", flush=True)
    print(f"{'workers':>8} {'wall s':>8} {'driver MB':>10} {'worker MB':>10}  outputs")
    walls = {}
    for workers in [int(w) for w in args.workers.split(",") if w.strip()]:
        out = args.work / f"out{workers}"
        wall, driver, worker = run(paths, workers, out, args.timeout)
        walls[workers] = wall
        print(f"{workers:>8} {wall:8.1f} {driver:10.0f} {worker:10.0f}  "
              f"{check(out, args.ranks, args.slow_rank)}", flush=True)  # fmt: skip
    if 1 in walls and 2 in walls:
        print(f"1 -> 2 workers: {walls[1] / walls[2]:.2f}x faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
