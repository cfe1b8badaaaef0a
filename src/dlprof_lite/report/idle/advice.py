"""Advice from the idle partition: the cause that keeps the GPU waiting, and the layer.

Place in the pipeline: report; :func:`dlprof_lite.report.advice.advise` adds these findings to
the others. One finding per cause whose idle time per step crosses ``idle_cause_*_pct`` of the
step's device time (wall x devices), with the layers and phases the idle table names for it.
Data waits and launch-bound gaps have findings of their own (``data_stall``, ``launch_bound``)
and are not repeated here; ``queued`` and ``unknown`` name no host work to change. A CPU-only
run (no device timeline ran anything) is judged on the main thread's time instead, for the
causes that are not its own compute: sync, comm, compile and gc.
"""

from __future__ import annotations

import pandas as pd

from dlprof_lite.durations import short
from dlprof_lite.report.summary_types import Advice, Summary, number
from dlprof_lite.rules.advice import THRESHOLDS, threshold
from dlprof_lite.rules.idle import DEVICE, HOST

_DEVICE_CAUSES = ("sync", "comm", "compile", "gc", "layer", "optimizer", "other")
_HOST_CAUSES = ("sync", "comm", "compile", "gc")

_PROBLEM = {
    "sync": "The GPU waits while the host synchronises",
    "comm": "The GPU waits while the host is inside collectives",
    "compile": "The GPU waits for torch.compile to compile",
    "gc": "The GPU waits for Python's garbage collector",
    "layer": "The GPU waits for host work inside layers",
    "optimizer": "The GPU waits for the optimizer's host work",
    "other": "The GPU waits for the training loop's own code",
}
_HOST_PROBLEM = {
    "sync": "The step waits in synchronising calls",
    "comm": "The step waits inside collectives",
    "compile": "The step waits for torch.compile to compile",
    "gc": "The step waits for Python's garbage collector",
}
_FIX = {
    "sync": "Remove host synchronisation from the step where it is named: .item(), .cpu(), "
            "printing or branching on a CUDA tensor's value, torch.cuda.synchronize(), a copy "
            "to pageable host memory. Keep values on the GPU and read them every N steps, or "
            "copy with non_blocking=True into pinned memory and read after a CUDA event.",
    "comm": "Overlap the collective with compute (DDP: bucket_cap_mb, no_sync() while "
            "accumulating gradients), or find the rank that arrives late: the others wait "
            "for it inside the call.",
    "compile": "Compile once, before the measured steps: mark dynamic dimensions "
               "(torch._dynamo.mark_dynamic or dynamic=True), keep shapes and Python values the "
               "graph depends on constant, and look for recompilations (TORCH_LOGS=recompiles).",
    "gc": "Collect less often inside the step: gc.freeze() once the model, optimizer and "
          "DataLoader exist (their objects leave the collector's generations), raise "
          "gc.set_threshold()'s first value, or gc.disable() in the loop and gc.collect() "
          "between epochs.",
    "layer": "The host's Python in these layers is slower than the GPU's work for them: "
             "torch.compile the module (fewer, fused launches), capture it in a CUDA graph, or "
             "move per-call Python (shape checks, building lists, tensor creation on the CPU) "
             "out of forward.",
    "optimizer": "Use a fused or foreach optimizer (torch.optim.AdamW(fused=True) or "
                 "foreach=True), zero_grad(set_to_none=True), and keep per-parameter Python "
                 "(clipping loops, logging norms) out of the step.",
    "other": "The loop's own code between phases keeps the GPU idle: log, compute metrics, "
             "save checkpoints every N steps, and move CPU-side bookkeeping off the step.",
}


def idle_advice(summary: Summary, idle: pd.DataFrame) -> list[Advice]:
    """One finding per material cause, most time first."""
    if idle.empty:
        return []
    gpu = bool(number(summary.totals.gpu_busy_ns))  # a CPU run's devices ran nothing
    kind, causes = (DEVICE, _DEVICE_CAUSES) if gpu else (HOST, _HOST_CAUSES)
    mine = idle[(idle["kind"] == kind).to_numpy(dtype=bool)]
    per = mine.groupby("cause", sort=False)[["step_mean_ns", "step_pct"]].sum()
    out = []
    for cause in per.sort_values("step_pct", ascending=False).index:
        pct, ns = float(per.loc[cause, "step_pct"]), float(per.loc[cause, "step_mean_ns"])
        grade = _grade(pct) if cause in causes else None
        if grade is None:
            continue
        places = _places(mine[(mine["cause"] == cause).to_numpy(dtype=bool)])
        where = ", ".join(f"{label} {short(ns)}" for label, _, ns in places)
        what = "the GPUs idled" if gpu else "the main thread spent"
        evidence = (f"{what} {short(ns)} per step ({pct:.1f}% of the step) on {cause}"
                    + (f"; most in {where}" if where else ""))  # fmt: skip
        problem = (_PROBLEM if gpu else _HOST_PROBLEM)[cause]
        layer = next((name for _, name, _ in places if name), "")
        if layer and cause in ("sync", "layer", "gc"):
            problem += f" (most in {layer})"
        severity, key = grade
        t = THRESHOLDS[key]
        metric = f"idle.step_pct[{kind} {cause}]"  # the idle table's rows of the cause
        out.append(Advice(problem, severity, evidence, _FIX[cause], metric, pct, t.value,
                          t.citation))  # fmt: skip
    return out


def _grade(pct: float) -> tuple[str, str] | None:
    if pct >= threshold("idle_cause_high_pct"):
        return "high", "idle_cause_high_pct"
    if pct >= threshold("idle_cause_warn_pct"):
        return "warn", "idle_cause_warn_pct"
    return None


def _places(rows: pd.DataFrame, count: int = 3) -> list[tuple[str, str, float]]:
    """The layers (else phases) with most of a cause's time per step, as (label, layer, ns):
    ``("conv1 (forward)", "conv1", 1.2e6)``, ``("the optimizer phase", "", 3e5)``."""
    layer = rows["layer"].fillna("").astype(str)
    phase = rows["phase"].fillna("").astype(str)
    top = (rows.assign(layer=layer, phase=phase).groupby(["layer", "phase"], sort=False)
           ["step_mean_ns"].sum().sort_values(ascending=False).head(count))  # fmt: skip
    out = []
    for key, ns in top.items():
        name, when = str(key[0]), str(key[1])  # type: ignore[index]  # a 2-level index
        label = f"{name} ({when})" if name and when else name or (f"the {when} phase" if when
                                                                 else "")  # fmt: skip
        if label and ns > 0:
            out.append((label, name, float(ns)))
    return out
