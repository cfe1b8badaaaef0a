"""Apples to apples: every warning and every refusal of compare, each on its own."""

from __future__ import annotations

import math
import re
from statistics import NormalDist

import pytest

from compare_builders import MS, normal_side, normal_steps, run, side
from dlprof_lite.compare.checks import CompareError
from dlprof_lite.compare.comparison import Comparison, compare_sides
from dlprof_lite.errors import DlprofError
from dlprof_lite.rules import compare as rules
from dlprof_lite.store.record import RunContext

KERNELS = [("gemm", 60, 60 * MS)]


def _compare(*sides: object) -> Comparison:
    return compare_sides(list(sides), resamples=100)  # type: ignore[arg-type]


def _steady(label: str, n: int = 60, **kwargs: object) -> object:
    """A side whose steps need no more than ``n`` for the statistics (0.1 ms spread)."""
    return side(label, run(normal_steps(100, 0.1, n, seed=len(label) + n), **kwargs))  # type: ignore[arg-type]


def _warnings(c: Comparison, pattern: str) -> list[str]:
    return [w for w in c.warnings if re.search(pattern, w)]


# --- refusals -------------------------------------------------------------------------------


def _refused(*sides: object) -> str:
    with pytest.raises(CompareError) as err:
        _compare(*sides)
    assert isinstance(err.value, DlprofError) and err.value.exit_code == 2
    line = str(err.value)
    assert "\n" not in line
    return line


def test_refuses_fewer_than_two_sides() -> None:
    assert "at least one other side" in _refused(_steady("A"))


def test_refuses_a_side_with_no_analysed_steps() -> None:
    only_warmup = side("B", run([], warmup=3))
    line = _refused(_steady("A"), only_warmup)
    assert line.startswith("B") and "no analysed steps" in line


def test_refuses_a_pooled_side_with_a_run_without_steps_and_names_it() -> None:
    empty = run([], warmup=2, context=RunContext(report_dir="runs/r2.dlprof"))
    line = _refused(_steady("A"), side("tag:x", run([100 * MS] * 60), empty))
    assert "runs/r2.dlprof" in line


def test_refuses_kernels_on_one_side_and_none_on_the_other() -> None:
    line = _refused(_steady("gpu", kernel_rows=KERNELS), _steady("lost"))
    assert "gpu captured GPU kernels" in line and "lost" in line
    # either order, and a pooled side with one kernel-less run
    _refused(_steady("lost"), _steady("gpu", kernel_rows=KERNELS))
    mixed = side("mixed", run(normal_steps(100, 0.1, 60, 1), kernel_rows=KERNELS),
                 run(normal_steps(100, 0.1, 60, 2)))  # fmt: skip
    _refused(_steady("gpu", kernel_rows=KERNELS), mixed)


def test_two_cpu_only_runs_without_kernels_compare() -> None:
    c = _compare(_steady("A"), _steady("B"))
    assert len(c.steps) == 1


def test_refuses_a_side_with_far_fewer_steps() -> None:
    few = int(60 / rules.FAR_FEWER_RATIO) - 1  # 5 against 60
    line = _refused(_steady("A", 60), _steady("B", few))
    assert f"B has {few} analysed steps and A 60" in line
    _refused(_steady("A", few), _steady("B", 60))  # either way round
    _compare(_steady("A", 60), _steady("B", 6))  # 1/10 exactly is still a comparison


# --- warnings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "shown", "a", "b"),
    [
        ("gpu_names", "GPU", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"),
        ("driver_version", "driver", "535.104.05", "550.54.15"),
        ("cuda_version", "CUDA", "12.1", "12.4"),
        ("torch_version", "torch", "2.3.0", "2.4.1"),
        ("python_version", "Python", "3.10.12", "3.11.7"),
        ("nsys_version", "nsys", "2022.4.2", "2024.2.1"),
        ("host", "host", "node-a", "node-b"),
        ("key_range", "key range", "iteration", "train_step"),
    ],
)
def test_warns_of_a_different_environment(field: str, shown: str, a: str, b: str) -> None:
    c = _compare(_steady("A", summary={field: a}), _steady("B", summary={field: b}))
    assert _warnings(c, f"^different {shown}: A {re.escape(a)}; B {re.escape(b)}$")
    same = _compare(_steady("A", summary={field: a}), _steady("B", summary={field: a}))
    assert not same.warnings
    unknown = _compare(_steady("A", summary={field: a}), _steady("B"))  # None: no difference
    assert not unknown.warnings


def test_warns_of_a_pooled_side_mixing_environments() -> None:
    pooled = side("tag", run(normal_steps(100, 0.1, 60, 1), summary={"torch_version": "2.3"}),
                  run(normal_steps(100, 0.1, 60, 2), summary={"torch_version": "2.4"}))  # fmt: skip
    c = _compare(_steady("A", summary={"torch_version": "2.3"}), pooled)
    assert _warnings(c, "^tag pools runs of different torch: 2.3, 2.4$")


def test_host_from_the_run_context_when_the_summary_lacks_it() -> None:
    c = _compare(
        _steady("A", context=RunContext(host="a")), _steady("B", context=RunContext(host="b"))
    )
    assert _warnings(c, "^different host: A a; B b$")


def test_warns_of_a_different_script_or_command_line() -> None:
    ctx = RunContext(command=("python", "train.py", "--bs", "32"), script="train.py")
    other = RunContext(command=("python", "eval.py"), script="eval.py")
    c = _compare(_steady("A", context=ctx), _steady("B", context=other))
    assert _warnings(c, "^different script: A train.py; B eval.py$")
    args = RunContext(command=("python", "train.py", "--bs", "64"), script="train.py")
    c = _compare(_steady("A", context=ctx), _steady("B", context=args))
    assert _warnings(
        c, "^different command line: A `python train.py --bs 32`; B `python train.py --bs 64`$"
    )
    assert not _compare(_steady("A", context=ctx), _steady("B", context=ctx)).warnings
    assert not _compare(_steady("A", context=ctx), _steady("B")).warnings  # B's unknown


def test_command_from_the_summary_when_the_context_has_none() -> None:
    c = _compare(_steady("A", summary={"command": "python train.py --amp"}),
                 _steady("B", summary={"command": "python train.py"}))  # fmt: skip
    assert _warnings(c, "^different command line")


def test_warns_of_different_layer_calls_per_step_naming_the_layers() -> None:
    def layers(calls: dict[str, float]) -> list[dict[str, object]]:
        return [dict(layer=name, calls_per_step=n) for name, n in calls.items()]

    base = {"m.a": 1.0, "m.b": 2.0, "m.c": 1.0, "m.d": 1.0, "m.e": 1.0, "m.f": 1.0}
    changed = {"m.a": 1.0, "m.b": 4.0, "m.c": 2.0, "m.d": 2.0, "m.e": 2.0, "m.f": 1.005}
    c = _compare(_steady("A", layer_rows=layers(base)), _steady("B", layer_rows=layers(changed)))
    [line] = _warnings(c, "calls per step differ")
    assert "m.b 2 -> 4" in line and "(+1 more)" in line  # 4 differ, 3 named
    assert "m.a" not in line and "m.f" not in line  # same, and within the 1 % tolerance
    assert not _warnings(c, "only in")


def test_warns_of_layers_on_one_side_only() -> None:
    c = _compare(_steady("A", layer_rows=[dict(layer="m.x", calls_per_step=1.0)]),
                 _steady("B", layer_rows=[dict(layer="m.y", calls_per_step=1.0)]))  # fmt: skip
    assert _warnings(c, "^layers only in B: m.y$") and _warnings(c, "^layers only in A: m.x$")


def _needed(std_ms: float, mean_ms: float) -> int:
    """The oracle: n = 2 (z_0.975 + z_0.8)^2 sigma^2 / (5 % of the mean)^2, at least 5."""
    z = NormalDist().inv_cdf(1 - 0.05 / 2) + NormalDist().inv_cdf(0.80)
    return max(5, math.ceil(2 * z * z * std_ms**2 / (0.05 * mean_ms) ** 2))


def test_warns_of_too_few_steps_and_says_how_many() -> None:
    # Alternating 96/104 ms: mean 100, sample std 4 x sqrt(8/7) over 8 steps.
    steps = [96 * MS, 104 * MS] * 4
    c = _compare(side("A", run(steps)), side("B", run(steps)))
    needed = _needed(4 * math.sqrt(8 / 7), 100)
    assert needed == 12
    [line] = _warnings(c, "^too few steps")
    assert "A 8, B 8" in line and f"needs about {needed} steps a side" in line


def test_enough_steps_and_the_floor() -> None:
    c = _compare(normal_side("A", 100, 4, 60, seed=1), normal_side("B", 100, 4, 60, seed=2))
    assert not _warnings(c, "too few")
    # No spread at all still needs MIN_STEPS: 4 equal steps a side are too few.
    flat = _compare(side("A", run([100 * MS] * 4)), side("B", run([100 * MS] * 4)))
    assert _warnings(flat, f"needs about {rules.MIN_STEPS} steps")


def test_a_layer_folded_in_some_runs_is_no_changed_model() -> None:
    """``tiny`` is timed (1 call per step) in one run and folded into its parent in the
    other (no calls after warm-up, ``folded_call_ns`` set): whether a module is short enough
    to fold is decided run by run, so its calls differ without the model changing."""
    timed = {"layer": "tiny", "calls_per_step": 1.0, "self_forward_wall_ns": 10 * MS}
    folded = {"layer": "tiny", "calls_per_step": float("nan"), "folded_call_ns": 50_000.0}
    big = {"layer": "big", "calls_per_step": 1.0, "self_forward_wall_ns": 600 * MS}
    bigger = {"layer": "big", "calls_per_step": 2.0, "self_forward_wall_ns": 600 * MS}
    a = _steady("A", layer_rows=[timed, big])
    b = _steady("B", layer_rows=[folded, bigger])
    c = _compare(a, b)
    [changed] = _warnings(c, "calls per step differ")
    assert "big 1 -> 2" in changed and "tiny" not in changed
    [line] = _warnings(c, "folded into their parent")
    assert line.endswith(": tiny")
