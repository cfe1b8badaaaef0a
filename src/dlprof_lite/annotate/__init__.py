"""Stage 1, annotate: NVTX ranges around modules, phases and iterations (no pandas here).

The public API:

- :func:`range` (a named push/pop range), :func:`phase`, :func:`iteration`: context managers
  and decorators for hand-written ranges;
- :func:`annotate_model`: forward/backward ranges for one model's modules;
- :func:`install`: the global hooks the bootstrap switches on (modules, phases, iterations);
- :func:`enabled`: whether annotation is on (a profiler is attached, or ``DLPROF_LITE_NVTX``).

Nothing here imports torch or nvtx until it is used, and with no profiler attached every
function is a no-op that registers nothing. The range names are in :mod:`.names`.
"""

from __future__ import annotations

from dlprof_lite.annotate.backend import enabled
from dlprof_lite.annotate.hooks import LEVELS, Annotation, annotate_model, install
from dlprof_lite.annotate.ranges import iteration, phase, range

__all__ = [
    "LEVELS",
    "Annotation",
    "annotate_model",
    "enabled",
    "install",
    "iteration",
    "phase",
    "range",
]
