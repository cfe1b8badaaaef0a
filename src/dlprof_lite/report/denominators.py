"""What each share is a share of: one named denominator per figure, and the span session-based
shares are taken over.

Place in the pipeline: report. The summary states the denominator of every share whose
denominator can change in a ``*_scope`` field (``utilization_scope``, ``sync_api_scope``,
``exposed_comm_scope``, ``launch_overhead_scope``); the console, the page and the advice name
it with :func:`dlprof_lite.report.units.of_scope`, so that the three say the same thing as the JSON.

Session-based shares (GPU utilization; synchronization and exposed communication when there
are no steps) are taken over the session ``[0, duration]`` (ingest: nsys's own
``ANALYSIS_DETAILS.duration``). Where the events cover less than
``THRESHOLDS["trimmed_capture_share"]`` of it (a capture that recorded a few hundred
milliseconds of a five-minute session), they are taken over the events' span instead,
and a warning says so (:func:`share_span`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlprof_lite.ingest.profile import Profile
from dlprof_lite.rules.advice import threshold

SESSION, EVENT_SPAN = "session", "event_span"


@dataclass(frozen=True)
class ShareSpan:
    """The span session-based shares are taken over: ``[start_ns, end_ns)``, which is the
    session or (a trimmed capture) the events' span, named by ``scope``."""

    start_ns: int
    end_ns: int
    scope: str
    event_span_ns: int | None

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


def event_bounds(profile: Profile) -> tuple[int, int] | None:
    """First start and last end of the activity: kernels, copies, CUDA API calls and NVTX
    ranges (a range never closed ends with the session); None without any."""
    frames = (profile.kernels, profile.memops, profile.api, profile.ranges)
    lo = [int(f["start_ns"].min()) for f in frames if len(f)]
    hi = [int(np.asarray(f["end_ns"], dtype=np.int64).max()) for f in frames if len(f)]
    return (min(lo), max(hi)) if lo else None


def share_span(profile: Profile) -> tuple[ShareSpan, list[str]]:
    """The span of the session-based shares, and the warning of a trimmed capture."""
    meta = profile.meta
    session = ShareSpan(meta.session_start_ns, meta.session_end_ns, SESSION, None)
    bounds = event_bounds(profile)
    if bounds is None:
        return session, []
    events = bounds[1] - bounds[0]
    session = ShareSpan(meta.session_start_ns, meta.session_end_ns, SESSION, events)
    wall = session.length_ns
    if not wall or events <= 0 or events >= threshold("trimmed_capture_share") * wall:
        return session, []
    share = events / wall
    warning = (
        f"the events cover {share:.2%} of the session ({events / 1e9:.3g} s of "
        f"{wall / 1e9:.3g} s: a trimmed capture, or a long start before any recorded "
        "event): GPU utilization, and synchronization and "
        "exposed communication without steps, are shares of the events' span "
        "(utilization_scope event_span), not of the session"
    )
    return ShareSpan(bounds[0], bounds[1], EVENT_SPAN, events), [warning]
