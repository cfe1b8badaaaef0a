"""The critical path and what-if on generated steps whose dependencies are known, every
figure worked out by hand (round numbers).

Each profile is one step ``[0, 10000)`` of one main thread (tid 10) on one device. The path
of a step adds up to the step's time; its parts and the replay's predictions follow from
the dependencies planted: a serial GPU-bound chain, two streams joined by an event, a sync,
a host-bound loop and a data wait.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from builders import R, make_profile, phase
from dlprof_lite.errors import InputError
from dlprof_lite.report.critical.graph import build_graph
from dlprof_lite.report.critical.path import critical_paths
from dlprof_lite.report.critical.prediction import Scale
from dlprof_lite.report.critical.replay import replay
from dlprof_lite.report.critical.whatif import predict
from dlprof_lite.rules.critical import PARTS

SYNC = "cudaDeviceSynchronize_v3020"


def _k(start: int, dur: int, api: tuple[int, int], stream: int = 7, name: str = "k") -> dict:
    return {"name": name, "start_ns": start, "dur_ns": dur, "api_start_ns": api[0],
            "api_end_ns": api[1], "api_name": "cudaLaunchKernel_v7000", "tid": 10,
            "stream_id": stream}  # fmt: skip


def _graph(kernels: list[dict], layers: list[R], api: tuple[dict, ...] = (), data: int = 0,
           step: int = 10_000):  # fmt: skip
    ranges = [phase("iteration", 0, step), phase("forward", data, step),
              R("fwd:model:Net", data, step, layers)]  # fmt: skip
    if data:
        ranges.append(phase("data", 0, data))
    p = make_profile(ranges=ranges, kernels=kernels, api=list(api), session=(0, step),
                     iterations=[(0, step, False, True)])  # fmt: skip
    return build_graph(p.kernels, p.memops, p.api, p.ranges, p.iterations)


def _parts(g) -> dict[str, int]:
    path = critical_paths(g)
    pieces = path.pieces(g)
    out = dict.fromkeys(PARTS, 0)
    for part, lo, hi in zip(pieces.part, pieces.t0, pieces.t1, strict=True):
        out[PARTS[part]] += int(hi - lo)
    assert sum(out.values()) == int(path.length.sum())
    return out


def _predict(g, *scales: str) -> float:
    found = predict(g, [Scale.parse(s) for s in scales])
    return float(found.predicted[0])


def _identity(g) -> None:
    again = replay(g, np.ones(g.size))
    assert np.array_equal(again.start, g.start) and np.array_equal(again.end, g.end)


def serial():
    """GPU-bound: three kernels on one stream launched at once; a sync waits for the last."""
    kernels = [_k(200, 3_000, (100, 150)), _k(3_200, 2_000, (400, 450), name="kb"),
               _k(5_200, 1_000, (500, 550), name="kb")]  # fmt: skip
    layers = [R("fwd:a:Linear", 0, 300), R("fwd:b:Linear", 300, 600)]
    return _graph(kernels, layers, ({"name": SYNC, "start_ns": 600, "end_ns": 6_300},))


def test_serial_chain_is_the_path() -> None:
    g = serial()
    _identity(g)
    # host [0, 100) launches a, latency 100, kernels 3000 + 2000 + 1000, the sync returns
    # 100 after the last, the host runs the step's last 3700
    assert _parts(g) == {"host": 100 + 3_700, "device": 6_000, "latency": 100 + 100, "wait": 0}
    path = critical_paths(g)
    assert path.length.tolist() == [10_000]


def test_serial_what_if() -> None:
    g = serial()
    # b's host 300 -> 150 and kernels 3000 -> 1500: the chain ends 1500 earlier
    assert _predict(g, "layer=b:0.5") == 8_500
    # a removed: its kernel too; b's launches move to 100 and 200, the chain starts at 200
    assert _predict(g, "layer=a:0") == 7_000
    assert _predict(g, "kernel=^kb$:2") == 13_000
    # b 10 % shorter: its host 270, its kernels 1800 and 900: 300 less
    assert _predict(g, "layer=b:0.9") == 10_000 - 300


def two_streams():
    """In microseconds (the event rule's tolerances are real ones): stream 7 runs x in
    [1000, 4000); stream 8's y was launched at 200 but waits for x (an event): it starts 2 ns
    after x's end; a sync waits for y."""
    us = 1_000
    kernels = [_k(1_000 * us, 3_000 * us, (100 * us, 150 * us), name="x"),
               _k(4_000 * us + 2, 2_000 * us, (200 * us, 250 * us), stream=8, name="y")]
    layers = [R("fwd:a:Linear", 0, 180 * us), R("fwd:b:Linear", 180 * us, 300 * us)]
    return _graph(kernels, layers, ({"name": SYNC, "start_ns": 300 * us, "end_ns": 6_100 * us},),
                  step=10_000 * us)  # fmt: skip


def test_event_join_of_two_streams() -> None:
    g = two_streams()
    _identity(g)
    us = 1_000
    # the path: host [0, 100), x's launch latency 900, x 3000, the event's 2 ns, y 2000,
    # the sync's return, the host's last 3900
    assert _parts(g) == {"host": 100 * us + 3_900 * us, "device": 5_000 * us,
                         "latency": 900 * us + 2 + (100 * us - 2), "wait": 0}  # fmt: skip
    # halving x moves y with it (the event edge): the step is 1500 shorter
    assert _predict(g, "kernel=^x$:0.5") == 8_500 * us
    # halving y: 1000 shorter
    assert _predict(g, "kernel=^y$:0.5") == 9_000 * us


def test_sync_holds_the_host() -> None:
    """After a sync the host's next launch waits for the GPU: the kernel before the sync
    and the host after it are both on the path."""
    kernels = [_k(200, 4_000, (100, 150)), _k(4_500, 1_000, (4_400, 4_450))]
    layers = [R("fwd:a:Linear", 0, 300), R("fwd:b:Linear", 4_300, 5_600)]
    g = _graph(kernels, layers, ({"name": SYNC, "start_ns": 300, "end_ns": 4_300},
                                 {"name": SYNC, "start_ns": 5_600, "end_ns": 5_600 + 100}))
    _identity(g)
    # the first kernel 4000 shorter by half: the sync returns 2000 earlier, and all after it
    # a's kernel 2000 shorter, and launched 50 earlier (a's host before the launch halves)
    assert _predict(g, "layer=a:0.5") == 10_000 - 2_000 - 50
    found = predict(g, [Scale.parse("layer=a:0.5")])
    assert any("sync" in n for n in found.notes)


def test_host_bound_step() -> None:
    """Kernels shorter than the host's time between launches: the path is the host's."""
    kernels = [_k(100 + 1_000 * i, 100, (1_000 * i + 50, 1_000 * i + 80)) for i in range(9)]
    g = _graph(kernels, [R("fwd:a:Linear", 0, 10_000)])
    _identity(g)
    parts = _parts(g)
    assert parts["host"] == 10_000 and parts["device"] == 0
    assert _predict(g, "kernel=k:3") == 10_000  # the GPU has room: no change
    assert _predict(g, "layer=a:0.5") == 5_000 + 0  # host halves; the last kernel ends early


def test_data_wait() -> None:
    """A data wait of 4000 before the forward: removing it saves its 4000."""
    kernels = [_k(4_200, 500, (4_100, 4_150))]
    g = _graph(kernels, [R("fwd:a:Linear", 4_000, 5_000)], data=4_000)
    _identity(g)
    assert _predict(g, "phase=data:0") == 6_000
    assert _predict(g, "phase=data:0.5") == 8_000


def test_bad_scales() -> None:
    g = serial()
    for text in ("layer=a", "layers=a:1", "layer=a:-1", "layer=a:x", "kernel=(:1", "=a:1"):
        with pytest.raises(InputError):
            Scale.parse(text)
    with pytest.raises(InputError, match="no layer 'zz'"):
        predict(g, [Scale.parse("layer=zz:0.5")])


def _with_records(g_profile, streams: dict[int, int]):
    """The profile's API calls with the synchronisation records' column, as the reader
    writes it for an export that has them: ``streams`` maps a call's start to its stream."""
    from dataclasses import replace

    api = g_profile.api.copy()
    recorded = api["start_ns"].map(streams)
    api["sync_stream"] = pd.array(recorded.to_numpy(), dtype="Int32")
    return replace(g_profile, api=api)


def _two_streams_with_a_stream_sync():
    """x on stream 7 [1000, 2050), y on stream 8 [500, 2000); the host waits for stream 8
    only (cudaStreamSynchronize, [300, 2100)), then works to 10 000."""
    kernels = [_k(1_000, 1_050, (100, 150), name="x"), _k(500, 1_500, (200, 250), stream=8,
                                                            name="y")]  # fmt: skip
    ranges = [phase("iteration", 0, 10_000), phase("forward", 0, 10_000),
              R("fwd:model:Net", 0, 10_000, [R("fwd:a:Linear", 0, 300)])]  # fmt: skip
    call = {"name": "cudaStreamSynchronize_v3020", "start_ns": 300, "end_ns": 2_100}
    return make_profile(ranges=ranges, kernels=kernels, api=[call],
                        iterations=[(0, 10_000, False, True)])  # fmt: skip


def _graph_of(p):
    return build_graph(p.kernels, p.memops, p.api, p.ranges, p.iterations)


def test_a_stream_sync_waits_for_its_own_stream_where_the_export_says_which() -> None:
    p = _two_streams_with_a_stream_sync()
    # Timing alone: the call returned after x, the last op to end before it did.
    assert _predict(_graph_of(p), "kernel=^x$:2") == 10_000 + 1_050
    # The record names stream 8: the call waited for y; x beside the path changes nothing.
    recorded = _graph_of(_with_records(p, {300: 8}))
    _identity(recorded)
    assert _predict(recorded, "kernel=^x$:2") == 10_000
    assert _predict(recorded, "kernel=^y$:2") == 10_000 + 1_500


def test_event_edges_only_after_a_recorded_stream_wait() -> None:
    """In microseconds: y on stream 8 starts 2 ns after x on stream 7 ends, long after its
    launch. Timing alone infers an event wait; an export whose records show no wait on
    stream 8 says it was something else (its slack is kept), one that shows the wait
    agrees."""
    g = two_streams()
    us = 1_000
    assert _predict(g, "kernel=^x$:0.5") == 8_500 * us  # inferred: y follows x
    p = make_profile(
        ranges=[phase("iteration", 0, 10_000 * us), phase("forward", 0, 10_000 * us),
                R("fwd:model:Net", 0, 10_000 * us, [R("fwd:a:Linear", 0, 180 * us),
                                                    R("fwd:b:Linear", 180 * us, 300 * us)])],
        kernels=[_k(1_000 * us, 3_000 * us, (100 * us, 150 * us), name="x"),
                 _k(4_000 * us + 2, 2_000 * us, (200 * us, 250 * us), stream=8, name="y")],
        api=[{"name": SYNC, "start_ns": 300 * us, "end_ns": 6_100 * us},
             {"name": "cudaStreamWaitEvent_v3020", "start_ns": 190 * us,
              "end_ns": 195 * us}],
        session=(0, 10_000 * us), iterations=[(0, 10_000 * us, False, True)],
    )  # fmt: skip
    none_recorded = _graph_of(_with_records(p, {}))
    assert _predict(none_recorded, "kernel=^x$:0.5") == 10_000 * us  # y keeps its start
    waited = _graph_of(_with_records(p, {190 * us: 8}))
    _identity(waited)
    assert _predict(waited, "kernel=^x$:0.5") == 8_500 * us
