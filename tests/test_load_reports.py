"""``dlprof_lite.load`` on report files: exported with the local nsys, the report untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dlprof_lite
from dlprof_lite.errors import NsysError


@pytest.mark.corpus
@pytest.mark.nsys
def test_nsys_rep_loads_like_its_sqlite_export(corpus_dir: Path, nsys: str, tmp_path: Path) -> None:
    rep = Path(shutil.copy(corpus_dir / "raw" / "MohanadOdema__DLProf__nsys_profile.nsys-rep",
                           tmp_path / "run.nsys-rep"))  # fmt: skip
    before = rep.read_bytes()
    profile = dlprof_lite.load(rep)
    twin = dlprof_lite.load(corpus_dir / "MohanadOdema__DLProf__nsys_profile.nsys-rep.sqlite")
    assert profile.meta.source == str(rep)
    assert len(profile.kernels) == len(twin.kernels) == 46
    assert profile.kernels["dur_ns"].sum() == twin.kernels["dur_ns"].sum()
    assert sorted(set(profile.ranges["path"].astype(str))) == sorted(
        set(twin.ranges["path"].astype(str))
    )
    assert rep.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nsys-rep"]  # nothing left over


@pytest.mark.corpus
@pytest.mark.nsys
def test_report_newer_than_local_nsys_is_a_clean_error(corpus_dir: Path, nsys: str) -> None:
    with pytest.raises(NsysError, match="newer"):
        dlprof_lite.load(corpus_dir / "raw" / "NVIDIA__Fuser__report1.nsys-rep")
