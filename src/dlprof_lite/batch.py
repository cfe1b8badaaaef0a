"""Many reports at once: one analysis per input, serially, in a process pool, or on Dask.

``cli.py`` hands this module a top-level (picklable) function and its inputs; results come
back in input order. One input's failure is recorded as its error line and the others go
on, the way a per-rank analysis of a multi-GPU run should behave.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlprof_lite.errors import DlprofError
from dlprof_lite.memory import tune_process

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

WORKER_DIED = (
    "the process analysing it died (killed, e.g. for memory); analyse it alone with -j1 to see why"
)


@dataclass(frozen=True)
class Outcome:
    """One input's result, or the one-line error that stopped it."""

    item: Any
    result: Any = None
    error: str | None = None
    exit_code: int = 0


def _guarded(func: Callable[..., Any], item: Any) -> Outcome:
    """Run ``func(*item)``; a DlprofError becomes the input's error line, not a crash."""
    try:
        return Outcome(item, result=func(*item))
    except DlprofError as err:
        return Outcome(item, error=str(err), exit_code=err.exit_code)


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def run_all(
    func: Callable[..., Any],
    items: Sequence[tuple[Any, ...]],
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Call ``func(*item)`` for every item; return the outcomes in input order.

    ``scheduler`` (a Dask scheduler address) wins over ``jobs``; ``jobs == 1`` runs in this
    process, which keeps tracebacks and debuggers simple.
    """
    if scheduler:
        outcomes = _run_dask(func, items, scheduler)
    elif jobs <= 1 or len(items) <= 1:
        outcomes = []
        for item in items:
            outcomes.append(_guarded(func, item))
            if on_done:
                on_done(outcomes[-1])
        return outcomes
    else:
        outcomes = _run_pool(func, items, jobs)
    if on_done:
        for outcome in outcomes:
            on_done(outcome)
    return outcomes


def _pool(workers: int) -> ProcessPoolExecutor:
    # Imported here: the CLI imports this module for every command (10 ms it rarely needs).
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    # "spawn": the parent may hold open SQLite/Arrow handles and threads that fork would copy.
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("spawn"), initializer=tune_process
    )


def _run_pool(
    func: Callable[..., Any], items: Sequence[tuple[Any, ...]], jobs: int
) -> list[Outcome]:
    """A worker that dies (killed for memory, a crash in a native library) breaks the whole
    pool: the inputs it took down with it are analysed again one by one, each in a pool of
    its own, so only the input that kills its worker gets the error."""
    from concurrent.futures.process import BrokenProcessPool

    outcomes: list[Outcome | None] = [None] * len(items)
    broken = []
    with _pool(min(jobs, len(items))) as pool:
        futures = [pool.submit(_guarded, func, item) for item in items]
        for index, future in enumerate(futures):
            try:
                outcomes[index] = future.result()
            except BrokenProcessPool:
                broken.append(index)
    for index in broken:
        outcomes[index] = _alone(func, items[index])
    return [outcome for outcome in outcomes if outcome is not None]


def _alone(func: Callable[..., Any], item: tuple[Any, ...]) -> Outcome:
    from concurrent.futures.process import BrokenProcessPool

    with _pool(1) as pool:
        try:
            return pool.submit(_guarded, func, item).result()
        except BrokenProcessPool:
            return Outcome(item, error=WORKER_DIED, exit_code=1)


def _run_dask(
    func: Callable[..., Any], items: Sequence[tuple[Any, ...]], address: str
) -> list[Outcome]:
    try:
        from distributed import Client
    except ImportError as err:
        raise DlprofError("--dask-scheduler needs Dask: pip install 'dlprof-lite[dask]'") from err
    try:
        client = Client(address, timeout="5s")  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as err:
        raise DlprofError(f"cannot reach the Dask scheduler at {address} ({err})") from err
    with client:
        futures = [client.submit(_guarded, func, item, pure=False) for item in items]
        gathered: list[Outcome] = client.gather(futures)  # type: ignore[no-untyped-call]
        return gathered
