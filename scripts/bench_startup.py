"""Benchmark: start-up, a small export, many exports and the run form (issue 17, targets 2-4).

Not a test: it prints figures measured in one run, each next to nsys's own tool on the same
input in the same run (``nsys stats``; ``nsys export`` for the run form). Wall times are the
fastest of ``--repeats`` runs of the installed ``dlprof-lite`` command.

    python scripts/bench_startup.py                        # help, small, many, run
    python scripts/bench_startup.py --only small,help --repeats 5
    python scripts/bench_startup.py --small X.sqlite --corpus DIR --no-nsys

- ``help``: ``dlprof-lite --help`` (target <= 0.3 s).
- ``small``: ``dlprof-lite analyze SMALL -o DIR`` with every default report, recording into
  a run store, and with ``--no-db`` (target <= 0.8 s). A first run fills the run store and
  the plotly.js cache of a fresh temporary home (shown as "first run"); the timed runs
  find both, as a user's second run does.
- ``many``: ``dlprof-lite analyze CORPUS/*.sqlite -o DIR`` (target <= 10 s), and how many
  times the worker pool was started (once).
- ``run``: ``dlprof-lite examples/lenet.py --steps 20``: from the script's end (the mtime of
  its status file) to the report path printed, broken down: nsys finishing its report,
  ``nsys export``, then ours: read, analysis, writing, store, the rest (target: ours <= 2 s).

The ``many`` and ``run`` figures come from a child process that runs the CLI in-process
with timers wrapped around a few of its functions (``--driver``); the modules it wraps are
imported before the timed window either way, so no import moves out of it.

Before measuring, ``src/dlprof_lite`` is byte-compiled as ``scripts/setup.sh`` does (where
PYTHONDONTWRITEBYTECODE is set, an edited module would otherwise be compiled at every run).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
SMALL = CORPUS / "quasiben__nvtx-examples__cupy.sqlite"
NSYS_REPORTS = "nvtxkernsum,kernexecsum,gpukernsum"  # as scripts/bench.py
CLI = [sys.executable, "-m", "dlprof_lite"]
TIMINGS_ENV = "DLPROF_BENCH_TIMINGS"  # the driver writes its timings (JSON) there


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(cmd: Sequence[str], env: dict[str, str], *, cwd: Path | None = None) -> float:
    """Seconds ``cmd`` ran; a failure stops the benchmark with its output."""
    return timed(cmd, env, cwd=cwd)[0]


def timed(cmd: Sequence[str], env: dict[str, str], *,
          cwd: Path | None = None) -> tuple[float, float]:  # fmt: skip
    """Wall and CPU seconds (user + system, its children included) of ``cmd``: on a shared
    machine the CPU time is the steadier figure."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                 f"{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip
    return seconds, cpu


def fastest(cmd: Sequence[str], env: dict[str, str], repeats: int,
            before: Callable[[], None] = lambda: None) -> float:  # fmt: skip
    return fastest_cpu(cmd, env, repeats, before)[0]


def fastest_cpu(cmd: Sequence[str], env: dict[str, str], repeats: int,
                before: Callable[[], None] = lambda: None) -> tuple[float, float]:  # fmt: skip
    """The fastest wall time and the least CPU time of ``repeats`` runs."""
    runs = []
    for _ in range(repeats):
        before()
        runs.append(timed(cmd, env))
    return min(w for w, _ in runs), min(c for _, c in runs)


def fresh(path: Path) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def row(label: str, ours: float | None, theirs: float | None, target: str, note: str = "") -> None:
    o = f"{ours:9.2f}" if ours is not None else f"{'-':>9}"
    t = f"{theirs:11.2f}" if theirs is not None else f"{'-':>11}"
    ratio = f"{theirs / ours:8.1f}x" if ours and theirs else f"{'-':>9}"
    print(f"{label:<34} {o} {t} {ratio}  {target:<10} {note}", flush=True)


def nsys_stats(nsys: str | None, paths: Sequence[Path], env: dict[str, str],
               work: Path) -> float | None:  # fmt: skip
    """``nsys stats`` on each path in turn (one command per export, as a user runs it)."""
    if nsys is None:
        return None
    total = 0.0
    for i, path in enumerate(paths):
        out = work / f"stats-{i}"
        total += wall([nsys, "stats", "-r", NSYS_REPORTS, "--format", "csv",
                       "--force-export=false", "-o", str(out), str(path)], env)  # fmt: skip
    return total


def bench_help(args: argparse.Namespace, env: dict[str, str]) -> None:
    ours = fastest([*CLI, "--help"], env, args.repeats)
    theirs = fastest([args.nsys, "--help"], env, args.repeats) if args.nsys else None
    row("dlprof-lite --help (vs nsys --help)", ours, theirs, "<= 0.3 s")


def bench_small(args: argparse.Namespace, env: dict[str, str], work: Path) -> None:
    out = work / "small.dlprof"
    cmd = [*CLI, "analyze", str(args.small), "-o", str(out)]
    fresh(out)()
    first = wall(cmd, env)  # creates the run store and the plotly.js cache
    with_db, db_cpu = fastest_cpu(cmd, env, args.repeats, fresh(out))
    no_db, no_db_cpu = fastest_cpu([*cmd, "--no-db"], env, args.repeats, fresh(out))
    theirs = nsys_stats(args.nsys, [args.small], env, work)
    row("analyze SMALL", with_db, theirs, "<= 0.8 s",
        f"CPU {db_cpu:.2f} s; first run {first:.2f} s; SMALL: {args.small.name}")  # fmt: skip
    row("analyze SMALL --no-db", no_db, theirs, "<= 0.8 s", f"CPU {no_db_cpu:.2f} s")


def bench_many(args: argparse.Namespace, env: dict[str, str], work: Path) -> None:
    paths = sorted(args.corpus.glob("*.sqlite"))
    if not paths:
        print(f"many: no .sqlite in {args.corpus}: skipped")
        return
    out = work / "many"
    cmd = [sys.executable, __file__, "--driver", "many", "--",
           "analyze", *map(str, paths), "-o", str(out), "--quiet"]  # fmt: skip
    pools: list[int] = []

    def run() -> None:
        fresh(out)()
        pools.append(driven(cmd, env, work)["pools"])

    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    theirs = nsys_stats(args.nsys, paths, env, work)
    row(f"analyze {len(paths)} corpus exports", min(times), theirs, "<= 10 s",
        f"worker pool started {max(pools)} time(s)")  # fmt: skip


def driven(cmd: Sequence[str], env: dict[str, str], work: Path,
           cwd: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the driver; its timings."""
    timings = work / "timings.json"
    timings.unlink(missing_ok=True)
    wall(cmd, {**env, TIMINGS_ENV: str(timings)}, cwd=cwd)
    found: dict[str, Any] = json.loads(timings.read_text())
    return found


RUN_PARTS = (  # (label, start event, end event) of the run form's breakdown
    ("nsys finishing its report", "program_end", "profile_done"),
    ("nsys export", "export_start", "export_end"),
    ("read", "analyze_start", "read_end"),
    ("analysis", "read_end", "analyze_end"),
    ("writing", "analyze_end", "written"),
    ("store", "store_start", "store_end"),
)


def bench_run(args: argparse.Namespace, env: dict[str, str], work: Path) -> None:
    if args.nsys is None:
        print("run: no nsys: skipped")
        return
    out = work / "lenet.dlprof"
    cmd = [sys.executable, __file__, "--driver", "run", "--", "-o", str(out), "--force",
           str(ROOT / "examples" / "lenet.py"), "--steps", "20"]  # fmt: skip
    best: dict[str, float] | None = None
    for _ in range(args.run_repeats):
        fresh(out)()
        t = driven(cmd, env, work, cwd=work)
        if best is None or t["shown"] - t["program_end"] < best["shown"] - best["program_end"]:
            best = t
    assert best is not None
    total = best["shown"] - best["program_end"]
    parts = {label: best[b] - best[a] for label, a, b in RUN_PARTS}
    nsys_s = parts["nsys finishing its report"] + parts["nsys export"]
    ours = total - nsys_s
    row("run form: script end -> report path", total, None, "", "of which:")
    for label, seconds in parts.items():
        row(f"  {label}", seconds, None, "")
    row("  rest (staging, console, imports)", ours - sum(
        v for k, v in parts.items() if not k.startswith("nsys")), None, "")  # fmt: skip
    row("run form: ours (vs nsys export)", ours, parts["nsys export"], "<= 2 s")


# --- the driver: the CLI in this process, with timers -------------------------------------


@contextmanager
def _recording() -> Iterator[dict[str, float]]:
    events: dict[str, float] = {}
    yield events
    Path(os.environ[TIMINGS_ENV]).write_text(json.dumps(events))


def _timed(events: dict[str, float], start: str | None, end: str,
           func: Callable[..., Any]) -> Callable[..., Any]:  # fmt: skip
    def wrapper(*a: Any, **k: Any) -> Any:
        if start:
            events[start] = time.time()
        try:
            return func(*a, **k)
        finally:
            events[end] = time.time()

    return wrapper


def drive(kind: str, argv: list[str]) -> int:
    """Run ``dlprof-lite argv`` here with the timers of ``kind`` (``run`` or ``many``).
    Times are ``time.time()``: the program's end is a file's mtime."""
    import dlprof_lite.batch as batch
    import dlprof_lite.cli as cli
    import dlprof_lite.cli_run as run_form
    import dlprof_lite.pipeline as pipeline

    with _recording() as ev:
        if kind == "many":
            ev["pools"] = 0
            pool = batch._pool

            def counted(workers: int) -> Any:
                ev["pools"] += 1
                return pool(workers)

            batch._pool = counted  # type: ignore[assignment]
            return cli.main(argv)
        import dlprof_lite.launch.run as run  # imported before the program runs either way

        statuses = run.read_statuses

        def ended(status_dir: Path) -> Any:
            # Polled while the program runs, then once after nsys exits: the status file is
            # last written as the program ends.
            times = [p.stat().st_mtime for p in status_dir.glob("status-*.json")]
            if times:
                ev["program_end"] = max(times)
            return statuses(status_dir)

        run.read_statuses = ended  # type: ignore[assignment]
        run.supervise = _timed(ev, None, "profile_done", run.supervise)  # type: ignore[assignment]
        run.export_sqlite = _timed(ev, "export_start", "export_end", run.export_sqlite)  # type: ignore[assignment]
        pipeline._analyze = _timed(ev, "analyze_start", "analyze_end", pipeline._analyze)  # type: ignore[assignment]
        pipeline.report_profiled = _timed(ev, None, "written", pipeline.report_profiled)  # type: ignore[assignment]
        run_form.record_report = _timed(ev, "store_start", "store_end", run_form.record_report)  # type: ignore[assignment]
        run_form.show_report = _timed(ev, None, "shown", run_form.show_report)  # type: ignore[assignment]

        @contextmanager
        def progress(*_: Any) -> Iterator[Callable[[Any], None]]:
            def advance(stage: Any) -> None:  # the first stage after reading ends it
                if str(stage) != "reading" and "read_end" not in ev:
                    ev["read_end"] = time.time()

            yield advance

        run_form.progress_bar = progress  # type: ignore[assignment]
        return cli.main(argv)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="help,small,many,run", help="which benchmarks")
    ap.add_argument("--small", type=Path, default=SMALL, help="the small export")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="folder of exports (many)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; fastest shown")
    ap.add_argument("--run-repeats", type=int, default=2, help="profiled runs (run form)")
    ap.add_argument("--no-nsys", action="store_true", help="no nsys figures (nor the run form)")
    ap.add_argument("--driver", choices=("run", "many"), help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.driver:
        return drive(args.driver, args.rest[1:] if args.rest[:1] == ["--"] else args.rest)
    args.nsys = None if args.no_nsys else shutil.which("nsys")
    compileall.compile_dir(ROOT / "src" / "dlprof_lite", quiet=1)
    with tempfile.TemporaryDirectory(prefix="dlprof-bench-") as tmp:
        work = Path(tmp)
        # A fresh home for the run store and the plotly.js cache: the user's stay untouched.
        env = {k: v for k, v in os.environ.items() if k != "DLPROF_LITE_DB"}
        env.update(XDG_DATA_HOME=str(work / "data"), XDG_CACHE_HOME=str(work / "cache"))
        print(f"{'':<34} {'ours s':>9} {'nsys s':>11} {'nsys/ours':>9}  target")
        chosen = args.only.split(",")
        if "help" in chosen:
            bench_help(args, env)
        for name, bench in (("small", bench_small), ("many", bench_many), ("run", bench_run)):
            if name in chosen:
                bench(args, env, work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
