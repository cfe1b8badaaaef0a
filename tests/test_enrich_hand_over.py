"""``enrich(raw, hand_over=True)``: the read frames are let go as soon as they are used (the
command line's single-process path, for peak memory), and the profile is the one
``enrich`` builds when the caller keeps them.

On every corpus export with NVTX ranges or kernels: every frame equal, column by column and
dtype by dtype; the handed-over ``raw`` keeps its CUDA calls and marks (the profile shares
them) and has empty NVTX events, kernels and memops.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import corpus_files
from dlprof_lite.ingest.load import enrich, load_raw

CORPUS = corpus_files()
FRAMES = ("kernels", "memops", "api", "ranges", "marks", "gpus", "iterations")


@pytest.mark.corpus
@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:40] for p in CORPUS])
def test_a_handed_over_export_gives_the_same_profile(corpus_dir: Path, path: Path) -> None:
    kept = load_raw(path)
    if kept.nvtx.empty and kept.kernels.empty:
        pytest.skip("neither NVTX ranges nor kernels")
    expected = enrich(kept)
    raw = load_raw(path)
    read = (len(raw.nvtx), len(raw.kernels), len(raw.memops))
    got = enrich(raw, hand_over=True)
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(got, name), getattr(expected, name), obj=name)
    assert got.meta == expected.meta
    assert raw.nvtx.empty and raw.kernels.empty and raw.memops.empty
    assert raw.api is got.api and len(raw.marks) == len(got.marks)  # shared, not emptied
    # Without hand_over the caller's frames stay whole (each rank's report reads them again).
    assert (len(kept.nvtx), len(kept.kernels), len(kept.memops)) == read
