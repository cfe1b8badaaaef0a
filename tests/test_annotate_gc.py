"""The ``gc:<generation>`` ranges: one push/pop range per garbage collection.

In-process with the recording backend of ``test_annotate`` (every push/pop with its thread),
automatic collections switched off so that the only collections are the test's own
``gc.collect()`` calls (explicit collections still run ``gc.callbacks``). The oracle is the
call itself: ``gc.collect(n)`` is one collection of generation ``n`` on the calling thread.
"""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from dlprof_lite.annotate import backend as backend_module  # noqa: E402
from dlprof_lite.annotate import hooks as hooks_module  # noqa: E402
from dlprof_lite.annotate import install  # noqa: E402
from dlprof_lite.annotate import phases as phases_module  # noqa: E402
from dlprof_lite.annotate.gc_ranges import GcRanges  # noqa: E402
from test_annotate import Range, Recorder, parents  # noqa: E402

STOP = {"generation": 2, "collected": 0, "uncollectable": 0}


@pytest.fixture
def rec(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """The recorder, with automatic collections off (explicit ones still call back)."""
    # The real backend makes the attributes of the gc names at install (Backend.prepare);
    # the recorder has nothing to make.
    monkeypatch.setattr(Recorder, "prepare", lambda self, *names: None, raising=False)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield recorder
    finally:
        if enabled:
            gc.enable()


def ours() -> list[GcRanges]:
    return [callback for callback in gc.callbacks if isinstance(callback, GcRanges)]


def gc_ranges(recorder: Recorder) -> list[Range]:
    return [r for r in recorder.ranges if r.name.startswith("gc:")]


def test_collect_is_one_range_on_the_calling_thread(rec: Recorder) -> None:
    install("phases")
    gc.collect()
    found = gc_ranges(rec)
    assert [r.name for r in found] == ["gc:2"]
    assert found[0].tid == threading.get_ident()
    assert found[0].end == found[0].start + 1  # pushed, then popped right after
    parents(rec.ranges)  # properly nested on every thread

    rec.ranges.clear()
    worker = threading.Thread(target=gc.collect, args=(0,))
    worker.start()
    worker.join()
    gc.collect(1)
    assert [(r.name, r.tid) for r in gc_ranges(rec)] == [
        ("gc:0", worker.ident), ("gc:1", threading.get_ident())]  # fmt: skip


class Collecting(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gc.collect()
        return x


def test_collection_nests_inside_the_module_that_ran_it(rec: Recorder) -> None:
    install("modules-all")
    model = nn.Sequential(nn.Linear(2, 2), Collecting())
    model(torch.ones(1, 2))
    (found,) = gc_ranges(rec)
    parent = parents(rec.ranges)[id(found)]
    assert parent is not None and parent.name == "fwd:1:Collecting"


def test_removal_unregisters_the_callback(rec: Recorder) -> None:
    before = len(gc.callbacks)
    install("phases")
    annotation = install("phases")  # a second install replaces the first
    assert len(ours()) == 1
    annotation.remove()
    assert not ours()
    assert len(gc.callbacks) == before
    gc.collect()
    assert not gc_ranges(rec)


def test_no_callback_without_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(backend_module.ENV_SWITCH, "off")
    monkeypatch.setattr(backend_module, "_backend", None)
    monkeypatch.setattr(backend_module, "_decided", False)
    monkeypatch.setattr(phases_module, "_shared", None)
    monkeypatch.setattr(hooks_module, "_installed", None)
    before = list(gc.callbacks)
    annotation = install("modules")
    assert not annotation.active
    assert gc.callbacks == before and not ours()


def test_a_stop_without_our_start_pops_nothing(rec: Recorder) -> None:
    entry = GcRanges(rec)  # type: ignore[arg-type]
    rec.push("mine")  # someone else's range, open on this thread
    entry("stop", STOP)  # registered mid-collection: the stop comes alone
    (mine,) = rec.ranges
    assert mine.end == -1 and rec.stacks[threading.get_ident()] == [mine]
    rec.pop()


class Failing:
    """A backend whose every call raises (an NVTX library gone at interpreter exit)."""

    def __init__(self, fail_push: bool = True) -> None:
        self.fail_push = fail_push
        self.pops = 0

    def prepare(self, *names: str) -> None:
        pass

    def push(self, name: str) -> None:
        if self.fail_push:
            raise RuntimeError("push")

    def pop(self) -> None:
        self.pops += 1
        raise RuntimeError("pop")


def test_the_callback_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    failing = Failing()
    entry = GcRanges(failing)  # type: ignore[arg-type]
    entry("start", {})  # no generation
    entry("start", {"generation": 7})  # a generation this interpreter does not have
    entry("stop", STOP)
    assert failing.pops == 0  # the push failed: nothing of ours is open
    popping = Failing(fail_push=False)
    entry = GcRanges(popping)  # type: ignore[arg-type]
    entry("start", {"generation": 2})
    entry("stop", STOP)
    entry("stop", STOP)  # the failed pop left nothing open: no second pop
    assert popping.pops == 1 and not entry.open
    gc.callbacks.append(entry)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(entry)
    assert popping.pops == 2
    assert not unraisable  # no "Exception ignored in ..." from the collector


def test_real_backend_has_the_names_ready_before_any_collection() -> None:
    """A collection can start while the backend holds its lock (an allocation inside
    ``Backend._attrs``): the gc names must be cached by then, or the push would wait on
    that lock forever."""
    pytest.importorskip("nvtx")
    backend = backend_module.Backend()  # no tool attached: NVTX calls are no-ops
    entry = GcRanges(backend)
    assert {"gc:0", "gc:1", "gc:2"} <= backend._attributes.keys()

    def collect_under_the_lock() -> None:
        with backend._lock:
            entry("start", {"generation": 0})
            entry("stop", STOP)

    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "the gc range waited on the backend's lock"


def test_collections_after_the_run_are_not_recorded(rec: Recorder) -> None:
    """At exit (Annotation.close) the callback goes first: the FLOP count, the hook cost's
    calibration and the interpreter's shutdown collect garbage that is not the program's
    (it stretched the run's recorded end by half a second on a real CPU run)."""
    annotation = install("phases")
    assert len(ours()) == 1
    annotation.close()
    assert not ours()
    gc.collect()
    assert not gc_ranges(rec)
