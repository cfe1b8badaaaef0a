"""dlprof-lite: where a training step's GPU time goes, layer by layer, from Nsight Systems."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dlprof_lite.ingest.profile import Profile

__all__ = ["__version__", "load"]


def load(path: str, **options: object) -> Profile:
    """Read an nsys ``.sqlite`` export (or ``.nsys-rep``) into an analysed :class:`Profile`."""
    from dlprof_lite.ingest.load import load as _load

    return _load(path, **options)  # type: ignore[arg-type]
