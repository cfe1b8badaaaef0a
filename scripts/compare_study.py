"""The compare study: how often ``compare`` calls noise a change, and how often it finds one.

Two commands:

    python scripts/compare_study.py record --out /tmp/study --rounds 60
    python scripts/compare_study.py pack --out /tmp/study     # into tests/fixtures/compare_study
    python scripts/compare_study.py replay                      # docs/compare.md's table

``record`` profiles the bundled LeNet example (``examples/lenet.py``, CPU) many times with
``dlprof-lite``: first a few calibration runs of the unchanged code (their median step sets
the injected slowdowns' size), then rounds. Each round makes two runs of the unchanged code and
one of each injected slowdown (1, 3, 5 and 10 % of the calibrated median step, busy time added
to ``conv2``'s forward: ``--slow-layer conv2 --slow-ms``), in a shuffled order, under one of
three background loads (none, one or two CPU-bound processes), so the runs of every condition
are made at different times and loads. Only the report's CSV tables are kept (no export, no
trace). ``manifest.tsv`` lists every run with its condition, round, load and start time.

``replay`` reads the committed fixtures and forms disjoint pairs (:func:`study_pairs`):
unchanged-code pairs and injected pairs, one run a side and three runs a side, and prints the
false-change rate and the power of each; then the false-change rate of three a side again over
``RESAMPLED_PAIRS`` overlapping unchanged pairs per design (:func:`resampled_pairs`), a finer
estimate than 20 disjoint pairs allow.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlprof_lite.store.record import RunRecord

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "compare_study"
EXAMPLE = ROOT / "examples" / "lenet.py"
SLOW_LAYER = "conv2"
SIZES_PCT = (1, 3, 5, 10)
STEPS = 40
CALIBRATION_RUNS = 5
LOADS = (0, 1, 2)  # CPU-bound background processes during a round
KEEP = ("summary.csv", "iterations.csv", "layers.csv", "kernels.csv", "ranges.csv",
        "timeline.csv", "ranks.csv", "advice.csv")  # fmt: skip
MANIFEST_FIELDS = ("name", "condition", "pct", "slow_ms", "round", "load", "started", "seconds")


def _dlprof() -> str:
    return str(Path(sys.executable).with_name("dlprof-lite"))


def _profile(out: Path, name: str, slow_ms: float | None) -> float:
    """One profiled run into ``out/name`` (CSV tables only); returns its wall seconds."""
    folder = out / "runs" / name
    cmd = [_dlprof(), "-o", str(folder), "--force", "--no-db", "--formats", "csv", "--quiet",
           str(EXAMPLE), "--steps", str(STEPS)]  # fmt: skip
    if slow_ms is not None:
        cmd += ["--slow-layer", SLOW_LAYER, "--slow-ms", f"{slow_ms:.4f}"]
    start = time.monotonic()
    # One intra-op thread: with two, torch's threads wait for each other behind the
    # background load and a step takes 5 to 50 times longer, a contention few training
    # machines see; one thread leaves the load a plain share of the CPU.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for attempt in range(3):  # nsys now and then fails to start on a loaded machine
        if subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=out, env=env).returncode == 0:
            break
        print(f"{name}: dlprof-lite failed (attempt {attempt + 1}), again", flush=True)
        shutil.rmtree(folder, ignore_errors=True)  # what the failed run left
        time.sleep(5)
    else:
        raise SystemExit(f"{name}: dlprof-lite failed three times")
    for item in folder.iterdir():
        if item.name not in KEEP:
            item.unlink()
    return time.monotonic() - start


def _median_step_ms(folder: Path) -> float:
    with (folder / "summary.csv").open() as f:
        row = next(csv.DictReader(f))
    return float(row["iterations_median_ns"]) / 1e6


def _append(out: Path, row: dict[str, object]) -> None:
    path = out / "manifest.tsv"
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, MANIFEST_FIELDS, delimiter="\t")
        if new:
            writer.writeheader()
        writer.writerow(row)


def _done(out: Path) -> dict[str, dict[str, str]]:
    path = out / "manifest.tsv"
    if not path.exists():
        return {}
    with path.open() as f:
        return {row["name"]: row for row in csv.DictReader(f, delimiter="\t")}


def _background(load: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]


def _run(out: Path, name: str, condition: str, pct: float, slow_ms: float | None,
         round_: int, load: int) -> None:  # fmt: skip
    started = datetime.now(UTC).isoformat(timespec="seconds")
    seconds = _profile(out, name, slow_ms)
    _append(out, {"name": name, "condition": condition, "pct": pct,
                  "slow_ms": f"{slow_ms or 0.0:.4f}", "round": round_, "load": load,
                  "started": started, "seconds": f"{seconds:.1f}"})  # fmt: skip
    print(f"{started} {name} load={load} {seconds:.1f} s", flush=True)


def record(out: Path, rounds: int, seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    for i in range(CALIBRATION_RUNS):
        name = f"calibration-{i + 1:02d}"
        if name not in done:
            _run(out, name, "unchanged", 0, None, 0, 0)
    base_ms = sorted(_median_step_ms(out / "runs" / f"calibration-{i + 1:02d}")
                     for i in range(CALIBRATION_RUNS))[CALIBRATION_RUNS // 2]  # fmt: skip
    print(f"calibrated median step: {base_ms:.3f} ms", flush=True)
    rng = random.Random(seed)
    for r in range(1, rounds + 1):
        plan: list[tuple[str, float]] = [("unchanged-a", 0), ("unchanged-b", 0)]
        plan += [(f"slow{p:02d}", p) for p in SIZES_PCT]
        rng.shuffle(plan)
        load = rng.choice(LOADS)
        todo = [(c, p) for c, p in plan if f"r{r:03d}-{c}" not in _done(out)]
        if not todo:
            continue
        hogs = _background(load)
        try:
            for condition, pct in todo:
                slow = base_ms * pct / 100.0 if pct else None
                kind = "slow" if pct else "unchanged"
                _run(out, f"r{r:03d}-{condition}", kind, pct, slow, r, load)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()


def pack(out: Path) -> None:
    FIXTURE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "manifest.tsv", FIXTURE / "manifest.tsv")
    target = FIXTURE / "runs.tar.xz"
    with tarfile.open(target, "w:xz", preset=9) as tar:
        for folder in sorted((out / "runs").iterdir()):
            for item in sorted(folder.iterdir()):
                info = tar.gettarinfo(str(item), arcname=f"{folder.name}/{item.name}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with item.open("rb") as f:
                    tar.addfile(info, f)
    print(f"{target}: {target.stat().st_size / 1e3:.0f} kB", flush=True)


# --- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One comparison of the study: its design, condition and what compare said."""

    design: str  # "1 run a side", "3 runs a side, back to back", "3 runs a side, spread"
    pct: int  # injected slowdown, 0 for unchanged code
    verdict: str
    change_pct: float
    beyond_minimum: bool  # one run a side: |change| beyond the one-run minimum effect
    gate_failed: bool  # --gate GATE_PCT
    layer_flagged: bool  # some layer called slower or faster (run-level, Holm)
    layer_first: bool  # the slowed layer (forward) ranked first
    layer_found: bool  # ranked first and called slower (tested designs)
    pooled_differ: bool  # the old rule: Mann-Whitney over the pooled steps, p < 0.05


GATE_PCT = 5.0
RESAMPLED_PAIRS = 200  # overlapping unchanged pairs per three-a-side design
DESIGNS = ("1 run a side", "3 runs a side, back to back", "3 runs a side, spread in time")


def _records(root: Path) -> dict[str, RunRecord]:
    from dlprof_lite import open_report
    from dlprof_lite.compare.resolve import record_of_report

    return {p.name: record_of_report(open_report(p), p) for p in sorted(root.iterdir())
            if not p.name.startswith(".")}  # fmt: skip


def _manifest(folder: Path) -> list[dict[str, str]]:
    with (folder / "manifest.tsv").open() as f:
        return sorted(csv.DictReader(f, delimiter="\t"), key=lambda r: r["started"])


def study_pairs(manifest: list[dict[str, str]]) -> list[tuple[str, int, list[str], list[str]]]:
    """The study's disjoint pairs: (design, injected %, baseline run names, side run names).

    ``U``: the rounds' unchanged runs in time order; ``S_p``: the runs with p % injected.
    One run a side: U[i] against U[i + len/2] (made half the study apart), and U[i]
    against S_p[i + len/2] (mod len). Three a side, from triples *back to back* (three
    consecutive runs, as ``--repeat 3`` makes them) or *spread in time* (runs a third of
    the study apart): unchanged, triple i against triple i + len/2; injected, U triple i
    against S_p triple i. Within a design and size no run serves twice.
    """
    unchanged = [r["name"] for r in manifest if r["condition"] == "unchanged"
                 and r["round"] != "0"]  # fmt: skip
    slowed = {p: [r["name"] for r in manifest if r["condition"] == "slow" and int(r["pct"]) == p]
              for p in SIZES_PCT}  # fmt: skip
    pairs: list[tuple[str, int, list[str], list[str]]] = []
    half = len(unchanged) // 2
    pairs += [(DESIGNS[0], 0, [unchanged[i]], [unchanged[i + half]]) for i in range(half)]
    for p, runs in slowed.items():
        n = len(runs)
        pairs += [(DESIGNS[0], p, [unchanged[i]], [runs[(i + n // 2) % n]])
                  for i in range(min(n, len(unchanged)))]  # fmt: skip
    for design, triples in ((DESIGNS[1], _back_to_back), (DESIGNS[2], _spread)):
        base = triples(unchanged)
        k = len(base) // 2
        pairs += [(design, 0, base[i], base[i + k]) for i in range(k)]
        for p, runs in slowed.items():
            side = triples(runs)
            pairs += [(design, p, base[i], side[i]) for i in range(min(len(base), len(side)))]
    return pairs


def _back_to_back(names: list[str]) -> list[list[str]]:
    return [names[i : i + 3] for i in range(0, len(names) - 2, 3)]


def _spread(names: list[str]) -> list[list[str]]:
    k = len(names) // 3
    return [[names[i], names[i + k], names[i + 2 * k]] for i in range(k)]


def fixture_records(folder: Path) -> dict[str, RunRecord]:
    """The study's runs read from its fixtures (unpacked into a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(folder / "runs.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        return _records(Path(tmp))


def replay(folder: Path, gate_pct: float = GATE_PCT) -> list[Outcome]:
    """Every study pair compared."""
    return compare_pairs(fixture_records(folder), _manifest(folder), gate_pct)


def compare_pairs(
    records: dict[str, RunRecord], manifest: list[dict[str, str]], gate_pct: float = GATE_PCT
) -> list[Outcome]:
    """Every study pair of ``manifest`` compared, from the runs' ``records``."""
    from scipy.stats import mannwhitneyu

    from dlprof_lite.compare.comparison import compare_sides
    from dlprof_lite.compare.deltas import LAYER
    from dlprof_lite.compare.gate import gate
    from dlprof_lite.compare.side import Side
    from dlprof_lite.compare.stats import FASTER, SLOWER

    out = []
    for design, pct, base, side in study_pairs(manifest):
        sides = [Side("A", tuple(records[n] for n in base)),
                 Side("B", tuple(records[n] for n in side))]  # fmt: skip
        c = compare_sides(sides, resamples=500, detectable=gate_pct / 100.0)
        step = c.steps[0]
        layers = c.section(LAYER, "B")
        first = next((d for d in layers if d.rank == 1), None)
        is_slowed = first is not None and (first.name, first.direction) == (SLOW_LAYER,
                                                                             "forward")
        flagged = any(d.verdict in (SLOWER, FASTER) for d in layers)
        found = is_slowed and first is not None and any(
            d.rank == 1 and d.verdict == SLOWER for d in layers)
        minimum = step.minimum_effect_pct
        pooled = mannwhitneyu(sides[1].step_ns(), sides[0].step_ns()).pvalue < 0.05
        out.append(Outcome(
            design, pct, step.verdict, step.median_pct.value,
            minimum is not None and abs(step.median_pct.value) > minimum,
            gate(c, gate_pct).failed, flagged, is_slowed, found, bool(pooled),
        ))  # fmt: skip
    return out


def resampled_pairs(
    manifest: list[dict[str, str]], count: int, seed: int = 1
) -> list[tuple[str, list[str], list[str]]]:
    """``count`` random pairs of unchanged triples per three-a-side design, overlapping
    (a run may serve in many pairs, never on both sides of one): a finer estimate of the
    false-change rate than the 20 disjoint pairs, at the price of dependent pairs."""
    rng = random.Random(seed)
    unchanged = [r["name"] for r in manifest if r["condition"] == "unchanged"
                 and r["round"] != "0"]  # fmt: skip
    out: list[tuple[str, list[str], list[str]]] = []
    for design, triples in ((DESIGNS[1], _back_to_back), (DESIGNS[2], _spread)):
        if design == DESIGNS[1]:  # every run of three consecutive, not only aligned ones
            pool = [unchanged[i : i + 3] for i in range(len(unchanged) - 2)]
        else:
            pool = triples(unchanged)
        while sum(d == design for d, _, _ in out) < count:
            a, b = rng.sample(pool, 2)
            if not set(a) & set(b):
                out.append((design, a, b))
    return out


def resampled_false_rates(
    records: dict[str, RunRecord], manifest: list[dict[str, str]], count: int
) -> dict[str, tuple[int, int, int]]:
    """Per three-a-side design: (pairs, step called slower/faster, some layer called so)
    over :func:`resampled_pairs` of unchanged code."""
    from dlprof_lite.compare.comparison import compare_sides
    from dlprof_lite.compare.deltas import LAYER
    from dlprof_lite.compare.side import Side
    from dlprof_lite.compare.stats import FASTER, SLOWER

    out: dict[str, tuple[int, int, int]] = {}
    for design, base, side in resampled_pairs(manifest, count):
        sides = [Side("A", tuple(records[n] for n in base)),
                 Side("B", tuple(records[n] for n in side))]  # fmt: skip
        c = compare_sides(sides, resamples=200, detectable=GATE_PCT / 100.0)
        step = c.steps[0].verdict in (SLOWER, FASTER)
        layer = any(d.verdict in (SLOWER, FASTER) for d in c.section(LAYER, "B"))
        n, s, la = out.get(design, (0, 0, 0))
        out[design] = (n + 1, s + step, la + layer)
    return out


def _rate(hits: int, n: int, digits: int = 0) -> str:
    return f"{hits}/{n} ({100.0 * hits / n:.{digits}f} %)" if n else "-"


def markdown(outcomes: list[Outcome]) -> str:
    """The study's table: per design and condition, how often compare said what."""
    lines = ["| design | injected | pairs | slower/faster | any layer flagged | slowed layer "
             f"ranked first | found (first and slower) | --gate {GATE_PCT:g} fails | pooled "
             "steps differ |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for design in DESIGNS:
        for pct in (0, *SIZES_PCT):
            rows = [o for o in outcomes if o.design == design and o.pct == pct]
            if not rows:
                continue
            n = len(rows)
            tested = design != DESIGNS[0]
            verdicts = sum(o.verdict in ("slower", "faster") for o in rows)
            beyond = sum(o.beyond_minimum for o in rows)
            said = _rate(verdicts, n) if tested else f"untested; beyond minimum {_rate(beyond, n)}"
            cells = [design, f"{pct} %" if pct else "none", str(n), said,
                     _rate(sum(o.layer_flagged for o in rows), n) if tested else "untested",
                     _rate(sum(o.layer_first for o in rows), n),
                     _rate(sum(o.layer_found for o in rows), n) if tested else "untested",
                     _rate(sum(o.gate_failed for o in rows), n),
                     _rate(sum(o.pooled_differ for o in rows), n)]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def resampled_markdown(rates: dict[str, tuple[int, int, int]]) -> str:
    """The false-change rates over overlapping unchanged pairs, as a table."""
    lines = ["| design | overlapping unchanged pairs | step slower/faster | any layer flagged |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for design, (n, step, layer) in rates.items():
        lines.append(f"| {design} | {n} | {_rate(step, n, 1)} | {_rate(layer, n, 1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="profile the study's runs (resumes where it stopped)")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--rounds", type=int, default=60)
    rec.add_argument("--seed", type=int, default=20261127)
    pk = sub.add_parser("pack", help="pack a recorded study into tests/fixtures/compare_study")
    pk.add_argument("--out", type=Path, required=True)
    sub.add_parser("replay", help="the study's rates from the committed fixtures")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if args.command == "record":
        record(args.out.absolute(), args.rounds, args.seed)
    elif args.command == "pack":
        pack(args.out.absolute())
    else:
        records, manifest = fixture_records(FIXTURE), _manifest(FIXTURE)
        print(markdown(compare_pairs(records, manifest)))
        print()
        print(resampled_markdown(resampled_false_rates(records, manifest, RESAMPLED_PAIRS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
