"""From one :class:`Profile` to one :class:`Report`: every table, the summary and the advice.

The report stage's single entry point: :func:`build_report` calls the pure table functions in
order and bundles their results. A ``Report`` holds only DataFrames and plain values, so it
pickles (a process pool may build it) and re-renders without the Profile.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.report.advice import advice_rows, advise
from dlprof_lite.report.frames import empty_report
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.steps import device_count, iterations_table
from dlprof_lite.report.summary import summarize
from dlprof_lite.report.summary_types import Summary
from dlprof_lite.report.tables import kernels_table, layers_table, ranges_table

TABLES = ("summary", "kernels", "ranges", "layers", "iterations", "advice")


@dataclass(frozen=True)
class Report:
    summary: Summary
    kernels: pd.DataFrame
    ranges: pd.DataFrame
    layers: pd.DataFrame
    iterations: pd.DataFrame
    advice: pd.DataFrame

    def table(self, name: str) -> pd.DataFrame:
        """A report table by name (``summary`` is its one-row flat form)."""
        if name == "summary":
            return pd.DataFrame([self.summary.row()], columns=column_names("summary"))
        frame: pd.DataFrame = getattr(self, name)
        return frame

    def with_source(self, source: str) -> Report:
        """The same report naming another input file (a new Report; this one is unchanged)."""
        system = replace(self.summary.system, source=source)
        return replace(self, summary=replace(self.summary, system=system))


def build_report(profile: Profile) -> Report:
    devices = device_count(profile.kernels, profile.memops, profile.gpus)
    layers = layers_table(profile.kernels, profile.ranges)
    iterations = iterations_table(
        profile.kernels, profile.memops, profile.ranges, profile.iterations, devices
    )
    found = summarize(profile, iterations, layers, devices)
    summary = replace(found, advice=tuple(advise(found, layers)))
    rows = advice_rows(list(summary.advice))
    advice = pd.DataFrame(rows, columns=column_names("advice")) if rows else empty_report("advice")
    return Report(
        summary=summary,
        kernels=kernels_table(profile.kernels),
        ranges=ranges_table(profile.kernels, profile.memops, profile.ranges),
        layers=layers,
        iterations=iterations,
        advice=advice,
    )
