"""Kernel names that cannot tell (issue 26, item 6), on the nvFuser corpus export.

nvFuser names its generated kernels after the fusion (``nvfuser_pointwise_f0_c1_r0_g4``): the
name says nothing of the instructions, so they are ``unknown``, not ``no_tc``. The Tensor Core
share is over the kernels whose names tell, with the unknown share beside it; where the
annotation recorded a layer's dtype and the GPU takes it on Tensor Cores, that layer's
unknown kernels are ``tc (inferred)`` time, named as inferred. The oracle is our own SQL on the
export (kernel names and durations); the inferred case edits a copy in ``tmp_path``: one
module range of the annotation around nvFuser's launches, and its module fact.
"""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

import dlprof_lite
from conftest import CORPUS
from dlprof_lite.render.console import render
from dlprof_lite.render.page.html import header_rows
from dlprof_lite.report.layers.kernels import TC_INFERRED
from dlprof_lite.rules.facts import fact_text
from dlprof_lite.rules.names import DOMAIN

FUSER = CORPUS / "NVIDIA__Fuser__report1.sqlite"
KERNEL_NS = """SELECT COALESCE(SUM(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE ?"""


def kernel_ns(path: Path, like: str = "%") -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return int(con.execute(KERNEL_NS, (like,)).fetchone()[0])


@pytest.fixture(scope="module")
def fuser(corpus_dir: Path) -> dlprof_lite.Report:
    return dlprof_lite.analyze(FUSER, all_iterations=True)  # every kernel in the tables


@pytest.mark.corpus
def test_nvfuser_kernels_are_unknown_and_left_out_of_the_share(fuser: dlprof_lite.Report) -> None:
    k = fuser.kernels
    generated = k["short_name"].astype(str).str.startswith("nvfuser_")
    assert generated.sum() == 6 and set(k.loc[generated, "tc_class"].astype(str)) == {"unknown"}
    total, nvfuser = kernel_ns(FUSER), kernel_ns(FUSER, "nvfuser%")
    nvjet = kernel_ns(FUSER, "nvjet%")
    tc = fuser.summary.tensor_cores
    assert fuser.summary.totals.kernel_ns == total and tc.tc_unknown_ns == nvfuser
    # The three nvjet GEMMs are the only Tensor Core kernels: their share of the known time.
    assert tc.tc_gpu_ns == nvjet
    assert tc.tc_share == pytest.approx(nvjet / (total - nvfuser), rel=1e-12)
    assert tc.tc_unknown_share == pytest.approx(nvfuser / total, rel=1e-12)
    assert tc.tc_inferred_ns == 0  # no annotation: nothing to infer from
    # Console and page say the same, named the same way.
    out = StringIO()
    render(fuser, None, Console(file=out, width=200, force_terminal=False))
    line = f"{tc.tc_share:.1%} of the kernel time whose names tell (names cannot tell: " \
           f"{tc.tc_unknown_share:.1%} of kernel time)"  # fmt: skip
    assert line in out.getvalue()
    assert dict(header_rows(fuser))["Tensor Core share"] == line


def _annotated_copy(tmp_path: Path) -> Path:
    """The export with one module range of the annotation (``fwd:model:Linear``, autocast
    bfloat16) just around nvFuser's own ``runSegmentsWithInputs`` range that holds the first
    nvFuser launch, on its thread (so every range nests as before)."""
    path = tmp_path / "fuser-annotated.sqlite"
    shutil.copyfile(FUSER, path)
    with closing(sqlite3.connect(path)) as con:
        start, end, tid = con.execute(
            "SELECT n.start - 1, n.end + 1, n.globalTid FROM NVTX_EVENTS n, "
            "CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
            "ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = k.shortName "
            "WHERE s.value LIKE 'nvfuser%' AND n.text = "
            "'FusionKernelRuntime::runSegmentsWithInputs' AND n.globalTid = r.globalTid "
            "AND n.start <= r.start AND r.start <= n.end ORDER BY r.start LIMIT 1"
        ).fetchone()
        domain = 1 + con.execute("SELECT MAX(domainId) FROM NVTX_EVENTS").fetchone()[0]
        fact = fact_text("module", {"layer": "model", "type": "Linear", "in_shape": "8x64",
                                    "dtype": "float32", "param_dtype": "float32",
                                    "autocast": "bfloat16", "tf32": False, "tf32_conv": False,
                                    "device": "cuda"})  # fmt: skip
        insert = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) " \
                 "VALUES (?, ?, ?, ?, ?, ?)"  # fmt: skip
        con.executemany(insert, [(0, None, 75, DOMAIN, tid, domain),
                                 (start, end, 59, "fwd:model:Linear", tid, domain),
                                 (start, None, 34, fact, tid, domain)])  # fmt: skip
        con.commit()
    return path


@pytest.mark.corpus
def test_a_layers_recorded_dtype_infers_its_unknown_kernels(
    corpus_dir: Path, tmp_path: Path
) -> None:
    path = _annotated_copy(tmp_path)
    report = dlprof_lite.analyze(path, all_iterations=True)
    layer = report.layers.set_index("layer").loc["model"]
    assert layer["tc_inferred"] == TC_INFERRED  # bf16 on an H200 (cc 9.0): Tensor Cores
    assert "tc?" in layer["top_kernels"]  # the names' own verdict stays
    inside = report.kernels  # the whole run: no iterations in this export
    assert set(inside["tc_class"].astype(str)) >= {"unknown"}
    tc = report.summary.tensor_cores
    # The nvFuser kernels launched inside the range: the oracle from the same SQL.
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        [(want,)] = con.execute(
            "SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "JOIN StringIds s ON s.id = k.shortName JOIN NVTX_EVENTS n "
            "ON n.text = 'fwd:model:Linear' AND r.start >= n.start AND r.start <= n.end "
            "WHERE s.value LIKE 'nvfuser%'"
        ).fetchall()
    assert tc.tc_inferred_ns == want > 0
    assert tc.tc_share == pytest.approx(
        kernel_ns(FUSER, "nvjet%") / (kernel_ns(FUSER) - kernel_ns(FUSER, "nvfuser%")), rel=1e-12
    )
    shown = dict(header_rows(report))["Tensor Core share"]
    assert f"{want / report.summary.totals.kernel_ns:.1%} tc (inferred)" in shown
