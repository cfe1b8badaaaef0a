"""Here, after the GPU run: import and analyse its profiles, hold each figure to its oracle.

    python scripts/gpu_check/compare.py RESULTS... [--work DIR] [--markdown FILE] [--nsys PATH]
        [--strict]

RESULTS is the folder the device tool brought back (``results.tgz.NN`` parts), several such
folders (oldest first: a later run's files replace an earlier one's), or one folder that
holds the unpacked files. The checks, each a table in ``--markdown`` (docs/gpu-validation.md
quotes them) and a line on the console:

* **import**: each run's ``.qdstrm`` through dlprof-lite's own import and export (nsys here);
* **layers**: per-layer forward time per step against the workload's own clock (CUDA events
  on the GPU: the layer's projected GPU span; ``perf_counter`` in the dry run: its wall
  time), for layers of at least 100 µs, within 5 %; and the step's backward;
* **kernels**: kernel executions and GPU time per step against Kineto's trace of the same
  configuration (separate runs: the time within 5 %, the executions equal);
* **tensor cores**: the kernel-name verdict against ncu's tensor-pipe MMA instructions
  (``hmma`` less ``hmma_type_hfma2``, which counts FP16 FMAs the tensor pipe also runs, plus
  ``gmma``, ``imma``, ``dmma``) on every kernel ncu sampled;
* **FP32 advice**: the share of kernel time in FP32 GEMM/convolution kernels on CUDA cores,
  from the Kineto kernels and dlprof-lite's rules, against the advice's threshold: it must
  fire for the FP32 runs and not for the BF16 ones;
* **mixed-precision advice**: dlprof-lite's own advice in each report recommends mixed
  precision (or TF32) for the FP32 runs and for no other;
* **FLOPs and MFU**: the report's FLOPs per step (counted in the profiled run, on its GPU)
  against ``FlopCounterMode`` on the GPU's real tensors, and the report's MFU against those
  FLOPs over the CUDA events' median step (same steps) and the GPU's peak, within 10 %.

``--strict`` exits 1 when a check that ran failed (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(HERE))

from dlprof_lite.errors import DlprofError  # noqa: E402
from dlprof_lite.ingest.tensorcore import classify_names_with_rules  # noqa: E402
from dlprof_lite.launch.nsys import export_sqlite  # noqa: E402
from dlprof_lite.rules.advice import THRESHOLDS  # noqa: E402
from dlprof_lite.rules.gemm import is_fp32_gemm  # noqa: E402
from dlprof_lite.rules.peaks import peak_tflops  # noqa: E402

LAYER_MIN_MS = 0.1
LAYER_TOLERANCE = 0.05
KERNEL_TOLERANCE = 0.05
MFU_TOLERANCE = 0.10
PEAK_DTYPE = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}


@dataclass
class Section:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    failed: int = 0
    checked: int = 0
    note: str = ""

    def add(self, row: list[Any], ok: bool | None = None) -> None:
        if ok is not None:
            self.checked += 1
            self.failed += 0 if ok else 1
            row = [*row, "yes" if ok else "**no**"]
        self.rows.append([str(v) for v in row])

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        if self.rows:
            lines += ["| " + " | ".join(self.header) + " |",
                      "|" + " --- |" * len(self.header)]  # fmt: skip
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                      for r in self.rows]  # fmt: skip
        return "\n".join(lines) + "\n"

    def verdict(self) -> str:
        if not self.checked and self.rows:
            return f"{self.title}: {len(self.rows)} rows (the oracles' own figures)"
        if not self.checked:
            return f"{self.title}: not checked{' (' + self.note + ')' if self.note else ''}"
        return f"{self.title}: {self.checked - self.failed}/{self.checked} within the oracle"


def unpack(results: list[Path], work: Path) -> Path:
    """The files of one or more device runs, in order (a later run's file replaces an
    earlier one's of the same name); a folder without parts is taken as already unpacked."""
    if len(results) == 1 and not any(results[0].glob("results.tgz.*")):
        return results[0]
    work.mkdir(parents=True, exist_ok=True)
    for result in results:
        parts = sorted(result.glob("results.tgz.*"))
        if not parts:
            raise SystemExit(f"compare: {result} holds no results.tgz.NN parts")
        archive = work / "results.tgz"
        with open(archive, "wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():  # a newer run's profile is analysed afresh
                stale = work / f"{member.name.split('.')[0]}.dlprof"
                if member.name.endswith(".qdstrm") and stale.is_dir():
                    shutil.rmtree(stale)
                    (work / f"{member.name.split('.')[0]}.sqlite").unlink(missing_ok=True)
            tar.extractall(work, filter="data")
        archive.unlink()
    return work


def runs(files: Path) -> list[str]:
    return sorted(p.name.removesuffix(".oracle.json") for p in files.glob("run_*.oracle.json"))


def short(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# -- import and analyse ----------------------------------------------------------------------


def analyse(files: Path, name: str, section: Section, nsys: str | None) -> Path | None:
    """The run's report folder, or None with the reason in ``section``."""
    report = files / f"{name}.dlprof"
    if report.is_dir():
        section.add([name, "analysed before"], True)
        return report
    made = [files / f"{name}{suffix}" for suffix in (".qdstrm", ".nsys-rep")]
    qdstrm = next((path for path in made if path.is_file()), None)
    if qdstrm is None:
        section.add([name, "no .qdstrm came back"], False)
        return None
    try:
        sqlite = export_sqlite(qdstrm, files / f"{name}.sqlite", nsys=nsys)
    except DlprofError as error:
        section.add([name, short(str(error), 400)], False)
        return None
    done = subprocess.run([sys.executable, "-m", "dlprof_lite", "analyze", str(sqlite), "-o",
                           str(report), "--no-db", "--quiet"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        section.add([name, short((done.stderr.strip().splitlines() or ["failed"])[-1], 300)],
                    False)  # fmt: skip
        return None
    section.add([name, "imported and analysed"], True)
    return report


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def window(report: Path) -> tuple[int, int]:
    data = summary_data(report)
    return int(data["window_iter_start"]), int(data["window_iter_stop"])


def compare_layers(report: Path, oracle: dict[str, Any], section: Section) -> None:
    """Per-layer forward per step (and the step's backward) against the workload's clock."""
    start, stop = window(report)
    first = int(oracle.get("captured_from") or 0)
    steps = list(range(first + start, first + stop))
    gpu = oracle["clock"] == "cuda_event"
    column = "projected_ns" if gpu else "wall_ns"
    ours: dict[str, float] = {}
    for row in read_csv(report / "ranges.csv"):
        parts = row["name"].split(":")
        if len(parts) >= 2 and parts[0] in ("fwd", "bwd"):
            label = "<root>" if row["depth"] == "0" else parts[1]
            key = f"{parts[0]}:{label}"
            ours[key] = ours.get(key, 0.0) + float(row[column]) / 1e6 / len(steps)
    for kind, prefix in (("forward", "fwd"), ("backward", "bwd")):
        # The events' own edge, measured on the GPU (workload.Hold), off each call.
        edge = float(oracle.get("event_edge_ms") or 0.0)
        calls = oracle.get("calls", {}).get(f"layer_{kind}", {})
        for label, per_step in sorted(oracle["ms"].get(f"layer_{kind}", {}).items()):
            made = calls.get(label, [0] * len(per_step))
            truth = statistics.fmean(per_step[s] - edge * made[s] for s in steps)
            if truth < LAYER_MIN_MS or f"{prefix}:{label}" not in ours:
                continue
            mine = ours[f"{prefix}:{label}"]
            error = mine / truth - 1
            section.add([oracle_name(oracle), f"{label} {kind}", f"{truth:.3f}", f"{mine:.3f}",
                         f"{error:+.1%}"], abs(error) <= LAYER_TOLERANCE)  # fmt: skip


def oracle_name(oracle: dict[str, Any]) -> str:
    return f"{oracle['model']} {oracle['precision']}{' compiled' if oracle['compiled'] else ''}"


# The workload's GPU sleep at the start of each step (workload.Hold): in the profiled runs,
# not in Kineto's (which runs without it), so left out of the kernel comparison.
HOLD_KERNEL = "spin_kernel"


def base_name(name: str) -> str:
    """A kernel's function name without its scope, template arguments or parameters.

    The two tools spell a kernel's full name differently (nsys writes a template's parameters
    as ``T1``, ``T4``, Kineto writes the arguments; one may keep a name mangled that the
    other demangled), so the kernels are matched by this.
    """
    if name.startswith("_Z"):
        name = demangle(name)
    depth, head = 0, []
    for char in name.removeprefix("void ").replace("(anonymous namespace)", "anon").strip():
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0 and head:
            break
        elif depth == 0:
            head.append(char)
    return "".join(head).rsplit("::", 1)[-1].strip()


@functools.cache
def demangle(name: str) -> str:
    """``c++filt``'s reading of a mangled name; where it has none (some cuDNN CUTLASS
    names), the last source name of the Itanium ABI's nested name (``_ZN17cutlass__5x_cudnn
    6KernelI...`` is ``Kernel``)."""
    done = subprocess.run(["c++filt", name], capture_output=True, text=True)
    if done.stdout.strip() not in ("", name):
        return done.stdout.strip()
    rest, last = name[3:] if name.startswith("_ZN") else name[2:], name
    while (number := re.match(r"\d+", rest)) is not None:
        size = int(number[0])
        last = rest[number.end():number.end() + size]
        rest = rest[number.end() + size:]
    return last


def by_base(rows: list[tuple[str, int, float]]) -> dict[str, tuple[int, float]]:
    totals: dict[str, tuple[int, float]] = {}
    for name, count, ns in rows:
        base = base_name(name)
        if base == HOLD_KERNEL:
            continue
        known = totals.get(base, (0, 0.0))
        totals[base] = (known[0] + count, known[1] + ns)
    return totals


def kineto_kernels(files: Path, config: str) -> dict[str, tuple[int, float]] | None:
    path = files / f"kineto_{config}.tsv"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return by_base([(r["kernel"], int(r["count"]), float(r["total_ns"])) for r in rows])


def compare_kernels(report: Path, files: Path, config: str, section: Section) -> None:
    """Executions and GPU time per step, by kernel function: ours against Kineto's."""
    theirs = kineto_kernels(files, config)
    if theirs is None:
        return
    flops = json.loads((files / f"flops_{config}.json").read_text(encoding="utf-8"))
    kineto_steps = flops["profiled_steps"][1] - flops["profiled_steps"][0]
    start, stop = window(report)
    ours = by_base([(r["name"], int(r["instances"]), float(r["total_ns"]))
                    for r in read_csv(report / "kernels.csv")])  # fmt: skip
    total_theirs = sum(ns for _, ns in theirs.values()) / kineto_steps
    total_ours = sum(ns for _, ns in ours.values()) / (stop - start)
    error = total_ours / total_theirs - 1
    section.add([config, "all kernels, ms per step", f"{total_theirs / 1e6:.3f}",
                 f"{total_ours / 1e6:.3f}", f"{error:+.1%}"],
                abs(error) <= KERNEL_TOLERANCE)  # fmt: skip
    per_step_theirs = {k: c / kineto_steps for k, (c, _) in theirs.items()}
    per_step_ours = {k: c / (stop - start) for k, (c, _) in ours.items()}
    differ = sorted(k for k in per_step_theirs.keys() | per_step_ours.keys()
                    if abs(per_step_ours.get(k, 0) - per_step_theirs.get(k, 0)) > 1e-9)  # fmt: skip
    section.add([config, "executions per step, by kernel function", len(theirs), len(ours),
                 ", ".join(f"{k} {per_step_theirs.get(k, 0):g}/{per_step_ours.get(k, 0):g}"
                           for k in differ[:6])], not differ)  # fmt: skip


# -- oracles that need no import ---------------------------------------------------------------


def tensor_cores(files: Path) -> Section:
    section = Section("Tensor Core verdicts against ncu",
                      ["kernel (ncu sampled)", "MMA instructions", "dlprof-lite", "rule",
                       "agree"])  # fmt: skip
    path = files / "ncu.log"
    if not path.is_file():
        section.note = "ncu did not run"
        return section
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.reader(line for line in handle if line.startswith('"')))
    if not rows:
        section.note = "ncu read no counters"
        return section
    head, body = rows[0], rows[1:]
    kernel, metric, value = (head.index(h) for h in ("Kernel Name", "Metric Name",
                                                      "Metric Value"))  # fmt: skip
    counts: dict[str, Counter[str]] = {}
    for row in body:
        counts.setdefault(row[kernel], Counter())[row[metric]] += float(
            row[value].replace(",", "") or 0)  # fmt: skip
    names = sorted(counts)
    verdicts, rules = classify_names_with_rules(names)
    for name, verdict, rule in zip(names, verdicts, rules):
        c = counts[name]
        mma = (c["sm__inst_executed_pipe_tensor_op_hmma.sum"]
               - c["sm__inst_executed_pipe_tensor_op_hmma_type_hfma2.sum"]
               + c["sm__inst_executed_pipe_tensor_op_gmma.sum"]
               + c["sm__inst_executed_pipe_tensor_op_imma.sum"]
               + c["sm__inst_executed_pipe_tensor_op_dmma.sum"])  # fmt: skip
        truth = "tc" if mma > 0 else "no_tc"
        section.add([short(name), f"{mma:,.0f}", verdict, rule], verdict == truth)
    return section


def fp32_advice(files: Path, tiny: bool) -> Section:
    threshold = THRESHOLDS["fp32_gemm_share_warn"].value
    section = Section("FP32 GEMM advice from the Kineto kernels",
                      ["config", "kernels", "TC time", "unknown", "FP32 GEMM share",
                       "advice fires", "as it should"])  # fmt: skip
    section.note = (f"The advice fires at an FP32 GEMM/convolution share of {threshold:.0%} "
                    "(rules/advice.py fp32_gemm_share_warn).")
    if tiny:  # a dry run's Kineto trace holds CPU ops, not kernels: nothing to judge
        section.note = "a dry run: Kineto recorded CPU ops, not GPU kernels"
        return section
    for path in sorted(files.glob("kineto_*.tsv")):
        config = path.stem.removeprefix("kineto_")
        kernels = kineto_kernels(files, config) or {}
        names = list(kernels)
        verdicts, _ = classify_names_with_rules(names)
        total = sum(ns for _, ns in kernels.values()) or 1.0
        by: Counter[str] = Counter()
        fp32 = 0.0
        for name, verdict in zip(names, verdicts):
            by[verdict] += kernels[name][1]
            if verdict == "no_tc" and is_fp32_gemm(name):
                fp32 += kernels[name][1]
        fires = fp32 / total >= threshold
        should = config.split("_")[1] == "fp32"
        section.add([config, len(names), f"{by['tc'] / total:.1%}", f"{by['unknown'] / total:.1%}",
                     f"{fp32 / total:.1%}", "yes" if fires else "no"],
                    fires == should)  # fmt: skip
    return section


def flops_and_mfu(files: Path, reports: dict[str, Path]) -> tuple[Section, Section]:
    """The report's FLOPs per step (counted in the profiled run, on its device) against
    ``FlopCounterMode`` on the GPU's real tensors; its MFU against the same FLOPs over the
    CUDA events' median step of the same steps and the GPU's peak."""
    flops = Section("FLOPs per step: dlprof-lite's count against FlopCounterMode on the GPU",
                    ["config", "FlopCounterMode (GPU, real tensors)", "dlprof-lite",
                     "difference", "equal within 0.1 %"])  # fmt: skip
    mfu = Section("MFU against FLOPs / CUDA-event step time",
                  ["config", "GPU", "median step (CUDA events)", "peak", "oracle MFU",
                   "dlprof-lite MFU", "difference", "within 10 %"])  # fmt: skip
    counted = {p.stem.removeprefix("flops_"): json.loads(p.read_text(encoding="utf-8"))
               for p in sorted(files.glob("flops_*.json"))}  # fmt: skip
    for name, report in sorted(reports.items()):
        config = name.removeprefix("run_")
        data = summary_data(report)
        oracle = json.loads((files / f"{name}.oracle.json").read_text(encoding="utf-8"))
        model = config.split("_")[0]
        truth = next((c["flops_per_step"] for k, c in counted.items()
                      if k == config or k.split("_")[0] == model), None)  # fmt: skip
        mine = data.get("model_flops_per_step")
        if config in counted and truth is not None:
            error = float(mine) / truth - 1 if mine else float("nan")
            flops.add([config, f"{truth:.4e}", f"{mine:.4e}" if mine else "none",
                       f"{error:+.2%}"], mine is not None and abs(error) <= 0.001)  # fmt: skip
        peak = peak_tflops(oracle["device_name"], PEAK_DTYPE[oracle["precision"]])
        if truth is None or not peak or oracle["clock"] != "cuda_event":
            continue
        if (oracle.get("hold") or {}).get("on"):
            continue  # a held step's GPU sleep is not in its events: see workload.Hold
        start, stop = window(report)
        first = int(oracle.get("captured_from") or 0)
        # dlprof-lite's MFU is over the steady (median) step: summary model_flops_per_s
        step_ms = statistics.median(oracle["ms"]["step"]["step"][first + start:first + stop])
        theirs = truth / (step_ms / 1e3) / (peak * 1e12)
        ours = data.get("mfu")
        error = float(ours) / theirs - 1 if ours else float("nan")
        mfu.add([config, oracle["device_name"], f"{step_ms:.2f} ms", f"{peak} T",
                 f"{theirs:.1%}", f"{ours:.1%}" if ours else "none", f"{error:+.1%}"],
                ours is not None and abs(error) <= MFU_TOLERANCE)  # fmt: skip
    if not mfu.checked:
        mfu.note = "no un-held GPU run with a known peak"
    return flops, mfu


def summary_data(report: Path) -> dict[str, Any]:
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    data: dict[str, Any] = summary.get("data", summary)
    return data


# The advice rules that recommend mixed precision (or TF32), by the metric each tests.
PRECISION_METRICS = ("eligible_non_tc_share", "fp32_gemm_share")


def precision_advice(files: Path, reports: dict[str, Path]) -> Section:
    """dlprof-lite's own advice in each report: mixed precision for the FP32 runs only."""
    section = Section("Mixed-precision advice in dlprof-lite's reports",
                      ["config", "advice (metric = value)", "fires", "should"])
    for name, report in sorted(reports.items()):
        oracle = json.loads((files / f"{name}.oracle.json").read_text(encoding="utf-8"))
        if oracle["clock"] != "cuda_event":
            continue
        fired = [r for r in read_csv(report / "advice.csv") if r["metric"] in PRECISION_METRICS]
        should = oracle["precision"] == "fp32"
        said = "; ".join(f"{r['problem']} ({r['metric']} = {float(r['value']):.2f})"
                         for r in fired)  # fmt: skip
        section.add([name.removeprefix("run_"), said or "-", "yes" if fired else "no",
                     "yes" if should else "no"], bool(fired) == should)  # fmt: skip
    if not section.checked:
        section.note = "no GPU run could be imported here"
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+",
                        help="the device runs' folders, oldest first")
    parser.add_argument("--work", type=Path, default=Path("gpu_check_results"))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--nsys", help="the nsys whose importer and export read the profiles")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check failed")
    args = parser.parse_args()
    files = unpack(args.results, args.work)
    env = (files / "env.txt").read_text(encoding="utf-8") if (files / "env.txt").is_file() else ""
    tiny = "dry run" in (files / "summary.txt").read_text(encoding="utf-8") or not env.count(
        "NVIDIA-SMI")  # fmt: skip
    imported = Section("Import and analysis", ["run", "result", "imported"])
    layers = Section("Per-layer time per step against the CUDA events",
                     ["config", "layer", "oracle ms", "dlprof-lite ms", "difference",
                      "within 5 %"])  # fmt: skip
    kernels = Section("Kernels per step against Kineto",
                      ["config", "what", "Kineto", "dlprof-lite", "difference", "equal"])
    reports: dict[str, Path] = {}
    for name in runs(files):
        report = analyse(files, name, imported, args.nsys)
        if report is None:
            continue
        reports[name] = report
        oracle = json.loads((files / f"{name}.oracle.json").read_text(encoding="utf-8"))
        compare_layers(report, oracle, layers)
        if oracle["clock"] == "cuda_event":
            compare_kernels(report, files, name.removeprefix("run_"), kernels)
    if not layers.checked:
        layers.note = "no run could be imported here"
    if not kernels.checked:
        kernels.note = "no GPU run could be imported here"
    flops, mfu = flops_and_mfu(files, reports)
    sections = [imported, layers, kernels, tensor_cores(files), precision_advice(files, reports),
                fp32_advice(files, tiny), flops, mfu]  # fmt: skip
    for section in sections:
        print(section.verdict())
    if args.markdown:
        args.markdown.write_text("\n".join(s.markdown() for s in sections), encoding="utf-8")
    if args.strict and any(s.failed for s in sections):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
