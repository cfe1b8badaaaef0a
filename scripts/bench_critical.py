"""Benchmark: what the critical path adds to ``analyze``, and what a what-if costs.

Not a test: it prints figures measured in one run. For each size it makes (or reuses)
``bench.py``'s synthetic export, reads it once, then builds the report with and without the
critical path (``report/build.py: _critical``) in alternation, ``--repeats`` times each,
and prints the medians: the read, the report without and with the path, the path alone, and
what it adds to ``analyze``'s own work (read + report), against issue 35's target of at most
15 %; then one replay of the whole graph (``dlprof-lite whatif``'s work), and ``nsys stats
-r nvtxkernsum`` on the same file for scale.

    python scripts/bench_critical.py                  # 1M kernels
    python scripts/bench_critical.py --sizes 100000,1000000 --repeats 5
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Case, export_for, nsys_cmd

TARGET_PCT = 15.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument("--work", type=Path, default=Path("/tmp/dlprof-bench"))
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--no-nsys", action="store_true", help="skip nsys stats")
    args = ap.parse_args(argv)

    import numpy as np

    import dlprof_lite.report.build as build
    from dlprof_lite.ingest.load import load
    from dlprof_lite.memory import release_freed_memory, tune_process
    from dlprof_lite.report.critical.graph import build_graph
    from dlprof_lite.report.critical.replay import replay
    from dlprof_lite.report.model import empty_critical, empty_critical_path

    tune_process()
    args.work.mkdir(parents=True, exist_ok=True)
    with_path = build._critical

    def without_path(*_: object) -> tuple[object, object]:
        return empty_critical(), empty_critical_path()

    for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
        path, _ = export_for(Case(size, False), args.work)
        t = time.perf_counter()
        profile = load(path)
        read_s = time.perf_counter() - t
        times: dict[str, list[float]] = {"with": [], "without": [], "alone": []}
        for _ in range(args.repeats):
            for name, fn in (("with", with_path), ("without", without_path)):
                build._critical = fn  # type: ignore[assignment]
                release_freed_memory()
                t = time.perf_counter()
                build.build_report(profile, between_tables=release_freed_memory)
                times[name].append(time.perf_counter() - t)
            build._critical = with_path
            t = time.perf_counter()
            with_path(profile, None)
            times["alone"].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        meta = profile.meta
        graph = build_graph(profile.kernels, profile.memops, profile.api, profile.ranges,
                            profile.iterations, span=(meta.session_start_ns, meta.session_end_ns))
        t = time.perf_counter()
        replay(graph, np.ones(graph.size))
        replay_s = time.perf_counter() - t
        added = 100 * med["alone"] / (read_s + med["without"])
        print(f"{size:,} kernels ({len(profile.kernels):,}; graph {graph.size:,} nodes)")
        print(f"  read {read_s:.2f} s; report without the path {med['without']:.2f} s, with it "
              f"{med['with']:.2f} s (medians of {args.repeats})")
        print(f"  critical path alone {med['alone']:.3f} s: {added:.1f} % added to analyze's work "
              f"(target <= {TARGET_PCT:g} %: {'met' if added <= TARGET_PCT else 'MISSED'})")
        print(f"  replay of the whole graph (whatif) {replay_s:.2f} s; peak RSS so far "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        nsys = shutil.which("nsys")
        if nsys and not args.no_nsys:
            out = args.work / "stats_out"
            out.mkdir(exist_ok=True)
            t = time.perf_counter()
            subprocess.run(nsys_cmd(nsys, path, out), capture_output=True, check=False)
            print(f"  nsys stats -r nvtxkernsum on the same file: {time.perf_counter() - t:.2f} s")
        del profile, graph
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
