"""Generate a training-like synthetic nsys export with known ground truth (``<path>.truth.json``).

Test and benchmark tooling, outside the ``annotate → launch → ingest → report`` pipeline: the
ingest and report stages are checked against the truth, and ``nsys stats`` against the file.
Per process and thread, a loop of iterations in the dlprof-lite annotation convention
(``iteration`` ⊃ ``data``/``forward``/``backward``/``optimizer`` ⊃ ``fwd:<layer>:<Type>`` /
``bwd:...`` ⊃ optionally one emit_nvtx-style range per kernel), all push/pop on the launching
thread; the step itself is modelled in ``profile_model.py``. Each thread launches on its own
device (device = process × threads + thread), stream ``7 + thread``; correlation ids are unique
per process and the same in every process. The truth is computed from the generated arrays,
never by reading the file back. Rows are made with numpy per chunk of iterations.

    python scripts/make_profile.py OUT.sqlite --kernels 1000000 [--per-kernel-ranges]
        [--threads N] [--processes N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import DOMAIN, PHASES
from nsys_db import NsysDb
from nsys_schema import NVTX_MARK, NVTX_PUSH_POP, global_pid, global_tid
from profile_model import (
    CATALOG,
    COPY,
    LAUNCH,
    SYNC,
    Layer,
    Template,
    build_model,
    build_template,
    host_gaps,
    simulate,
)

API_NAMES = {LAUNCH: "cudaLaunchKernel_v7000", COPY: "cudaMemcpyAsync_v3020",
             SYNC: "cudaStreamSynchronize_v3020"}  # fmt: skip
COPY_BYTES = 1 << 20
T0_NS = 500_000_000  # the session clock time where every thread's first iteration starts
DEFINITIONS = {
    "kernels": "per demangled kernel name: instances and total GPU ns (as nsys gpukernsum)",
    "ranges": "per range name (without domain prefix): push/pop kernels count in every enclosing "
    "range on the launching thread (as nsys nvtxkernsum, summed over kernel names); the "
    "start/end 'epoch' range counts every kernel of its process (docs/design.md's rule; nsys "
    "nvtxkernsum counts only its own thread's)",
    "host_gap": "idle ns on a device before a GPU op (kernel or memcpy, by start) whose launch "
    "call started after the previous op on that device ended; attributed to that op's "
    "iteration, phase and layer",
    "idle": "all idle ns between consecutive GPU ops of a device, host-bound or not",
}


class ThreadState:
    """One launching thread: ids, random stream, clock and counters across chunks."""

    def __init__(self, p: int, t: int, threads: int, seed: int) -> None:
        self.pid, self.t_index, self.threads = 1000 * (p + 1), t, threads
        self.tid = self.pid + t  # the main thread's tid is the pid, as on Linux
        self.device, self.stream, self.context = p * threads + t, 7 + t, 1 + t
        self.rng = np.random.default_rng([seed, p, t])
        self.clock = T0_NS + 2 * int(self.rng.integers(0, 50_000))
        self.first_start = self.clock
        self.api_calls = 0
        self.iterations = 0  # written so far (numbered step ranges count from it)
        self.gpu_end: int | None = None


@dataclass
class GroundTruth:
    """What a profile holds, computed while generating it (keys of the truth JSON)."""

    params: dict[str, Any]
    domain: str
    totals: dict[str, int]
    processes: list[dict[str, Any]]
    iterations: list[dict[str, Any]]
    phases: dict[str, dict[str, int]]
    layers: dict[str, dict[str, Any]]
    kernels: dict[str, dict[str, Any]]
    ranges: dict[str, dict[str, Any]]
    host_gap_by_device: dict[str, int]
    definitions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, **asdict(self)}

    @classmethod
    def load(cls, path: str | Path) -> GroundTruth:
        data = json.loads(Path(path).read_text())
        data.pop("schema")
        return cls(**data)


class TruthAccumulator:
    """Sums per op position over chunks (every iteration has the same ops), then names them."""

    def __init__(self, tpl: Template, model: list[Layer]) -> None:
        self.tpl, self.model = tpl, model
        self.op_count, self.op_ns, self.op_gap, self.op_step_gap = (
            np.zeros(len(tpl.op_tok), np.int64) for _ in range(4))  # fmt: skip
        self.last_end: dict[tuple[int, int], int] = {}  # per thread: its last iteration's end
        self.iterations = 0
        self.idle_ns = self.gap_count = 0
        self.by_device: dict[int, int] = {}
        self.by_pid: dict[int, list[int]] = {}  # pid -> [kernels, kernel ns]
        self.iters: dict[tuple[int, int], list[np.ndarray]] = {}
        self.epochs: list[int] = []

    def add(self, sim: dict[str, np.ndarray], st: ThreadState) -> None:
        tpl, n = self.tpl, sim["dur"].shape[0]
        launch = sim["cpu_start"][:, tpl.op_tok]
        idle, gap = host_gaps(sim["gpu_start"].ravel(), sim["gpu_end"].ravel(), launch.ravel(),
                              st.gpu_end)  # fmt: skip
        st.gpu_end = int(sim["gpu_end"].max())
        gap = gap.reshape(n, -1)
        k = tpl.op_cat >= 0
        self.iterations += n
        self.op_count += n
        self.op_ns += sim["dur"].sum(axis=0)
        self.op_gap += gap.sum(axis=0)
        self.idle_ns += int(idle.sum())
        self.gap_count += int((gap > 0).sum())
        self.by_device[st.device] = self.by_device.get(st.device, 0) + int(gap.sum())
        mine = self.by_pid.setdefault(st.pid, [0, 0])
        mine[0] += n * tpl.n_kernels
        mine[1] += int(sim["dur"][:, k].sum())
        it = tpl.range_push[0], tpl.range_pop[0]  # the iteration range is the first push
        step_gap = self._step_gaps(sim, gap, it, (st.pid, st.tid))
        self.op_step_gap += step_gap.sum(axis=0)
        cols = [sim["cpu_start"][:, it[0]], sim["cpu_end"][:, it[1]],
                sim["dur"][:, k].sum(axis=1), gap.sum(axis=1), step_gap.sum(axis=1)]  # fmt: skip
        self.iters.setdefault((st.pid, st.tid), []).append(np.stack(cols, axis=1))

    def _step_gaps(self, sim: dict[str, np.ndarray], gap: np.ndarray, it: tuple[int, int],
                   thread: tuple[int, int]) -> np.ndarray:  # fmt: skip
        """The part of each op's gap ``[start - gap, start]`` inside its step, the steps tiling
        the thread's time as the report's do (a step starts where the one before ended)."""
        t1 = sim["cpu_end"][:, it[1]]
        prev = self.last_end.get(thread, int(sim["cpu_start"][0, it[0]]))
        t0 = np.concatenate(([prev], t1[:-1]))
        self.last_end[thread] = int(t1[-1])
        start = sim["gpu_start"]
        lo = np.maximum(start - gap, t0[:, None])
        return np.where(gap > 0, np.maximum(np.minimum(start, t1[:, None]) - lo, 0), 0)

    def _kernels(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for g in np.flatnonzero(self.tpl.op_cat >= 0):
            c = CATALOG[self.tpl.op_cat[g]]
            row = out.setdefault(c.name, {"short_name": c.short, "tensor_core": c.tc,
                                          "instances": 0, "total_ns": 0})  # fmt: skip
            row["instances"] += int(self.op_count[g])
            row["total_ns"] += int(self.op_ns[g])
        return out

    def _ranges(self) -> dict[str, dict[str, Any]]:
        tpl, v = self.tpl, len(self.tpl.vocab)
        per_iter = np.bincount(tpl.range_name, minlength=v)
        k = tpl.op_cat[tpl.chain_op] >= 0
        kern = np.bincount(tpl.chain_name[k], self.op_count[tpl.chain_op[k]], v)
        ns = np.bincount(tpl.chain_name[k], self.op_ns[tpl.chain_op[k]], v)
        out = {
            name: {"domain": DOMAIN if reg else None, "style": "PushPop",
                   "instances": int(per_iter[i]) * self.iterations, "kernels": int(kern[i]),
                   "kernel_ns": int(ns[i])}
            for i, (name, reg) in enumerate(zip(tpl.vocab, tpl.vocab_registered, strict=True))
        }  # fmt: skip
        if self.epochs:
            out["epoch"] = {"domain": None, "style": "StartEnd", "instances": len(self.epochs),
                            "kernels": sum(self.by_pid[p][0] for p in self.epochs),
                            "kernel_ns": sum(self.by_pid[p][1] for p in self.epochs)}  # fmt: skip
        return out

    def _groups(self, key: np.ndarray, names: list[str]) -> list[dict[str, int]]:
        """Kernel/memop counts, ns, TC ns and host gap ns of the ops grouped by ``key``."""
        tc = np.array([CATALOG[c].tc if c >= 0 else False for c in self.tpl.op_cat])
        k = self.tpl.op_cat >= 0
        out = []
        for i in range(len(names)):
            m = key == i
            out.append({"kernels": int(self.op_count[m & k].sum()),
                        "kernel_ns": int(self.op_ns[m & k].sum()),
                        "tc_kernel_ns": int(self.op_ns[m & tc].sum()),
                        "memops": int(self.op_count[m & ~k].sum()),
                        "memop_ns": int(self.op_ns[m & ~k].sum()),
                        "host_gap_ns": int(self.op_gap[m].sum()),
                        "step_host_gap_ns": int(self.op_step_gap[m].sum())})  # fmt: skip
        return out

    def _layers(self) -> dict[str, dict[str, Any]]:
        tpl, names = self.tpl, [layer.name for layer in self.model]
        out: dict[str, dict[str, Any]] = {}
        both = self._groups(tpl.op_layer, names)
        fwd, bwd = (self._groups(np.where(tpl.op_dir == d, tpl.op_layer, -1), names)
                    for d in (0, 1))  # fmt: skip
        for i, layer in enumerate(self.model):
            out[layer.name] = {"type": layer.type, "tensor_core_kernels": layer.tc,
                               "fwd_kernels": fwd[i]["kernels"], "fwd_ns": fwd[i]["kernel_ns"],
                               "bwd_kernels": bwd[i]["kernels"], "bwd_ns": bwd[i]["kernel_ns"],
                               "tc_ns": both[i]["tc_kernel_ns"],
                               "host_gap_ns": both[i]["host_gap_ns"]}  # fmt: skip
        return out

    def _iterations(self) -> list[dict[str, Any]]:
        out = []
        for (pid, tid), parts in self.iters.items():
            a = np.concatenate(parts)
            out.append({"pid": pid, "tid": tid, "count": len(a), "start_ns": a[:, 0].tolist(),
                        "end_ns": a[:, 1].tolist(), "kernel_ns": a[:, 2].tolist(),
                        "host_gap_ns": a[:, 3].tolist(),
                        "step_host_gap_ns": a[:, 4].tolist()})  # fmt: skip
        return out

    def result(self, params: dict[str, Any], processes: list[dict[str, Any]]) -> GroundTruth:
        phases = dict(zip(PHASES, self._groups(self.tpl.op_phase, list(PHASES)), strict=True))
        k = self.tpl.op_cat >= 0
        tc = np.array([CATALOG[c].tc if c >= 0 else False for c in self.tpl.op_cat])
        totals = {
            "kernels": int(self.op_count[k].sum()), "kernel_ns": int(self.op_ns[k].sum()),
            "memops": int(self.op_count[~k].sum()), "memop_ns": int(self.op_ns[~k].sum()),
            "tc_kernel_ns": int(self.op_ns[tc].sum()), "host_gap_ns": int(self.op_gap.sum()),
            "host_gaps": self.gap_count, "idle_ns": self.idle_ns,
            "iterations": self.iterations, "api_calls": self.iterations * len(self.tpl.api_tok),
            "ranges": self.iterations * len(self.tpl.range_push) + len(self.epochs),
        }  # fmt: skip
        return GroundTruth(params=params, domain=DOMAIN, totals=totals, processes=processes,
                           iterations=self._iterations(), phases=phases, layers=self._layers(),
                           kernels=self._kernels(), ranges=self._ranges(),
                           host_gap_by_device={str(d): g for d, g in self.by_device.items()},
                           definitions=DEFINITIONS)  # fmt: skip


def _string_ids(db: NsysDb, tpl: Template) -> dict[str, Any]:
    """StringIds of API, kernel and registered range names; per-kernel launch shapes."""
    return {
        "api": db.string_ids(API_NAMES[int(k)] for k in tpl.kind[tpl.api_tok]),
        "kernel": db.string_ids(c.name for c in CATALOG),
        "short": db.string_ids(c.short for c in CATALOG),
        "grid": np.array([c.grid for c in CATALOG]), "block": np.array([c.block for c in CATALOG]),
        "regs": np.array([c.registers for c in CATALOG]),
        "vocab": np.array([db.string_id(v) if reg else 0
                           for v, reg in zip(tpl.vocab, tpl.vocab_registered, strict=True)]),
        "mark": db.string_id("step"),
    }  # fmt: skip


def write_chunk(db: NsysDb, tpl: Template, sim: dict[str, np.ndarray], st: ThreadState,
                ids: dict[str, Any]) -> None:  # fmt: skip
    """Insert the runtime, kernel, memcpy and synchronisation rows of one simulated chunk."""
    n = sim["cpu_start"].shape[0]
    calls = st.api_calls + np.arange(n * len(tpl.api_tok)).reshape(n, -1)
    st.api_calls += calls.size
    corr = 1 + calls * st.threads + st.t_index  # unique in a process, the same in every process
    api = tpl.api_tok
    db.runtimes({"start": sim["cpu_start"][:, api].ravel(), "end": sim["cpu_end"][:, api].ravel(),
                 "globalTid": global_tid(st.pid, st.tid), "correlationId": corr.ravel(),
                 "nameId": np.tile(ids["api"], n)})  # fmt: skip
    gpu = {"deviceId": st.device, "contextId": st.context, "streamId": st.stream,
           "globalPid": global_pid(st.pid)}  # fmt: skip
    k, op_corr = tpl.op_cat >= 0, corr[:, tpl.op_api]
    cat = tpl.op_cat[k]
    db.kernels({"start": sim["gpu_start"][:, k].ravel(), "end": sim["gpu_end"][:, k].ravel(),
                **gpu, "correlationId": op_corr[:, k].ravel(),
                "demangledName": np.tile(ids["kernel"][cat], n),
                "shortName": np.tile(ids["short"][cat], n),
                "registersPerThread": np.tile(ids["regs"][cat], n),
                "gridX": np.tile(ids["grid"][cat], n),
                "blockX": np.tile(ids["block"][cat], n)})  # fmt: skip
    if not k.all():
        db.insert("CUPTI_ACTIVITY_KIND_MEMCPY", {
            "start": sim["gpu_start"][:, ~k].ravel(), "end": sim["gpu_end"][:, ~k].ravel(),
            **gpu, "correlationId": op_corr[:, ~k].ravel(), "bytes": COPY_BYTES,
            "copyKind": 1, "srcKind": 1, "dstKind": 2})  # fmt: skip
    s = tpl.sync_tok
    db.insert("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", {
        "start": sim["cpu_start"][:, s], "end": sim["cpu_end"][:, s], **gpu,
        "correlationId": corr[:, tpl.sync_api], "syncType": 3, "eventId": 0xFFFFFFFF})  # fmt: skip


def write_ranges(db: NsysDb, tpl: Template, sim: dict[str, np.ndarray], st: ThreadState,
                 ids: dict[str, Any], numbered: bool = False) -> None:  # fmt: skip
    """Push/pop rows by start (registered names as textId in the dlprof-lite domain, emit_nvtx
    names as inline text in the default domain) and a ``step`` mark per iteration."""
    n = sim["cpu_start"].shape[0]
    start = sim["cpu_start"][:, tpl.range_push].ravel()
    order = np.argsort(start, kind="stable")
    name = np.tile(tpl.range_name, n)[order]
    inline = ~tpl.vocab_registered[name]
    text_id = ids["vocab"][name].astype(object)
    text_id[inline] = None
    text = np.asarray(tpl.vocab, dtype=object)[name]
    text[~inline] = None
    domain = np.where(inline, 0, ids["domain"])
    if numbered:  # the iteration range (each iteration's first push) named by its number
        first = np.zeros((n, len(tpl.range_push)), dtype=bool)
        first[:, 0] = True
        step = first.ravel()[order]
        text[step] = [f"iteration {st.iterations + i}" for i in range(n)]
        text_id[step] = None
        domain[step] = 0
    st.iterations += n
    gtid = global_tid(st.pid, st.tid)
    db.insert("NVTX_EVENTS", {
        "start": start[order], "end": sim["cpu_end"][:, tpl.range_pop].ravel()[order],
        "eventType": NVTX_PUSH_POP, "text": text, "globalTid": gtid, "textId": text_id,
        "domainId": domain,
    })  # fmt: skip
    db.insert("NVTX_EVENTS", {"start": sim["cpu_start"][:, 0] + 2, "eventType": NVTX_MARK,
                              "globalTid": gtid, "textId": ids["mark"], "domainId": 0})  # fmt: skip


def _describe(db: NsysDb, st: ThreadState) -> dict[str, Any]:
    """PROCESSES, ThreadNames, stream and GPU rows of one thread; its entry in the truth."""
    if st.t_index == 0:
        db.process(st.pid, "python3")
    db.thread(st.pid, st.tid, "python3" if st.t_index == 0 else f"Thread-{st.t_index}")
    db.stream(st.pid, st.stream, context=st.context)
    db.gpu(st.device, name="NVIDIA A100-SXM4-80GB", sm_count=108, compute=(8, 0), chip="GA100")
    return {"pid": st.pid, "tid": st.tid, "device": st.device, "stream": st.stream,
            "context": st.context}  # fmt: skip


def make_profile(path: str | Path, *, iterations: int, layers: int, kernels_per_layer: int,
                 threads: int = 1, processes: int = 1, per_kernel_ranges: bool = False,
                 seed: int = 0, optimizer_kernels: int | None = None, memcpy: bool = True,
                 stall_probability: float = 0.05, epoch_range: bool = True,
                 chunk_kernels: int = 250_000, numbered_steps: bool = False,
                 rank: int | None = None,
                 world_size: int | None = None) -> GroundTruth:  # fmt: skip
    """Write a synthetic export to ``path`` and its ground truth to ``<path>.truth.json``.

    Kernels per thread = ``iterations × (2 × layers × kernels_per_layer + optimizer_kernels)``
    (optimizer kernels default to ``max(1, layers // 4)``). ``stall_probability``: chance of a
    10-120 µs host stall before a launch. ``epoch_range``: one start/end range ``epoch`` per
    process, on its main thread, around all of its iterations. ``numbered_steps``: each
    iteration's range is the script's own ``iteration <n>`` (inline text, default domain, n
    from 0 per thread), as most scripts name their steps, not the annotation's ``iteration``.
    ``rank``: each process records the annotation's process fact, rank ``rank + process`` of
    ``world_size`` (one node's export of a job).
    """
    path = Path(path)
    model = build_model(layers, kernels_per_layer)
    opt = max(1, layers // 4) if optimizer_kernels is None else optimizer_kernels
    tpl = build_template(model, per_kernel_ranges=per_kernel_ranges, optimizer_kernels=opt,
                         memcpy=memcpy, stall_probability=stall_probability)  # fmt: skip
    states = [ThreadState(p, t, threads, seed) for p in range(processes) for t in range(threads)]
    truth = TruthAccumulator(tpl, model)
    per_chunk = max(1, chunk_kernels // max(1, tpl.n_kernels))
    with NsysDb(path) as db:
        ids = _string_ids(db, tpl)
        described = [_describe(db, st) for st in states]
        domains = {st.pid: db.domain(DOMAIN, pid=st.pid, tid=st.pid, start=T0_NS - 1000)
                   for st in states}  # fmt: skip
        for p, pid in enumerate(sorted(domains)) if rank is not None else []:
            db.mark(T0_NS - 900, fact_text("process", {
                "rank": rank + p, "local_rank": p, "world_size": world_size or processes,
            }), pid, pid, domain=DOMAIN)  # fmt: skip
        for lo in range(0, iterations, per_chunk):
            n = min(per_chunk, iterations - lo)
            for st in states:
                sim = simulate(tpl, n, st.rng, st.clock)
                st.clock = int(sim["next_clock"])
                write_chunk(db, tpl, sim, st, ids)
                write_ranges(db, tpl, sim, st, {**ids, "domain": domains[st.pid]},
                             numbered=numbered_steps)  # fmt: skip
                truth.add(sim, st)
        for pid in sorted(domains) if epoch_range else []:
            own = [st for st in states if st.pid == pid]
            start, end = min(s.first_start for s in own) - 1000, max(s.clock for s in own) + 1000
            db.start_end(start, end, "epoch", pid=pid, tid=pid)
            truth.epochs.append(pid)
    params = {"iterations": iterations, "layers": layers, "kernels_per_layer": kernels_per_layer,
              "threads": threads, "processes": processes, "per_kernel_ranges": per_kernel_ranges,
              "seed": seed, "optimizer_kernels": opt, "memcpy": memcpy,
              "stall_probability": stall_probability, "epoch_range": epoch_range}  # fmt: skip
    result = truth.result(params, described)
    Path(f"{path}.truth.json").write_text(json.dumps(result.to_dict()))
    return result


def plan(kernels: int, threads: int, processes: int, layers: int, kernels_per_layer: int) -> int:
    """Iterations for at least ``kernels`` kernels in all (default optimizer kernels)."""
    per_iteration = 2 * layers * kernels_per_layer + max(1, layers // 4)
    return max(1, math.ceil(kernels / (per_iteration * threads * processes)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a synthetic nsys export and its truth JSON.")
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=100_000, help="at least this many in all")
    ap.add_argument("--iterations", type=int, help="per thread; overrides --kernels")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kernels-per-layer", type=int, default=3)
    ap.add_argument("--per-kernel-ranges", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-memcpy", action="store_true")
    ap.add_argument("--numbered-steps", action="store_true",
                    help="name each iteration's range 'iteration <n>' (the script's own)")
    a = ap.parse_args(argv)
    iters = a.iterations or plan(a.kernels, a.threads, a.processes, a.layers, a.kernels_per_layer)
    t0 = time.perf_counter()
    truth = make_profile(a.out, iterations=iters, layers=a.layers,
                         kernels_per_layer=a.kernels_per_layer, threads=a.threads,
                         processes=a.processes, per_kernel_ranges=a.per_kernel_ranges,
                         seed=a.seed, memcpy=not a.no_memcpy,
                         numbered_steps=a.numbered_steps)  # fmt: skip
    t = truth.totals
    print(f"{a.out}: {t['kernels']} kernels, {t['api_calls']} API calls, {t['ranges']} ranges, "
          f"{iters} iterations x {a.threads * a.processes} threads, "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
