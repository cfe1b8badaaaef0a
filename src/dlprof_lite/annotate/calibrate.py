"""The ``ns_per_call`` of the ``annotation`` fact: the module hook path, timed in-process."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch


class _NullBackend:
    """A backend that writes nothing: the calibration of the hook path."""

    def push(self, name: str) -> None: ...
    def pop(self) -> None: ...
    def mark(self, text: str) -> None: ...


_clock = time.thread_time_ns
CALIBRATION_ROUNDS = 200  # the exit fact's: about 120 ms on a 2-core VM
QUICK_ROUNDS = 10  # inside a run (the end of warm-up, .folding): about 6 ms, within ~10 %


def calibrate(
    factory: Callable[..., Any], rounds: int = CALIBRATION_ROUNDS, width: int = 8
) -> int:
    """Measured ns per annotated module call: forward pre + post hooks and backward hooks.

    Runs the hook path of a private ``factory(backend, None)`` (a ``ModuleRanges`` that
    writes nothing) on ``width`` small modules called in sequence, ``rounds`` forward and
    backward passes, and subtracts the same passes without hooks; the median of three
    trials, on the thread's CPU clock (hooks are CPU work: another process holding the core
    is not theirs, and the warm-up's call durations are on the same clock, .folding). The
    NVTX calls themselves are not counted (a push or pop is one C call: tens of ns without a
    tool, a few hundred under nsys).
    """
    ranges = factory(_NullBackend(), None)
    root = torch.nn.Sequential(*(torch.nn.Identity() for _ in range(width)))
    layers = list(root)
    trials = []
    # It may run inside the script's no_grad or autocast (warm-up's end, .folding), and its
    # backward must not be taken for the script's by a profile hook (roots.BackwardWatch).
    profile = sys.getprofile()
    sys.setprofile(None)
    try:
        with torch.inference_mode(False), torch.enable_grad(), torch.autocast("cpu", enabled=False):
            for hooked in (False, True):  # once untimed: first-run costs are not the hooks'
                _calibration_pass(ranges if hooked else None, root, layers)
            for _ in range(3):
                spent = [0, 0]
                for hooked in (False, True):
                    start = _clock()
                    for _ in range(rounds):
                        _calibration_pass(ranges if hooked else None, root, layers)
                    spent[hooked] = _clock() - start
                trials.append(max(0, spent[1] - spent[0]) // (rounds * (width + 1)))
    finally:
        sys.setprofile(profile)
    return int(sorted(trials)[1])


def _calibration_pass(ranges: Any, root: Any, layers: list[Any]) -> None:
    x = torch.ones(2, device="cpu", requires_grad=True)
    y = x
    if ranges is not None:
        ranges.forward_pre(root, (x,))
    for layer in layers:
        if ranges is not None:
            ranges.forward_pre(layer, (y,))
        out = y * 1.0
        if ranges is not None:
            ranges.forward_post(layer, (y,), {}, out)
        y = out
    if ranges is not None:
        ranges.forward_post(root, (x,), {}, y)
    y.sum().backward()  # type: ignore[no-untyped-call]
