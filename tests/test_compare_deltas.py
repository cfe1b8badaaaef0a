"""Where the time changed: phase, layer, kernel and summary deltas, on hand-built round numbers.

Every expected figure is worked out by hand from the tables the test builds (per step =
window total / the table's steps; a pooled side = the runs weighted by their steps).
"""

from __future__ import annotations

import pytest

from compare_builders import MS, run, side
from dlprof_lite.compare.comparison import compare_sides
from dlprof_lite.compare.deltas import (
    ADDED,
    BOTH,
    KERNEL,
    LAYER,
    PHASE,
    REMOVED,
    SUMMARY,
    Delta,
    holm,
    renamed_layers,
    side_deltas,
)

N = 10  # steps per run


def _tree(leaf_extra_ms: float, steps: int = N) -> list[dict[str, object]]:
    """model > block > fc, 1 ms self forward each; ``leaf_extra_ms`` more in fc's own
    forward, which every ancestor's inclusive time carries too."""
    leaf = 1.0 + leaf_extra_ms
    return [
        dict(layer="model", parent="", self_forward_wall_ns=1 * MS * steps,
             step_forward_wall_ns=(2 + leaf) * MS, calls_per_step=1.0,
             self_backward_wall_ns=2 * MS * steps, step_backward_wall_ns=2 * MS),
        dict(layer="model.block", parent="model", self_forward_wall_ns=1 * MS * steps,
             step_forward_wall_ns=(1 + leaf) * MS, calls_per_step=1.0),
        dict(layer="model.block.fc", parent="model.block", type="Linear",
             self_forward_wall_ns=leaf * MS * steps, step_forward_wall_ns=leaf * MS,
             calls_per_step=1.0),
    ]  # fmt: skip


def _by(deltas: list[Delta] | tuple[Delta, ...], section: str) -> dict[tuple[str, str, str], Delta]:
    return {(d.name, d.direction, d.metric): d for d in deltas if d.section == section}


def _ranked_names(deltas: tuple[Delta, ...], section: str) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for d in deltas:
        if d.section == section:
            seen[(d.name, d.direction)] = None
    return list(seen)


def test_a_slower_leaf_ranks_first_ahead_of_its_parents() -> None:
    a = side("A", run([100 * MS] * N, layer_rows=_tree(0)))
    b = side("B", run([105 * MS] * N, layer_rows=_tree(5)))
    deltas = side_deltas(a, b)
    order = _ranked_names(deltas, LAYER)
    assert order[0] == ("model.block.fc", "forward")
    layers = _by(deltas, LAYER)
    fc = layers[("model.block.fc", "forward", "self_wall_ns")]
    assert (fc.baseline_value, fc.value, fc.delta, fc.rank) == (1 * MS, 6 * MS, 5 * MS, 1)
    assert fc.delta_pct == pytest.approx(500.0)
    # The parents' inclusive time rose by the same 5 ms (kept as rows), their self time not.
    for parent in ("model", "model.block"):
        assert layers[(parent, "forward", "wall_ns")].delta == pytest.approx(5 * MS)
        assert layers[(parent, "forward", "self_wall_ns")].delta == 0
        assert layers[(parent, "forward", "self_wall_ns")].rank > 1
    assert layers[("model", "backward", "self_wall_ns")].value == 2 * MS  # per step


def test_layers_rank_by_self_gpu_time_too_and_directions_apart() -> None:
    rows_a = [dict(layer="m.conv", self_backward_gpu_ns=3 * MS * N, self_forward_gpu_ns=1 * MS * N),
              dict(layer="m.fc", self_forward_wall_ns=1 * MS * N)]  # fmt: skip
    rows_b = [dict(layer="m.conv", self_backward_gpu_ns=1 * MS * N, self_forward_gpu_ns=1 * MS * N),
              dict(layer="m.fc", self_forward_wall_ns=2 * MS * N)]  # fmt: skip
    deltas = side_deltas(side("A", run([MS] * N, layer_rows=rows_a)),
                         side("B", run([MS] * N, layer_rows=rows_b)))  # fmt: skip
    order = _ranked_names(deltas, LAYER)
    # conv backward got 2 ms faster (GPU), fc forward 1 ms slower (wall): by |change|.
    assert order[:2] == [("m.conv", "backward"), ("m.fc", "forward")]
    conv = _by(deltas, LAYER)[("m.conv", "backward", "self_gpu_ns")]
    assert conv.delta == -2 * MS and conv.rank == 1


def test_layers_on_one_side_only_are_added_or_removed() -> None:
    a = side("A", run([MS] * N, layer_rows=[dict(layer="m.old", self_forward_wall_ns=4 * MS * N)]))
    b = side("B", run([MS] * N, layer_rows=[dict(layer="m.new", self_forward_wall_ns=MS * N)]))
    layers = _by(side_deltas(a, b), LAYER)
    old = layers[("m.old", "forward", "self_wall_ns")]
    new = layers[("m.new", "forward", "self_wall_ns")]
    assert (old.status, old.baseline_value, old.value, old.delta) == (REMOVED, 4 * MS, 0.0, -4 * MS)
    assert (new.status, new.baseline_value, new.value, new.delta_pct) == (ADDED, 0.0, MS, None)
    assert old.rank < new.rank


def test_kernel_deltas_per_step_and_ranked_by_absolute_change() -> None:
    a = side("A", run([MS] * N, kernel_rows=[("gemm", 2 * N, 30 * MS), ("relu", N, 10 * MS),
                                             ("gone", N, 1 * MS)]))  # fmt: skip
    b = side("B", run([MS] * 20, kernel_rows=[("gemm", 2 * 20, 20 * MS), ("relu", 20, 40 * MS),
                                              ("new", 20, 2 * MS)]))  # fmt: skip
    deltas = side_deltas(a, b)
    kernels = _by(deltas, KERNEL)
    # per step: gemm 3 -> 1 ms (-2), relu 1 -> 2 ms (+1), gone 0.1 -> 0, new 0 -> 0.1 ms
    assert kernels[("gemm", "", "gpu_ns")].delta == pytest.approx(-2 * MS)
    assert kernels[("relu", "", "gpu_ns")].delta == pytest.approx(1 * MS)
    assert kernels[("gemm", "", "instances")].value == pytest.approx(2.0)
    assert kernels[("gone", "", "gpu_ns")].status == REMOVED
    assert kernels[("new", "", "gpu_ns")].status == ADDED
    assert [n for n, _ in _ranked_names(deltas, KERNEL)][:2] == ["gemm", "relu"]


def test_pooled_side_weights_runs_by_their_steps() -> None:
    # Two runs of 10 and 30 steps, forward wall 2 and 4 ms per step: pooled 3.5 ms.
    r1 = run([MS] * 10, phases={"forward": (1 * MS, 2 * MS)},
             layer_rows=[dict(layer="m", self_forward_wall_ns=2 * MS * 10)],
             kernel_rows=[("k", 10, 10 * MS)], summary={"tc_share": 0.2})  # fmt: skip
    r2 = run([MS] * 30, phases={"forward": (1 * MS, 4 * MS)},
             layer_rows=[dict(layer="m", self_forward_wall_ns=4 * MS * 30)],
             kernel_rows=[("k", 30, 90 * MS)], summary={"tc_share": 0.6})  # fmt: skip
    base = run([MS] * 40, phases={"forward": (1 * MS, 3 * MS)},
               layer_rows=[dict(layer="m", self_forward_wall_ns=3 * MS * 40)],
               kernel_rows=[("k", 40, 80 * MS)], summary={"tc_share": 0.5})  # fmt: skip
    deltas = side_deltas(side("A", base), side("B", r1, r2))
    phase = _by(deltas, PHASE)[("forward", "", "wall_ns")]
    assert phase.value == pytest.approx(3.5 * MS) and phase.delta == pytest.approx(0.5 * MS)
    assert _by(deltas, LAYER)[("m", "forward", "self_wall_ns")].value == pytest.approx(3.5 * MS)
    # kernel k: (1 ms x 10 + 3 ms x 30) / 40 = 2.5 ms per step against 2 ms
    assert _by(deltas, KERNEL)[("k", "", "gpu_ns")].value == pytest.approx(2.5 * MS)
    tc = _by(deltas, SUMMARY)[("tc_share", "", "tc_share")]
    assert tc.value == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    assert tc.delta == pytest.approx(0.5 - 0.5)


def test_phase_and_summary_deltas() -> None:
    a = side("A", run([MS] * N, phases={"forward": (2 * MS, 3 * MS), "data": (0, 1 * MS)},
                      summary={"tc_share": 0.5, "launch_overhead_pct": 10.0}))  # fmt: skip
    b = side("B", run([MS] * N, phases={"forward": (2 * MS, 3 * MS), "data": (0, 4 * MS)},
                      summary={"tc_share": 0.25}))  # fmt: skip
    deltas = side_deltas(a, b)
    phases = _by(deltas, PHASE)
    assert phases[("data", "", "wall_ns")].delta == pytest.approx(3 * MS)
    assert phases[("data", "", "wall_ns")].rank == 1  # the data phase changed most
    assert phases[("forward", "", "gpu_ns")].delta == 0
    assert all(d.status == BOTH for d in deltas if d.section == PHASE)
    summary = _by(deltas, SUMMARY)
    assert summary[("tc_share", "", "tc_share")].delta == pytest.approx(-0.25)
    assert summary[("tc_share", "", "tc_share")].delta_pct == pytest.approx(-50.0)
    overhead = summary[("launch_overhead_pct", "", "launch_overhead_pct")]
    assert (overhead.baseline_value, overhead.value, overhead.delta) == (10.0, None, None)


def test_each_other_side_is_compared_with_the_baseline() -> None:
    a = side("A", run([100 * MS] * N, layer_rows=_tree(0)))
    b = side("B", run([100 * MS] * N, layer_rows=_tree(1)))
    c = side("C", run([100 * MS] * N, layer_rows=_tree(3)))
    comparison = compare_sides([a, b, c], resamples=200)
    assert [d.label for d in comparison.steps] == ["B", "C"]
    for label, extra in (("B", 1), ("C", 3)):
        rows = comparison.section(LAYER, label)
        assert rows[0].name == "model.block.fc" and rows[0].baseline == "A"
        assert rows[0].delta == pytest.approx(extra * MS)


def test_layers_rank_by_median_self_time_not_a_few_slow_steps() -> None:
    """``steady`` is 1 ms slower in every step (median +1 ms); ``stall`` slowed in one step
    of ten by 30 ms (mean +3 ms, median unchanged): the steady change ranks first."""
    steps = 10

    def rows(steady_ms: float, stall_total_ms: float) -> list[dict[str, object]]:
        return [
            dict(layer="steady", self_forward_wall_ns=steady_ms * MS * steps,
                 step_self_forward_wall_median_ns=steady_ms * MS, calls_per_step=1.0),
            dict(layer="stall", self_forward_wall_ns=stall_total_ms * MS,
                 step_self_forward_wall_median_ns=2 * MS, calls_per_step=1.0),
        ]  # fmt: skip

    a = side("A", run([100 * MS] * steps, layer_rows=rows(2, 2 * steps)))
    b = side("B", run([100 * MS] * steps, layer_rows=rows(3, 2 * steps + 30)))
    deltas = side_deltas(a, b)
    assert _ranked_names(deltas, LAYER)[0] == ("steady", "forward")
    layers = _by(deltas, LAYER)
    assert layers[("stall", "forward", "self_wall_ns")].delta == 3 * MS  # the mean moved
    assert layers[("stall", "forward", "self_wall_median_ns")].delta == 0
    assert layers[("steady", "forward", "self_wall_median_ns")].delta == 1 * MS


def test_layers_named_before_wrappers_were_seen_through_are_matched() -> None:
    """A run stored with DDP's ``module.`` and Lightning's ``_lightning_module`` against one
    with plain names: matched, and one warning line says the names changed."""
    old = [dict(layer="model", self_forward_wall_ns=1 * MS * N),
           dict(layer="module.conv", self_forward_wall_ns=2 * MS * N),
           dict(layer="_lightning_module.fc", self_forward_wall_ns=3 * MS * N),
           dict(layer="module.module", self_forward_wall_ns=1 * MS * N)]  # fmt: skip
    new = [dict(layer="model", self_forward_wall_ns=1 * MS * N),
           dict(layer="conv", self_forward_wall_ns=2 * MS * N),
           dict(layer="fc", self_forward_wall_ns=4 * MS * N),
           dict(layer="module", self_forward_wall_ns=1 * MS * N)]  # fmt: skip
    a, b = side("A", run([MS] * N, layer_rows=old)), side("B", run([MS] * N, layer_rows=new))
    assert renamed_layers(a, b) == {"module.conv": "conv", "_lightning_module.fc": "fc",
                                    "module.module": "module"}  # fmt: skip
    layers = _by(side_deltas(a, b), LAYER)
    fc = layers[("fc", "forward", "self_wall_ns")]
    assert (fc.status, fc.baseline_value, fc.value) == ("both", 3 * MS, 4 * MS)
    assert not [k for k in layers if "module." in k[0] or "_lightning" in k[0]]
    warnings = compare_sides([a, b]).warnings
    changed = [w for w in warnings if w.startswith("layer names changed")]
    assert len(changed) == 1 and "module.conv -> conv" in changed[0], warnings
    assert not [w for w in warnings if w.startswith("layers only in")], warnings


def test_same_names_are_never_renamed() -> None:
    rows = [dict(layer="model"), dict(layer="module.fc")]  # a user's attribute called module
    a, b = side("A", run([MS] * N, layer_rows=rows)), side("B", run([MS] * N, layer_rows=rows))
    assert renamed_layers(a, b) == {}
    assert not [w for w in compare_sides([a, b]).warnings if "names changed" in w]


def test_holm_adjusts_by_hand() -> None:
    # Sorted 0.01, 0.03, 0.04, 0.2: x4 = 0.04, x3 = 0.09, x2 = 0.08 -> 0.09 (monotone), x1.
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm([]) == []


def _runs_with(fc_ms: float, big_ms: list[float]) -> list:
    """One run per ``big_ms``: fc's self forward median ``fc_ms`` (the same every run),
    big's ``big_ms[i]`` (a layer the machine's load moves from run to run)."""
    return [run([20 * MS] * N, layer_rows=[
        dict(layer="fc", step_self_forward_wall_median_ns=fc_ms * MS * (1 + 0.01 * i),
             self_forward_wall_ns=fc_ms * MS * N, calls_per_step=1.0),
        dict(layer="big", step_self_forward_wall_median_ns=b * MS,
             self_forward_wall_ns=b * MS * N, calls_per_step=1.0),
    ]) for i, b in enumerate(big_ms)]  # fmt: skip


def test_a_layer_slower_in_every_run_is_flagged_and_ranked_before_a_noisy_one() -> None:
    """fc: 1.00-1.02 ms in A's runs, 1.20-1.22 ms in B's (+20 %, +0.2 ms); big: 10 ms
    give or take 30 % from run to run (its mean moves by +1.3 ms, more than fc's). The
    run-level test calls fc slower and ranks it first; big is no significant change."""
    a = side("A", *_runs_with(1.0, [10, 7, 13]))
    b = side("B", *_runs_with(1.2, [12, 8, 14]))
    rows = [d for d in side_deltas(a, b) if d.section == LAYER and d.direction == "forward"
            and d.metric == "self_wall_median_ns"]  # fmt: skip
    by_name = {d.name: d for d in rows}
    assert by_name["big"].delta == pytest.approx(4 / 3 * MS)  # the larger raw change
    assert by_name["fc"].delta == pytest.approx(0.202 * MS)  # 1.2 x 1.01 - 1.01 ms
    assert by_name["fc"].verdict == "slower" and by_name["fc"].rank == 1
    assert by_name["fc"].p_value is not None and by_name["fc"].p_value < 0.05
    assert by_name["big"].verdict == "no significant change" and by_name["big"].rank == 2
    # One run a side: nothing is tested, and the raw change ranks.
    one = side_deltas(side("A", a.runs[0]), side("B", b.runs[2]))
    ranked = [d for d in one if d.section == LAYER and d.metric == "self_wall_median_ns"
              and d.direction == "forward"]  # fmt: skip
    assert {d.verdict for d in ranked} == {"not tested (one run a side)"}
    assert min(ranked, key=lambda d: d.rank).name == "big"


def test_flops_and_memory_per_layer_are_compared_and_a_work_change_is_named() -> None:
    """A layer four times as wide: its FLOPs per step (per direction), parameter and saved
    bytes are deltas; the apples-to-apples warning names it with its FLOPs; the model's
    FLOPs, MFU, saved bytes and GPU peak are summary deltas."""
    from dlprof_lite.compare.checks import layer_warnings

    def rows(width: int) -> list[dict[str, object]]:
        return [dict(layer="fc", parent="model", type="Linear", calls_per_step=1.0,
                     self_forward_wall_ns=width * MS * N, step_forward_wall_ns=width * MS,
                     step_forward_flops=1e6 * width, step_backward_flops=2e6 * width,
                     param_bytes=4096 * width, saved_bytes=1000 * width)]  # fmt: skip

    def summary(width: int) -> dict[str, object]:
        return {"model_flops_per_step": 3e6 * width, "mfu": 0.1 * width,
                "memory_saved_bytes": 1000 * width, "memory_gpu_peak_bytes": 9000 * width}

    a = side("A", run([10 * MS] * N, layer_rows=rows(1), summary=summary(1)))
    b = side("B", run([40 * MS] * N, layer_rows=rows(4), summary=summary(4)))
    deltas = side_deltas(a, b)
    layers = _by(deltas, LAYER)
    assert (layers[("fc", "forward", "flops")].baseline_value,
            layers[("fc", "forward", "flops")].value) == (1e6, 4e6)  # fmt: skip
    assert layers[("fc", "backward", "flops")].value == 8e6
    assert layers[("fc", "forward", "param_bytes")].value == 4 * 4096
    assert layers[("fc", "forward", "saved_bytes")].delta == 3000
    summaries = {d.metric: d for d in deltas if d.section == SUMMARY}
    for metric, base in (("model_flops_per_step", 3e6), ("mfu", 0.1),
                         ("memory_saved_bytes", 1000), ("memory_gpu_peak_bytes", 9000)):
        assert summaries[metric].baseline_value == pytest.approx(base)
        assert summaries[metric].value == pytest.approx(4 * base)
    (warning,) = [w for w in layer_warnings(deltas, "A", "B") if "FLOPs" in w]
    assert "fc 3 MFLOP -> 12 MFLOP" in warning and "different work" in warning
