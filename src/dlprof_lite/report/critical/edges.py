"""Explicit dependencies of a step's graph: those that are not a track's own order or an op's
launch (both implicit, one per node: :class:`~dlprof_lite.report.critical.graph.Graph`).

Place in the pipeline: report, under :mod:`dlprof_lite.report.critical.graph`. An edge
``src -> dst`` anchors at the source's end (``offset`` -1) or at its start plus ``offset``
(which moves with the source's scale in a replay); ``lag`` is added to the anchor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_I64 = np.int64


@dataclass(frozen=True)
class Edges:
    src: np.ndarray
    dst: np.ndarray
    offset: np.ndarray
    lag: np.ndarray
    kind: np.ndarray

    @staticmethod
    def of(parts: list[tuple[np.ndarray, ...]]) -> Edges:
        """Edges from ``(src, dst, offset, lag, kind)`` tuples of arrays."""
        if not parts:
            e = np.empty(0, dtype=_I64)
            return Edges(e, e, e, e, np.empty(0, dtype=np.int8))
        cols = [np.concatenate([np.asarray(p[i], dtype=_I64) for p in parts]) for i in range(5)]
        return Edges(cols[0], cols[1], cols[2], cols[3], cols[4].astype(np.int8))

    @staticmethod
    def join(*many: Edges) -> Edges:
        return Edges.of([(e.src, e.dst, e.offset, e.lag, e.kind) for e in many])

    @property
    def size(self) -> int:
        return int(self.src.size)

    def anchor(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Each edge's anchor time on the given node times."""
        out: np.ndarray = np.where(self.offset < 0, end[self.src], start[self.src] + self.offset)
        return out

    def held(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """What each edge allows its destination: anchor + lag."""
        out: np.ndarray = self.anchor(start, end) + self.lag
        return out
