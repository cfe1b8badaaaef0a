"""The one object that crosses from ingest to report: a :class:`Profile`.

A ``Profile`` is complete when built: every frame holds its base and derived columns
(:mod:`dlprof_lite.ingest.columns`) and is checked on construction. Nothing downstream
checks an nsys version; every schema difference was resolved while reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from dlprof_lite.ingest.columns import check_frame
from dlprof_lite.ingest.facts import facts_of


@dataclass(frozen=True)
class Meta:
    """What the export says about itself and how it was analysed."""

    source: str
    nsys_version: str | None
    schema_version: str | None
    session_start_ns: int
    session_end_ns: int
    tables: tuple[str, ...] = ()
    # The profiled system as nsys recorded it (TARGET_INFO_SYSTEM_ENV); None where not.
    host: str | None = None
    os: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    key_range: str | None = None
    key_range_source: str = "none"
    # Every guessed key failed the step test (ingest/step_guess.py): the one warning line
    # naming the best candidates and their --key-range; None otherwise.
    key_range_note: str | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # Each named thread of the capture, (pid, tid, OS thread name), in (pid, tid) order:
    # what nsys recorded in ThreadNames (``python``, ``pt_autograd_0``, ``pt_data_worker``).
    threads: tuple[tuple[int, int, str], ...] = ()

    @property
    def duration_ns(self) -> int:
        return self.session_end_ns - self.session_start_ns


@dataclass(frozen=True)
class Profile:
    """One nsys export, read and enriched: the raw events as DataFrames plus ``meta``.

    ``kernels`` and ``memops`` (one row per GPU operation, labelled with its launch call,
    range, layer, phase, iteration and Tensor Core verdict), ``api`` (CUDA API calls),
    ``ranges`` and ``marks`` (NVTX), ``gpus`` and ``iterations``, and ``facts``, the run
    facts among the marks, parsed (:mod:`dlprof_lite.ingest.facts`); times are int64 nanoseconds
    on the nsys session clock. Each frame's columns are declared once
    (:mod:`dlprof_lite.ingest.columns`) and checked when a Profile is built."""

    kernels: pd.DataFrame
    memops: pd.DataFrame
    api: pd.DataFrame
    ranges: pd.DataFrame
    marks: pd.DataFrame
    gpus: pd.DataFrame
    iterations: pd.DataFrame
    meta: Meta
    # The run facts among the marks, parsed once when the Profile is built (ingest/facts.py).
    facts: pd.DataFrame = field(init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        # Shapes, not frames: a notebook shows this for a profile of millions of events.
        frames = ("kernels", "memops", "api", "ranges", "marks", "gpus", "iterations")
        shapes = ", ".join(f"{n}={len(getattr(self, n))}" for n in frames)
        meta = self.meta
        return (
            f"<Profile of {meta.source} (nsys {meta.nsys_version or '?'}, "
            f"{meta.duration_ns / 1e9:.3f} s): {shapes} rows; key range "
            f"{meta.key_range!r} ({meta.key_range_source})>"
        )

    def __post_init__(self) -> None:
        check_frame(self.kernels, "kernels", derived=True)
        check_frame(self.memops, "memops", derived=True)
        check_frame(self.api, "api", derived=False)
        check_frame(self.ranges, "ranges", derived=True)
        check_frame(self.marks, "marks", derived=False)
        check_frame(self.gpus, "gpus", derived=False)
        check_frame(self.iterations, "iterations", derived=False)
        object.__setattr__(self, "facts", facts_of(self.marks))
