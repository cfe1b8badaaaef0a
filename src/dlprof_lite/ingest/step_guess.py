"""Whether a guessed key range holds training steps: the test every guess must pass.

Place in the pipeline: ingest, called by :mod:`dlprof_lite.ingest.iterations` for each key a
rule guessed (numbered ranges, root-model calls, the most-repeated range;
:data:`dlprof_lite.rules.iterations.GUESSED`). A guess is accepted when its iterations after
the first (the key-node rule's, from the end of the first instance to the end of the last):

- hold at least :data:`GUESS_MIN_COVERAGE` of the GPU busy time (the union of every GPU op
  per ``(pid, device)`` timeline); a profile without GPU work: of the main thread's annotated
  time (the union of its top-level ranges; the main thread is the one with the most);
- have a median wall time of at least :data:`GUESS_MIN_MEDIAN_NS` and a coefficient of
  variation of at most :data:`GUESS_MAX_CV`;
- and are not a library's own ranges (:mod:`dlprof_lite.rules.libraries`).

A script's own numbered ranges (``iteration 17``, ``step 3``) still count whatever their
timing: their names say they are steps (a five-step CPU run whose first step is half of it
holds less than half of the time after its first step); only a library's own are refused.
Otherwise the profile has no iterations, and one warning names the best candidates with the
``--key-range`` that would choose each (:func:`rejected_note`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from dlprof_lite.durations import coarse
from dlprof_lite.ingest.key_ranges import collections
from dlprof_lite.rules.iterations import (
    GUESS_MAX_CV,
    GUESS_MIN_COVERAGE,
    GUESS_MIN_MEDIAN_NS,
    GUESS_SHOWN,
)
from dlprof_lite.rules.libraries import library_of
from dlprof_lite.rules.steps import key_regex

Segments = tuple[np.ndarray, np.ndarray]


def union(starts: np.ndarray, ends: np.ndarray) -> Segments:
    """Sorted, disjoint segments covering the intervals ``[start, end)`` (empty ones
    dropped): a sort and a running maximum, no loop per interval."""
    keep = ends > starts
    s, e = starts[keep].astype(np.int64), ends[keep].astype(np.int64)
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] > e[:-1]
    return s[first], np.maximum.reduceat(e, np.flatnonzero(first))


def covered(segments: Segments, t0: int, t1: int) -> int:
    """Length of ``segments`` inside ``[t0, t1]``."""
    s, e = segments
    return int(np.maximum(np.minimum(e, t1) - np.maximum(s, t0), 0).sum())


class Work:
    """What a guess is measured against, computed only when a guess needs it: the GPU busy
    time per timeline, else (no GPU work) the main thread's annotated time."""

    def __init__(self, kernels: pd.DataFrame, memops: pd.DataFrame, ranges: pd.DataFrame):
        self._ops = (kernels, memops)
        self._ranges = ranges

    @cached_property
    def timelines(self) -> tuple[Segments, ...]:
        ops = [f[["start_ns", "end_ns", "pid", "device_id"]] for f in self._ops if len(f)]
        if ops:
            frame = pd.concat(ops, ignore_index=True)
            return tuple(
                union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
                for _, g in frame.groupby(["pid", "device_id"], sort=True)
            )
        return (self._main_thread(),)

    @property
    def what(self) -> str:
        return "of the GPU busy time" if any(len(f) for f in self._ops) else (
            "of the main thread's annotated time")  # fmt: skip

    def _main_thread(self) -> Segments:
        r = self._ranges
        top = r[(r["depth"] == 0).to_numpy(dtype=bool) & r["closed"].to_numpy(dtype=bool)
                & ~collections(r)]  # fmt: skip
        best: Segments = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        for _, g in top.groupby(["pid", "tid"], sort=True):
            found = union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            if int((found[1] - found[0]).sum()) > int((best[1] - best[0]).sum()):
                best = found
        return best

    def share(self, t0: int, t1: int) -> float:
        """Share of the work inside ``[t0, t1]`` (0 without any work)."""
        whole = sum(int((e - s).sum()) for s, e in self.timelines)
        return sum(covered(seg, t0, t1) for seg in self.timelines) / whole if whole else 0.0


@dataclass(frozen=True)
class Verdict:
    """One guessed key and its test: ``coverage`` of the work by its iterations after the
    first, their median and CV, the library whose own range it is (None: none)."""

    name: str
    source: str
    regex: str
    coverage: float
    median_ns: float | None
    cv: float | None
    library: str | None
    what: str

    @property
    def accepted(self) -> bool:
        if self.source == "numbered-ranges":
            # The user named them steps (``iteration 17``): they count unless a library's.
            return self.library is None
        return (
            self.library is None
            and self.coverage >= GUESS_MIN_COVERAGE
            and self.median_ns is not None
            and self.median_ns >= GUESS_MIN_MEDIAN_NS
            and self.cv is not None
            and self.cv <= GUESS_MAX_CV
        )

    def describe(self) -> str:
        """``'null_count' (cuDF's own range; 12% of the GPU busy time, median 1.5 µs, CV
        557%): --key-range '^null_count$'``."""
        own = f"{self.library}'s own range; " if self.library else ""
        median = "-" if self.median_ns is None else coarse(self.median_ns)
        cv = "-" if self.cv is None else f"{self.cv:.0%}"
        return (f"{self.name!r} ({own}{self.coverage:.0%} {self.what}, median {median}, "
                f"CV {cv}): --key-range '{self.regex}'")  # fmt: skip


def judge(
    table: pd.DataFrame, instances: pd.DataFrame, name: str, source: str, work: Work
) -> Verdict:
    """The test of one guess: ``table`` its key-node iterations, ``instances`` its ranges."""
    after = table.iloc[1:]
    coverage, median, cv = 0.0, None, None
    if len(after):
        wall = after["wall_ns"].to_numpy(dtype=np.float64)
        coverage = work.share(int(after["start_ns"].iloc[0]), int(after["end_ns"].iloc[-1]))
        median = float(np.median(wall))
        mean = float(wall.mean())
        cv = float(wall.std(ddof=1)) / mean if len(wall) > 1 and mean > 0 else 0.0
    domains = instances["domain"].astype(object).fillna("")
    libraries = {library_of(str(n), str(d)) for n, d in zip(instances["name"], domains)}
    library = next((lib for lib in sorted(libraries, key=str) if lib is not None), None)
    if source == "numbered-ranges":
        regex = key_regex(instances["name"].astype(object).unique(), name)
    else:
        regex = "^" + re.escape(name) + "$"
    return Verdict(name, source, regex, coverage, median, cv, library, work.what)


def rejected_note(rejected: list[Verdict]) -> str | None:
    """The one warning of a profile whose guesses all failed: the best candidates (not a
    library's own first, then by coverage) and the ``--key-range`` of each."""
    if not rejected:
        return None
    best = sorted(rejected, key=lambda v: (v.library is not None, -v.coverage))[:GUESS_SHOWN]
    shown = "; ".join(v.describe() for v in best)
    return (
        "no iterations: no NVTX range passed the step test (its iterations after the first "
        f"hold >= {GUESS_MIN_COVERAGE:.0%} of the GPU busy time, or of the main thread's "
        f"annotated time without GPU work; median >= {GUESS_MIN_MEDIAN_NS / 1e3:g} µs; "
        f"CV <= {GUESS_MAX_CV:g}; not a library's own range), so the figures cover the whole "
        f"session; candidates: {shown}"
    )
