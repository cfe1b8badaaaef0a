"""The pieces of report.html's charts: the timeline Gantt chart, decimation, caps.

Oracles: timeline frames of the contract's columns built here with round numbers, the
example profile's hand-worked kernels (tests/example_profiles.py), and series whose spikes
are placed by the test.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dlprof_lite.render.page.charts import ITERATION_POINTS, decimated
from dlprof_lite.report.build import build_report
from dlprof_lite.report.model import Report
from example_profiles import training_profile
from test_html_page import Page, assert_plotly_figure, read


@pytest.fixture(scope="module")
def example() -> Report:
    return build_report(training_profile())


def timeline_frame(rows: list[tuple]) -> pd.DataFrame:
    """A frame of the contract's timeline columns from (kind, name, pid, tid, device, stream,
    start, end, depth, layer, phase) rows."""
    cols = ["kind", "name", "pid", "tid", "device_id", "stream_id", "start_ns", "end_ns",
            "depth", "layer", "phase"]  # fmt: skip
    frame = pd.DataFrame(rows, columns=cols)
    for c in ("pid", "tid", "device_id", "stream_id", "depth"):
        frame[c] = frame[c].astype("Int64")
    frame["full_name"] = frame["name"]
    frame["domain"] = "dlprof_lite"
    frame["correlation_id"] = pd.array([None] * len(frame), dtype="Int64")
    frame["iteration"] = 4
    return frame


def drawn_events(figure: dict) -> dict[str, dict]:
    """Each bar of a timeline figure by its event's name: lane, base, width, hover data,
    the phase trace it is in and its label (the critical path's lane left out)."""
    out = {}
    for t in figure["data"]:
        if t["name"].startswith("path: "):
            continue
        for i, c in enumerate(t["customdata"]):
            out[c[0]] = {"lane": t["y"][i], "base": t["base"][i], "x": t["x"][i],
                         "custom": c, "phase": t["name"], "text": t["text"][i]}  # fmt: skip
    return out


def test_timeline_chart_puts_threads_above_streams() -> None:
    from dlprof_lite.render.page.timeline_chart import timeline_figure

    na = None
    frame = timeline_frame([
        ("range", "iteration", 1, 11, na, na, 1_000_000, 1_900_000, 0, na, na),
        ("range", "fwd:fc1:Linear", 1, 11, na, na, 1_100_000, 1_300_000, 1, "fc1", "forward"),
        ("api", "cudaLaunchKernel", 1, 11, na, na, 1_110_000, 1_115_000, na, "fc1", "forward"),
        ("range", "loader", 1, 12, na, na, 1_000_500, 1_050_500, 0, na, "data"),
        ("kernel", "gemm", 1, 11, 0, 7, 1_120_000, 1_220_000, na, "fc1", "forward"),
        ("memcpy", "HtoD", 1, 12, 0, 13, 1_060_000, 1_061_000, na, na, "data"),
    ])  # fmt: skip
    fig, left = timeline_figure(frame)
    assert fig is not None and left == 0
    assert_plotly_figure(fig)
    data = json.loads(json.dumps(fig))
    lanes = data["layout"]["yaxis"]["categoryarray"]
    # A frame without track names (a report written before them): the ids.
    assert lanes == ["thread 11", "thread 11 · level 1", "thread 11 · CUDA API",
                     "thread 12", "GPU 0 · stream 7", "GPU 0 · stream 13"]  # fmt: skip
    assert data["layout"]["meta"]["origin_ns"] == 1_000_000
    assert data["layout"]["meta"]["unit"] == "µs"
    # No iteration (a busiest stretch): it opens on the GPU work, the copy at 1.06 ms to the
    # gemm's end at 1.22 ms, and a twentieth of that (8 µs) either side.
    assert data["layout"]["xaxis"]["range"] == [52.0, 228.0]
    bars = drawn_events(data)
    # Coloured by phase, labelled by layer (a range without one: its own name).
    assert [t["name"] for t in data["data"]] == ["data", "forward", "no phase"]
    gemm = bars["gemm"]
    assert (gemm["lane"], gemm["phase"], gemm["text"]) == ("GPU 0 · stream 7", "forward", "fc1")
    assert gemm["base"] == 120.0 and gemm["x"] == 100.0  # µs from the first event
    assert gemm["custom"] == ["gemm", "fc1", "forward", "100.000 µs", "kernel"]
    assert bars["iteration"]["x"] == 900.0 and bars["iteration"]["text"] == "iteration"
    assert bars["iteration"]["custom"] == ["iteration", "-", "-", "900.000 µs", "range"]
    assert (bars["loader"]["phase"], bars["HtoD"]["phase"]) == ("data", "data")
    # Named tracks (the timeline table's): the thread's name on every one of its lanes.
    named = frame.assign(track=["main", "main", "main", "DataLoader pin memory", "stream 7",
                                "stream 13"])  # fmt: skip
    fig, _ = timeline_figure(named)
    assert fig is not None
    assert fig["layout"]["yaxis"]["categoryarray"] == [
        "main", "main · level 1", "main · CUDA API", "DataLoader pin memory",
        "GPU 0 · stream 7", "GPU 0 · stream 13"]  # fmt: skip
    fig, left = timeline_figure(frame, cap=3)  # the 3 longest: iteration, fc1, gemm
    assert left == 3 and fig is not None
    names = sorted(c[0] for t in fig["data"] for c in t["customdata"])
    assert names == ["fwd:fc1:Linear", "gemm", "iteration"]
    # Shown over the iteration [1.05, 1.2] ms widened to the gemm's end at 1.22 ms: the longer
    # ranges are clipped to it (fc1: 1.1 to 1.22 ms), their hover keeps the real duration.
    fig, _ = timeline_figure(frame, iteration=(1_050_000, 1_200_000))
    assert fig is not None
    data = json.loads(json.dumps(fig))
    assert data["layout"]["meta"]["origin_ns"] == 1_050_000
    assert data["layout"]["xaxis"]["range"] == [0, 170.0]  # the gemm ends at 1.22 ms
    bars = drawn_events(data)
    shown = [(bars[n]["base"], bars[n]["x"]) for n in ("iteration", "fwd:fc1:Linear", "loader")]
    assert shown == [(0.0, 170.0), (50.0, 120.0), (0.0, 0.5)]
    assert bars["iteration"]["custom"][3] == "900.000 µs"


def test_example_timeline_is_one_steady_iteration(example: Report) -> None:
    page = read(example)
    fig = page.figure("timeline")
    origin = fig["layout"]["meta"]["origin_ns"]
    size = fig["layout"]["meta"]["ns"]
    assert size == 1e3  # µs: the iteration is 2000 ns long
    bars = drawn_events(fig)
    kernels = {n: b for n, b in bars.items() if b["custom"][4] == "kernel"}
    # Iteration 1 (2000 ns, as near the median 2500 as iteration 2, and earlier): its kernels
    # run at 3330 (gemm 100), 3530 (relu 20), 3940 (sgemm 200), 4630 (adam 50).
    starts = sorted(origin + b["base"] * size for b in kernels.values())
    assert starts == pytest.approx([3330, 3530, 3940, 4630])
    assert sorted(b["x"] * size for b in kernels.values()) == pytest.approx([20, 50, 100, 200])
    assert kernels["sm90_xmma_gemm_bf16bf16_tn"]["custom"][1:3] == ["fc1", "forward"]
    assert kernels["sm90_xmma_gemm_bf16bf16_tn"]["phase"] == "forward"
    assert kernels["adam_kernel"]["phase"] == "optimizer"
    lanes = fig["layout"]["yaxis"]["categoryarray"]
    # the critical path's lane on top, then the fixture's thread (tid != pid)
    assert lanes[-1].startswith("GPU ") and lanes[:2] == ["critical path", "thread 10"]
    # The iteration holds the phases (start/end ranges, all depth 0), forward holds fc1.
    assert bars["iteration"]["lane"] == "thread 10"
    assert bars["forward"]["lane"] == bars["backward"]["lane"] == "thread 10 · level 1"
    assert bars["fwd:fc1:Linear"]["lane"] == "thread 10 · level 2"


def test_decimation_keeps_every_spike() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(100.0, 1.0, 100_000)
    values[[7, 54_321, 99_999]] = [500.0, -50.0, 900.0]
    keep = decimated(values)
    assert len(keep) <= ITERATION_POINTS
    assert {7, 54_321, 99_999} <= set(keep.tolist())
    assert values[keep].max() == values.max() and values[keep].min() == values.min()
    assert np.all(np.diff(keep) > 0)


def test_many_layers_are_capped_with_a_note(example: Report) -> None:
    from dlprof_lite.render.page.charts import LAYER_CHART_MAX, layers_figure
    from dlprof_lite.render.page.html_tables import LAYER_ROWS, layer_table

    n = LAYER_ROWS + 500
    base = example.layers.iloc[[0]]
    layers = pd.concat([base] * n, ignore_index=True)
    layers["layer"] = [f"model.block{i}" for i in range(n)]
    layers["order"] = np.arange(n, 0, -1)  # network order reversed against the rows
    layers["step_forward_wall_ns"] = np.arange(n, dtype=float)  # later rows larger
    fig, left = layers_figure(layers, gpu=True)
    assert fig is not None and left == n - LAYER_CHART_MAX
    assert f"+{left} more" in fig["layout"]["title"]["text"]
    assert_plotly_figure(fig)
    shown = list(fig["data"][0]["customdata"])
    # The largest (the last rows) in network order: descending row number.
    assert shown == [f"model.block{i}" for i in range(n - 1, n - 1 - LAYER_CHART_MAX, -1)]
    # Labelled below the path they share (the axis title names it).
    assert fig["data"][0]["x"] == [name.removeprefix("model.") for name in shown]
    assert fig["layout"]["xaxis"]["title"]["text"] == "layers in model"
    html = layer_table(layers, gpu=True, per_step=True)
    page = Page(html)
    assert len(page.tables["layer-table"]) == 1 + LAYER_ROWS
    assert f"+{n - LAYER_ROWS} more" in html


def test_a_figure_with_nan_is_written_with_null() -> None:
    """The page's figure JSON has no NaN (JSON.parse refuses it): null, as plotly writes."""
    from dlprof_lite.render.page.plotly_bundle import Chart

    figure = {"data": [{"type": "bar", "x": ["a", "b"], "y": [1.0, float("nan")]}],
              "layout": {"meta": {"ns": float("inf")}}}  # fmt: skip
    html = Chart("probe", figure).html()
    text = html.split('id="chart-probe-figure">')[1].split("</script>")[0]
    assert json.loads(text) == {"data": [{"type": "bar", "x": ["a", "b"], "y": [1.0, None]}],
                                "layout": {"meta": {"ns": None}}}  # fmt: skip
    assert 'data-points="2"' in html


def test_an_outlier_step_is_cut_off_the_axis_and_named(example: Report) -> None:
    """A 200 ms warm-up beside 7 ms steps: the axis ends a little above the highest other
    step (7.5 ms x 1.15), a note names the one cut off, a button shows all on a log axis;
    a series without outliers keeps plotly's own range."""
    from dlprof_lite.render.page.charts import axis_top, iterations_figure

    wall = [200e6, 7e6, 7.5e6, 6.8e6, 7.2e6]
    iterations = pd.DataFrame({"iteration": range(5), "wall_ns": wall, "gpu_busy_ns": 0.0,
                               "warmup": [True, False, False, False, False]})  # fmt: skip
    assert axis_top(np.asarray(wall)) == pytest.approx(7.5e6 * 1.15)
    assert axis_top(np.asarray(wall[1:])) is None
    # Just above 3 x the median, but within 15 % of the highest other step: nothing would be
    # cut off, so the axis keeps its range (and no note names a step above it). Before, the
    # page failed on it: a loaded machine's steps made one ("argmax of an empty sequence").
    close = np.asarray([10e6, 10e6, 10e6, 29e6, 31e6])
    assert axis_top(close) is None
    near = pd.DataFrame({"iteration": range(5), "wall_ns": close, "gpu_busy_ns": 0.0,
                         "warmup": False})  # fmt: skip
    assert "annotations" not in iterations_figure(near, example.summary, gpu=False)["layout"]
    fig = iterations_figure(iterations, example.summary, gpu=False)
    assert fig is not None
    assert_plotly_figure(fig)
    layout = fig["layout"]
    assert layout["meta"]["unit"] == "ms"
    assert layout["yaxis"]["range"] == pytest.approx([0, 7.5 * 1.15])
    assert [a["text"] for a in layout["annotations"]] == ["▲ iteration 0: 200 ms"]
    labels = [b["label"] for b in layout["updatemenus"][0]["buttons"]]
    assert labels == ["linear, outliers cut", "log scale"]
    # The bands are named in the legend, once each, never written inside the plot.
    assert [(s["name"], s["showlegend"]) for s in layout["shapes"]][:1] == [("warm-up", True)]
    assert all("label" not in s for s in layout["shapes"])
    calm = iterations_figure(iterations.iloc[1:], example.summary, gpu=False)
    assert calm is not None and "range" not in calm["layout"]["yaxis"]
    assert "annotations" not in calm["layout"]


def test_kernels_sharing_a_short_name_are_told_apart() -> None:
    """cuDF's templated ``_kernel_agent``s (names as the cudf corpus export has them): each
    label names its agent; a unique short name stays as it is."""
    from dlprof_lite.render.page.charts import kernel_labels

    full = [
        "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__merge_sort::MergeAgent"
        "<int*, int*, long>, bool, int*>(bool, int*)",
        "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__merge_sort::"
        "PartitionAgent<int*, long>, bool>(bool)",
        "probe_hash_table(int)",
    ]
    labels = kernel_labels(["_kernel_agent", "_kernel_agent", "probe_hash_table"], full)
    # Cut to the chart's 60 characters (the hover has the whole name).
    assert labels == ["_kernel_agent<MergeAgent<int*, int*, long>, bool, int*>(boo…",
                      "_kernel_agent<PartitionAgent<int*, long>, bool>(bool)",
                      "probe_hash_table"]  # fmt: skip


def test_containers_are_charted_apart_from_their_layers(example: Report) -> None:
    """A root holding two layers: the chart has the two leaves; the page's note names the
    root with its inclusive time."""
    from dlprof_lite.render.page.charts import containers, layers_figure
    from dlprof_lite.render.page.html import report_page

    root = example.layers.iloc[[0]].assign(layer="model", parent=None, type="Net", order=0)
    layers = pd.concat([root, example.layers.assign(parent="model")], ignore_index=True)
    assert containers(layers).tolist() == [True, False, False]
    fig, left = layers_figure(layers, gpu=True)
    assert fig is not None and left == 0
    assert fig["data"][0]["x"] == ["fc1", "act"]
    page = report_page(Report(**{**example.__dict__, "layers": layers}))
    assert "Containers, not charted beside the layers they hold" in page
    assert "model (Net)" in page


def test_iteration_ticks_are_whole_numbers() -> None:
    from dlprof_lite.render.page.charts import whole_step

    steps = {n: whole_step(n) for n in (3, 12, 13, 25, 60, 294, 5155)}
    assert steps == {3: 1, 12: 1, 13: 2, 25: 5, 60: 5, 294: 50, 5155: 500}


def test_layer_labels_drop_the_path_every_layer_shares() -> None:
    from dlprof_lite.render.page.charts import common_parent

    names = ["model.encoder.layers.0.attn", "model.encoder.layers.11.attn"]
    assert common_parent(names) == ("model.encoder.layers", ["0.attn", "11.attn"])
    assert common_parent(["conv1", "conv2"]) == ("", ["conv1", "conv2"])
    assert common_parent(["a.b", "a.b.c"]) == ("a", ["b", "b.c"])  # never an empty label
    assert common_parent(["features.0"]) == ("", ["features.0"])
