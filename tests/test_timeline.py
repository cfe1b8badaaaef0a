"""The timeline table (report/timeline.py): which iteration, which events, exact times, the cap.

Oracles: the shared hand-built :func:`example_profiles.training_profile` (every time a round
number stated in its docstring), small hand-built iteration tables, the generator's ground
truth (kernel time per iteration, computed while generating, never read back) and the
corpus exports' own rows.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dlprof_lite
from builders import R, build_iterations, phase
from conftest import CORPUS
from dlprof_lite.errors import InputError
from dlprof_lite.report.build import build_report
from dlprof_lite.report.metrics import column_names
from dlprof_lite.report.timeline import capped, steady_iteration, timeline_for
from example_profiles import _step, training_profile
from make_profile import make_profile

# Three real exports: TensorRT on several streams (its own repeated range as key range, named:
# a library's own range is never a guessed step),
# a DLProf/pyprof run with layers (its network's forward calls as key range) and a torchrun
# run with two processes (NCCL group ends as key range: the two ranks' kernels in one window).
CORPUS_CASES = {
    "multistream": (
        "NVIDIA__trt-samples-for-hackathon-cn__cookbook_09-Advance_MultiStream_calculation-bound"
        ".qdrep.sqlite",
        r"^ExecutionContext::enqueue$",
    ),
    "dlprof": ("MohanadOdema__DLProf__nsys_profile.sqlite", r"dummy_network\.py:41', '/home"),
    "torchrun": ("GindaChen__nsys-ai__tests_fixtures_mfu_2gpu_before.sqlite", r"^ncclGroupEnd$"),
}


def corpus_profile(case: str) -> dlprof_lite.Profile:
    name, key = CORPUS_CASES[case]
    if not (CORPUS / name).is_file():
        pytest.skip(f"corpus export {name} missing")
    return dlprof_lite.load(CORPUS / name, key_range=key)


# -- which iteration --------------------------------------------------------------------------


def test_the_steady_iteration_is_the_analysed_one_nearest_the_median() -> None:
    # Walls 250 (warm-up), 300, 200, 260, 900, 250: analysed median 260 -> iteration 3; the
    # warm-up's 250 is nearer than nothing but is never chosen.
    bounds, t = [], 0
    for wall in (250, 300, 200, 260, 900, 250):
        bounds.append((t, t + wall, not bounds, True))
        t += wall
    assert steady_iteration(build_iterations(bounds)) == 3
    # Outside --iter-start/--iter-stop: not analysed either.
    outside = [(a, b, w, i < 3) for i, (a, b, w, _) in enumerate(bounds)]
    assert steady_iteration(build_iterations(outside)) == 1  # 300, 200: median 250, tie: first
    assert steady_iteration(build_iterations([])) is None
    assert steady_iteration(build_iterations([(0, 10, True, True)])) is None


def test_report_names_the_iteration_and_shows_its_events() -> None:
    report = build_report(training_profile())
    # Steps 1 and 2 analysed (walls 2000, 3000; median 2500): equally near, the first wins.
    assert report.summary["timeline_iteration"] == 1
    assert list(report.timeline.columns) == column_names("timeline")
    assert set(report.timeline["iteration"]) == {1}


def test_no_iterations_the_busiest_stretch() -> None:
    profile = training_profile(iterations=[])
    report = build_report(profile)
    assert report.summary["timeline_iteration"] is None
    assert timeline_for(profile).empty  # iterations asked for: there are none
    # The report shows the busiest stretch instead: here every event (fewer than the cap),
    # in no iteration.
    frame = report.timeline
    assert list(frame.columns) == column_names("timeline")
    events = len(profile.kernels) + len(profile.memops) + len(profile.api) + len(profile.ranges)
    assert len(frame) == events and frame["iteration"].isna().all()
    w = report.summary.window
    assert (w.timeline_start_ns, w.timeline_end_ns) == (frame["start_ns"].min(),
                                                        frame["end_ns"].max())  # fmt: skip


# -- which events, exactly --------------------------------------------------------------------


def _rows(frame: pd.DataFrame, kind: str) -> list[tuple]:
    part = frame[frame["kind"] == kind]
    return list(zip(part["name"].astype(str), part["start_ns"], part["end_ns"], strict=True))


def test_events_of_one_iteration_with_their_exact_times() -> None:
    frame = timeline_for(training_profile())  # iteration 1: (3000, 5000]
    # GPU ops of step 1 (docstring: copy 120-140, gemm 330-430, relu 530-550, sgemm 940-1140,
    # adam 1630-1680 from 3000), each with its launching thread and stream.
    assert _rows(frame, "kernel") == [("sm90_xmma_gemm_bf16bf16_tn", 3330, 3430),
                                      ("relu_kernel", 3530, 3550),
                                      ("sgemm_128x64_nt", 3940, 4140),
                                      ("adam_kernel", 4630, 4680)]  # fmt: skip
    assert _rows(frame, "memcpy") == [("memcpy HtoD", 3120, 3140)]
    # Launch calls, and the cudaDeviceSynchronize at 4800 (the one at 8000 is in no step).
    calls = [(3100, 3110), (3310, 3320), (3490, 3520), (3920, 3930), (4610, 4620), (4800, 4900)]
    assert [r[1:] for r in _rows(frame, "api")] == calls
    # Step 1's eight ranges; step 2's, opening at 5000, are the next iteration's.
    want = [(r.name, r.start, r.end) for r in _step(3000, 2000)]
    assert sorted(_rows(frame, "range")) == sorted(want)
    kernels = frame[frame["kind"] == "kernel"]
    assert kernels["device_id"].tolist() == [0] * 4 and kernels["stream_id"].tolist() == [7] * 4
    assert kernels["tid"].tolist() == [10] * 4


def test_labels_come_from_ingest_and_launches_join_their_ops() -> None:
    frame = timeline_for(training_profile())
    ops = frame[frame["kind"].isin(["kernel", "memcpy"])]
    assert ops["layer"].astype(object).where(ops["layer"].notna(), None).tolist() == [
        None, "fc1", "act", "fc1", None]  # fmt: skip
    assert ops["phase"].astype(str).tolist() == ["data", "forward", "forward", "backward",
                                                 "optimizer"]  # fmt: skip
    api = frame[frame["kind"] == "api"]
    launches = api.merge(ops, on=["pid", "correlation_id"], suffixes=("", "_op"))
    assert len(launches) == 5  # every launch call finds its op; the sync call none
    assert (launches["phase"].astype(str) == launches["phase_op"].astype(str)).all()
    ranges = frame[frame["kind"] == "range"].set_index("name")
    assert ranges.loc["bwd:fc1:Linear", "layer"] == "fc1"
    assert ranges.loc["forward", "phase"] == "forward"
    assert ranges.loc["fwd:fc1:Linear", "phase"] == "forward"  # its kernel's phase
    assert ranges.loc["fwd:fc1:Linear", "depth"] == 0 and ranges.loc["data", "domain"]


def test_module_ranges_without_gpu_work_take_their_direction_as_phase() -> None:
    """A CPU run (no kernels): each module range is coloured by its own direction, the
    timeline's thread is named (the fixture's tid is not its pid: ``thread N``)."""
    frame = timeline_for(training_profile(kernels=[], memops=[]))
    ranges = frame[frame["kind"] == "range"].set_index("name")
    assert ranges.loc["fwd:fc1:Linear", "phase"] == "forward"
    assert ranges.loc["bwd:fc1:Linear", "phase"] == "backward"
    assert pd.isna(ranges.loc["iteration", "phase"])
    assert set(frame["track"].astype(str)) == {f"thread {int(frame['tid'].iloc[0])}"}


def test_a_range_overlapping_the_window_is_kept_whole() -> None:
    ranges = [*_step(1000, 2000), *_step(3000, 2000), *_step(5000, 3000),
              phase("epoch", 500, 9000), R("setup", 100, 900),
              phase("prefetch", 2500, 3500, tid=11)]  # fmt: skip
    frame = timeline_for(training_profile(ranges=ranges))
    got = frame[frame["kind"] == "range"].set_index("name")
    assert (got.loc["epoch", "start_ns"], got.loc["epoch", "end_ns"]) == (500, 9000)
    assert (got.loc["prefetch", "start_ns"], got.loc["prefetch", "end_ns"]) == (2500, 3500)
    assert got.loc["epoch", "iteration"] == got.loc["prefetch", "iteration"] == 1
    assert "setup" not in got.index  # ended before the window


def test_iterations_a_to_b() -> None:
    profile = training_profile()
    frame = timeline_for(profile, (1, 3))
    assert set(frame["iteration"]) == {1, 2}
    kernels = frame[frame["kind"] == "kernel"]
    assert int((kernels["end_ns"] - kernels["start_ns"]).sum()) == 2 * (100 + 20 + 200 + 50)
    assert np.all(np.diff(frame["start_ns"].to_numpy()) >= 0)  # in start order
    for bad in ((3, 5), (2, 1), (-1, 2)):
        with pytest.raises(InputError, match="--trace-iterations"):
            timeline_for(profile, bad)


# -- the cap ----------------------------------------------------------------------------------


def test_the_cap_keeps_the_longest_events_and_warns() -> None:
    profile = training_profile()
    whole = timeline_for(profile)
    report = build_report(profile, timeline_cap=5)
    kept = report.timeline
    assert len(kept) == 5
    dur = (whole["end_ns"] - whole["start_ns"]).sort_values(ascending=False)
    assert sorted((kept["end_ns"] - kept["start_ns"]).tolist()) == sorted(dur.iloc[:5].tolist())
    assert np.all(np.diff(kept["start_ns"].to_numpy()) >= 0)
    left_out = len(whole) - 5
    warning = [w for w in report.summary.warnings if w.startswith("timeline:")]
    assert len(warning) == 1 and f"{left_out} left out" in warning[0], warning
    assert not [w for w in build_report(profile).summary.warnings if w.startswith("timeline:")]
    frame, dropped = capped(whole, len(whole))
    assert dropped == 0 and frame is whole


def test_the_timeline_is_saved_and_read_back(tmp_path: Path) -> None:
    report = build_report(training_profile())
    folder = report.save(tmp_path / "r")
    doc = json.loads((folder / "timeline.json").read_text(encoding="utf-8"))
    assert doc["window"] == {"timeline_iteration": 1}
    back = dlprof_lite.open_report(folder)
    pd.testing.assert_frame_equal(back.timeline, report.timeline, check_exact=True)
    # A folder written before the timeline existed reads back with an empty one.
    for suffix in ("json", "csv"):
        (folder / f"timeline.{suffix}").unlink()
    assert dlprof_lite.open_report(folder).timeline.empty


# -- real and generated exports ---------------------------------------------------------------


@pytest.mark.parametrize("case", list(CORPUS_CASES))
def test_corpus_timeline_holds_the_iterations_kernels(case: str) -> None:
    profile = corpus_profile(case)
    step = steady_iteration(profile.iterations)
    assert step is not None
    frame = timeline_for(profile)
    k = profile.kernels
    mine = k[k["iteration"].astype("Int64").fillna(-1).to_numpy() == step]
    got = frame[frame["kind"] == "kernel"]
    assert len(got) == len(mine) > 0
    assert int((got["end_ns"] - got["start_ns"]).sum()) == int(mine["dur_ns"].sum())
    key = ["pid", "correlation_id", "start_ns", "end_ns"]
    assert sorted(map(tuple, got[key].astype("int64").to_numpy().tolist())) == sorted(
        map(tuple, mine[key].astype("int64").to_numpy().tolist()))  # fmt: skip
    if case == "torchrun":
        assert got["pid"].nunique() == 2 and frame[frame["kind"] == "range"]["pid"].nunique() == 2
    if case == "dlprof":
        assert got["layer"].notna().any()


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gen") / "one.sqlite"
    truth = make_profile(path, iterations=6, layers=4, kernels_per_layer=2, seed=11)
    return dlprof_lite.load(path), truth


def test_generated_kernel_time_per_iteration_is_the_truths(generated) -> None:
    profile, truth = generated
    want = truth.iterations[0]["kernel_ns"]
    for step in range(len(want)):
        frame = timeline_for(profile, (step, step + 1))
        kernels = frame[frame["kind"] == "kernel"]
        assert int((kernels["end_ns"] - kernels["start_ns"]).sum()) == want[step], step


def test_one_iteration_costs_little_beside_the_analysis(tmp_path: Path) -> None:
    """Ratio, not seconds: the timeline of one iteration beside the whole analysis (reading
    the export and building the report) of a 58k-kernel generated profile, each the fastest
    of three runs in this process, so a loaded machine slows both alike. On the 1M-kernel
    profile it is about 1 % (scripts/bench.py); here fixed costs weigh more."""
    path = tmp_path / "mid.sqlite"
    make_profile(path, iterations=300, layers=8, kernels_per_layer=12, seed=11)
    profile = dlprof_lite.load(path)

    def fastest(fn) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    analysis = fastest(lambda: build_report(dlprof_lite.load(path), timeline_cap=0))
    timeline = fastest(lambda: timeline_for(profile))
    assert timeline < 0.2 * analysis, (timeline, analysis)
