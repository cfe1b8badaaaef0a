"""Shared test fixtures: where the shared corpus and nsys are, and how their absence is handled.

A user's clone has no ``../shared`` and maybe no nsys: those tests skip with a reason.
Under CI (``CI=true``) a missing corpus or a missing nsys fails instead of skipping.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DLPROF_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"

# scripts/ holds the synthetic-profile generator the tests share with the benchmark.
sys.path.insert(0, str(ROOT / "scripts"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str) -> None:
    """Skip on a user's machine; fail under CI, where nothing may be silently skipped."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip)")
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def test_run_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every dlprof-lite the tests run records its runs in a store of the test session (never
    in the user's ~/.local/share/dlprof-lite): subprocesses inherit the variable."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'runs.db'}"
    os.environ["DLPROF_LITE_DB"] = url
    return url


@pytest.fixture(scope="session", autouse=True)
def test_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packed plotly.js of the pages is cached in a folder of the test session, never in
    the user's ~/.cache (render/page/plotly_cache.py); subprocesses inherit the variable."""
    folder = tmp_path_factory.mktemp("cache")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "tc_kernels.tsv").is_file():
        missing(f"no shared data at {SHARED} (set DLPROF_SHARED to its folder)")
    return SHARED


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    if not (CORPUS / "MANIFEST.tsv").is_file():
        missing(f"no corpus at {CORPUS} (set DLPROF_SHARED to the shared folder)")
    return CORPUS


def corpus_files() -> list[Path]:
    """Every SQLite export in the corpus (empty when the corpus is absent)."""
    return sorted(CORPUS.glob("*.sqlite")) if CORPUS.is_dir() else []


@pytest.fixture(scope="session")
def nsys() -> str:
    path = shutil.which("nsys")
    if path is None:
        missing("nsys is not on PATH (scripts/install_nsys.sh installs it)")
    return path


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch):
    """Annotation on, writing to ``test_annotate.Recorder``; global hooks removed afterwards."""
    pytest.importorskip("torch")
    from dlprof_lite.annotate import backend as backend_module
    from dlprof_lite.annotate import hooks as hooks_module
    from dlprof_lite.annotate import phases as phases_module
    from test_annotate import Recorder

    rec = Recorder()
    monkeypatch.setattr(backend_module, "_backend", rec)
    monkeypatch.setattr(backend_module, "_decided", True)
    monkeypatch.setattr(phases_module, "_shared", None)
    # No automatic collections: their gc:<n> ranges (annotate.gc_ranges) would land between
    # the ticks the tests count. An explicit gc.collect() still records its range.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield rec
    finally:
        if collecting:
            gc.enable()
        if hooks_module._installed is not None:
            hooks_module._installed.remove()
            hooks_module._installed = None


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    """A one-process gloo process group (DDP and FSDP tests), destroyed afterwards."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch has no gloo process group")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    yield
    dist.destroy_process_group()
