"""The GPU check's run on the GPU machine, inside one time budget: probe, profile, oracles, bundle.

    python device.py --nsys TARGET_NSYS --out OUT [--budget 480] [--dry-run]

1. **Probe** what can profile there: the nsys target binary carried in (Nsight Systems 2024.2,
   whose ``.qdstrm`` the importer here reads: ``gpu_check.sh host``) with dlprof-lite's trace
   set less ``osrt`` (whose buffers add ~22 MB to every ``.qdstrm``) over the whole run; then
   captured from step :data:`CAPTURE_FROM` to the program's exit (what an importer that stops
   at CUDA calls it cannot name needs: workload.py), then ``--trace=cuda,nvtx``; and any
   nsys that machine has of its own (one ships inside Nsight Compute) if none worked.
2. **Profile** each configuration of :data:`CONFIGS` (priority order: what the time budget
   leaves out is the end of the list) under dlprof-lite's bootstrap, 30 steps, with the
   workload's CUDA-event oracle (workload.py) in the same process.
3. **ncu**: the tensor-pipe instruction counters of tc_probe.py's GEMMs, convolutions and
   attentions, where ncu can read counters there.
4. **Kineto**: the first configurations again under ``torch.profiler`` (kineto.py), no nsys.
5. **Bundle** what came out into ``results.tgz.NN`` parts of at most 15 MiB (the device tool
   brings back 8 files of 16 MiB), ``.qdstrm`` files in priority order while they fit 60 MiB;
   ``summary.txt`` says what ran, what failed and what was left out.

``--dry-run`` is the same logic on a machine without CUDA (tests/test_gpu_check.py): tiny
models on the CPU, 3 steps, ``--trace=nvtx`` (nsys's CUDA trace needs a GPU), ncu skipped.
Only the standard library and dlprof-lite's own launcher rules (its nsys switches) are used,
so it runs on the GPU machine's Python as it is.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlprof_lite.launch.nsys import PROFILE_DEFAULTS, Nsys, profile_args  # noqa: E402

CONFIGS = ("cnn:fp32", "cnn:bf16", "gpt:fp32", "gpt:bf16", "gpt:bf16:compile",
           "cnn:tf32", "gpt:tf32", "cnn:fp16", "gpt:fp16")  # fmt: skip
KINETO_CONFIGS = ("cnn:fp32", "cnn:bf16", "gpt:fp32", "gpt:bf16")
# dlprof-lite's defaults less osrt: the same CUDA, NVTX, cuBLAS and cuDNN events.
_NO_OSRT = "--trace=" + ",".join(
    t for t in PROFILE_DEFAULTS[0].split("=", 1)[1].split(",") if t != "osrt"
)
# The capture from the workload's start to its exit (workload.py --profiler-api says why).
CAPTURE = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")
CAPTURE_FROM = 3  # the steps before it make CUDA 13's one-time driver calls (workload.py)
PROBE_STEPS = CAPTURE_FROM + 2  # a captured probe records two steps
TRACE_SETS = {
    "whole_no_osrt": (_NO_OSRT,),
    "captured_no_osrt": (_NO_OSRT, *CAPTURE),
    "captured_cuda_nvtx": ("--trace=cuda,nvtx", *CAPTURE),
}
# What one profiled configuration may take on the GPU machine, and on the CPU (dry run).
COST_S = {"compile": 100.0, "run": 35.0}
DRY_COST_S = {"compile": 40.0, "run": 8.0}
TIMEOUT_S = {"probe": 60.0, "compile": 180.0, "run": 90.0, "ncu": 150.0}
PART_BYTES = 15 * 2**20
BUNDLE_BYTES = 60 * 2**20


@dataclass
class Check:
    out: Path
    work: Path
    start: float
    budget: float
    dry: bool
    python: str = sys.executable
    lines: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.start + self.budget - time.time()

    def say(self, line: str) -> None:
        stamp = f"[{time.time() - self.start:6.1f}s] {line}"
        print(stamp, flush=True)
        self.lines.append(stamp)


def run(check: Check, name: str, command: list[str], timeout: float) -> int | None:
    """Run ``command`` in its own process group, output to ``name.log``; None on timeout."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = check.work / f"{name}.log"
    with open(log, "w", encoding="utf-8") as out:
        out.write(" ".join(command) + "\n")
        out.flush()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=check.work, start_new_session=True)  # fmt: skip
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def workload_args(check: Check, config: str, name: str, steps: int,
                  captured: bool) -> list[str]:  # fmt: skip
    model, precision, *rest = config.split(":")
    args = [str(HERE / "workload.py"), "--model", model, "--precision", precision,
            "--steps", str(steps), "--oracle", str(check.work / f"{name}.oracle.json")]  # fmt: skip
    if rest == ["compile"]:
        args.append("--compile")
    if check.dry:
        args += ["--tiny", "--device", "cpu"]
    if captured:
        args += ["--capture-from", str(CAPTURE_FROM)]
    if os.environ.get("GPU_CHECK_NO_HOLD"):
        args.append("--no-hold")
    return args


def profile(check: Check, nsys: str, trace: tuple[str, ...], config: str, name: str,
            steps: int, timeout: float) -> bool:  # fmt: skip
    """One configuration under nsys and the bootstrap; True when the run and its trace ended."""
    program = [check.python, "-m", "dlprof_lite.annotate.bootstrap", "--status-file",
               str(check.work / f"{name}.status.json"),
               *workload_args(check, config, name, steps, CAPTURE[0] in trace)]  # fmt: skip
    tool = Nsys(nsys, (0,), "carried")
    command = profile_args(tool, check.work / name, program, extra=list(trace))
    began = time.time()
    code = run(check, name, command, timeout)
    made = sorted(p.name for p in check.work.glob(f"{name}.*")
                  if p.suffix in (".qdstrm", ".nsys-rep"))  # fmt: skip
    oracle = (check.work / f"{name}.oracle.json").is_file()
    ok = code == 0 and bool(made) and oracle
    sizes = ", ".join(f"{m} {(check.work / m).stat().st_size / 2**20:.1f} MiB" for m in made)
    check.say(f"{name}: exit {code}, {time.time() - began:.0f}s, oracle {'yes' if oracle else 'no'}"
              f", {sizes or 'no report'}{'' if ok else ' -- FAILED'}")  # fmt: skip
    return ok


def environment(check: Check) -> None:
    probes = {
        "nvidia-smi": ["nvidia-smi"],
        "python": [check.python, "-c", "import sys, torch; print(sys.version); "
                   "print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"],
    }  # fmt: skip
    lines = []
    for title, command in probes.items():
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            lines += [f"## {title}", done.stdout.strip(), done.stderr.strip()[-2000:]]
        except (OSError, subprocess.TimeoutExpired) as error:
            lines += [f"## {title}", f"failed: {error}"]
    lines += ["## nsys binaries", *own_nsys(), "## ncu", str(find_ncu())]
    (check.work / "env.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def own_nsys() -> list[str]:
    """nsys binaries the machine has of its own: Nsight Compute's and any on PATH."""
    found = sorted(glob.glob("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"))
    found += sorted(glob.glob("/opt/nvidia/nsight-systems*/*/target-linux-x64/nsys"))
    on_path = shutil.which("nsys")
    return [*found, *([on_path] if on_path else [])]


def find_ncu() -> str | None:
    return shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))),
                                       None)  # fmt: skip


def choose(check: Check, carried: str) -> tuple[str, tuple[str, ...]] | None:
    """The nsys and trace set the configurations run with: the first probe that worked."""
    chosen: tuple[str, tuple[str, ...]] | None = None
    traces = [("--trace=nvtx",)] if check.dry else list(TRACE_SETS.values())
    for index, trace in enumerate(traces):
        if profile(check, carried, trace, "cnn:fp32", f"probe_carried_{index}", PROBE_STEPS,
                   TIMEOUT_S["probe"]):  # fmt: skip
            chosen = (carried, trace)
            break
    for index, nsys in enumerate([] if check.dry or chosen else own_nsys()):
        trace = TRACE_SETS["captured_cuda_nvtx"]
        if profile(check, nsys, trace, "cnn:fp32", f"probe_own_{index}", PROBE_STEPS,
                   TIMEOUT_S["probe"]):
            return nsys, trace
    return chosen


def tensor_metrics(check: Check, ncu: str) -> list[str]:
    """The tensor-pipe instruction and cycle counters this ncu knows, as ``.sum`` metrics."""
    text = ""
    for extra in ([], ["--chip", "gh100"]):
        try:
            done = subprocess.run([ncu, "--query-metrics", *extra], capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        text = done.stdout
        if "tensor" in text:
            break
    tensor = [line for line in text.splitlines() if "tensor" in line]
    (check.work / "ncu_metrics.txt").write_text("\n".join(tensor) + "\n", encoding="utf-8")
    names = re.findall(r"^(sm__(?:inst_executed_pipe_tensor|pipe_tensor)\w*)", text, re.M)
    return [f"{name}.sum" for name in sorted(set(names))][:8]


def tensor_core_oracle(check: Check) -> None:
    ncu = find_ncu()
    if check.dry or ncu is None:
        check.say("ncu: skipped (" + ("dry run" if check.dry else "no ncu") + ")")
        return
    metrics = tensor_metrics(check, ncu)
    if not metrics:
        check.say("ncu: no tensor-pipe metric in --query-metrics; skipped")
        return
    command = [ncu, "--metrics", ",".join(metrics), "--csv", "--launch-count", "200",
               check.python, str(HERE / "tc_probe.py")]  # fmt: skip
    code = run(check, "ncu", command, min(TIMEOUT_S["ncu"], max(check.left() - 150, 30)))
    check.say(f"ncu: exit {code}, metrics {', '.join(metrics)}")


def kineto(check: Check, configs: list[str]) -> None:
    deadline = time.time() + max(check.left() - (10 if check.dry else 40), 0)
    if not configs or deadline - time.time() < (5 if check.dry else 30):
        check.say("kineto: skipped, no time left")
        return
    command = [check.python, str(HERE / "kineto.py"), "--out", str(check.work), "--deadline",
               str(deadline), *configs]  # fmt: skip
    if check.dry:
        command += ["--tiny", "--device", "cpu", "--steps", "4", "--first", "2"]
    code = run(check, "kineto", command, max(check.left() - 15, 20))
    check.say(f"kineto: exit {code}, {len(list(check.work.glob('kineto_*.tsv')))} configs")


def bundle(check: Check, names: list[str]) -> None:
    """Text first, then the reports in priority order while they fit; split into parts."""
    kinds = (".qdstrm", ".nsys-rep")
    files = sorted(p for p in check.work.iterdir() if p.is_file() and p.suffix not in kinds)
    reports = [check.work / f"{name}{kind}" for name in names for kind in kinds]
    reports += sorted(p for p in check.work.glob("probe_*") if p.suffix in kinds)
    total = sum(p.stat().st_size for p in files)
    for report in reports:
        if not report.is_file():
            continue
        if total + report.stat().st_size > BUNDLE_BYTES:
            check.say(f"bundle: {report.name} left out ({report.stat().st_size / 2**20:.1f} MiB)")
            continue
        files.append(report)
        total += report.stat().st_size
    summary = check.work / "summary.txt"
    summary.write_text("\n".join(check.lines) + "\n", encoding="utf-8")
    archive = check.work.parent / "results.tgz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        for path in [*files, summary]:
            tar.add(path, arcname=path.name)
    data = archive.read_bytes()
    for index in range(0, len(data), PART_BYTES):
        (check.out / f"results.tgz.{index // PART_BYTES:02d}").write_bytes(
            data[index:index + PART_BYTES])  # fmt: skip
    shutil.copy(summary, check.out / "summary.txt")
    check.say(f"bundle: {len(files)} files, {len(data) / 2**20:.1f} MiB in "
              f"{(len(data) + PART_BYTES - 1) // PART_BYTES} parts")  # fmt: skip
    summary.write_text("\n".join(check.lines) + "\n", encoding="utf-8")
    shutil.copy(summary, check.out / "summary.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsys", required=True, help="the carried nsys target binary")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu_check/work"))
    parser.add_argument("--budget", type=float, default=480.0, help="seconds in all")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models, no CUDA")
    parser.add_argument("--configs", type=lambda text: text.split(","), default=list(CONFIGS),
                        help="model:precision[:compile], comma-separated (default: all, "
                             "in priority order)")
    parser.add_argument("--no-probe", action="store_true",
                        help="profile with the carried nsys over the whole run at once")
    parser.add_argument("--profiles-only", action="store_true",
                        help="skip the ncu and Kineto oracles (a rerun of the profiles)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    check = Check(args.out, args.work, time.time(), args.budget, args.dry_run)
    environment(check)
    chosen = ((args.nsys, TRACE_SETS["whole_no_osrt"]) if args.no_probe
              else choose(check, args.nsys))  # fmt: skip
    done: list[str] = []
    if chosen is None:
        check.say("no nsys could profile here: configurations skipped")
    else:
        nsys, trace = chosen
        check.say(f"profiling with {nsys} {' '.join(trace)}")
        steps = 3 if check.dry else 30
        for config in args.configs:
            kind = "compile" if config.endswith(":compile") else "run"
            cost = (DRY_COST_S if check.dry else COST_S)[kind]
            # leave time for ncu and the Kineto oracle of the first configurations
            if check.left() - cost < (20 if check.dry or args.profiles_only else 170):
                check.say(f"{config}: skipped, the budget is spent")
                continue
            name = "run_" + config.replace(":", "_")
            if profile(check, nsys, trace, config, name, steps, TIMEOUT_S[kind]):
                done.append(name)
    if not args.profiles_only:
        tensor_core_oracle(check)
        kineto(check, [c for c in KINETO_CONFIGS if c in args.configs])
    (check.work / "configs.json").write_text(json.dumps({"done": done, "chosen": chosen}),
                                             encoding="utf-8")  # fmt: skip
    bundle(check, done)


if __name__ == "__main__":
    main()
