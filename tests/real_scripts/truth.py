"""The scripts' own timing: what each training-script shape measured, as JSON for the tests.

Each script in this folder is written the way users write training loops (no dlprof-lite
import); it only adds ``--truth PATH`` and times its own phases with ``perf_counter``. The
tests compare dlprof-lite's report with this file: an oracle independent of the profiler.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Truth:
    """Per-step host time of each phase, in seconds, as the script itself measured it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = {}
        self.extra: dict[str, Any] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - start

    def end_step(self) -> None:
        self.steps.append(self.current)
        self.current = {}

    def write(self, path: str | None) -> None:
        if path:
            with open(path, "w", encoding="utf-8") as out:
                json.dump({"steps": self.steps, **self.extra}, out)
