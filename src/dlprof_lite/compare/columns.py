"""The one-line definition of every compare.csv column and of every metric it names.

Place in the pipeline: compare. Like :mod:`dlprof_lite.report.metrics` for a report, this is
the registry the writers carry into compare.json and docs/reference/compare.md is built from:
``COMPARE_REPORT`` (the columns of compare.csv), ``COMPARE_METRICS`` (what each ``metric``
value means, per section), ``COMPARE_JSON_FIELDS`` (compare.json's own lists and fields) and
``COMPARE_RULES`` (the thresholds, with their citations).
"""

from __future__ import annotations

from dlprof_lite.report.metrics import ReportColumn
from dlprof_lite.rules import compare as rules
from dlprof_lite.rules.advice import Threshold


def _cols(*specs: tuple[str, str, str]) -> tuple[ReportColumn, ...]:
    return tuple(ReportColumn(*spec) for spec in specs)


COMPARE_REPORT = _cols(
    ("section", "", "step (step-time statistics), phase, idle (device idle and main-thread "
     "step time per cause; none when a side's runs predate it), layer, kernel or summary "
     "(Tensor Cores, launch overhead)"),
    ("name", "", "what the row is about: 'step', a phase, an idle cause, a layer's qualified "
     "name, a kernel name, or a summary field"),
    ("direction", "", "forward or backward for layer rows, empty otherwise"),
    ("metric", "", "the figure compared (compare.json 'metrics' defines each); all per "
     "analysed step"),
    ("unit", "", "unit of value, baseline_value, delta and the ci columns: ns, % or empty"),
    ("side", "", "the side the value belongs to, as named on the command line"),
    ("baseline", "", "the baseline side (the first named); empty on the baseline's own rows"),
    ("value", "", "the side's figure; a side of several runs: their steps pooled (step rows) "
     "or the runs' figures weighted by their steps"),
    ("baseline_value", "", "the baseline's figure"),
    ("delta", "", "value - baseline_value; step mean/median rows: the comparison's estimate "
     "(several runs: the change of the geometric mean of the run means/medians)"),
    ("delta_pct", "%", "delta as a percentage of baseline_value; empty when that is 0"),
    ("ci_low", "", "step mean/median rows: lower end of the 95 % interval of delta (between "
     "runs when tested, else the within-run moving-block bootstrap's)"),
    ("ci_high", "", "step mean/median rows: upper end of the 95 % interval of delta"),
    ("ci_pct_low", "%", "step mean/median rows: lower end of the 95 % interval of delta_pct"),
    ("ci_pct_high", "%", "step mean/median rows: upper end of the 95 % interval of delta_pct"),
    ("p_value", "", "step mean/median rows: p-value of the run-level t-test on log run "
     "medians (empty with one run a side); layer rows of the ranked metrics: the same test "
     "on the runs' self times, Holm-adjusted over the side's layers"),
    ("verdict", "", "step mean/median and ranked layer rows: slower, faster (run-level p < "
     "alpha), no significant change, or not tested (one run a side)"),
    ("rank", "", "place by absolute change within the section (1 = largest; layers by self "
     "time, forward and backward apart)"),
    ("status", "", "both; added: only on the side; removed: only on the baseline (counted 0 "
     "where missing)"),
)  # fmt: skip

_PER_STEP = "per analysed step"
COMPARE_METRICS = _cols(
    ("step.n", "", "analysed steps (every run's, pooled)"),
    ("step.runs", "", "runs the side pools"),
    ("step.mean_ns", "ns", "mean step wall time"),
    ("step.median_ns", "ns", "median step wall time"),
    ("step.std_ns", "ns", "sample standard deviation of step wall time (pooled steps)"),
    ("step.p10_ns", "ns", "10th percentile of step wall time (linear)"),
    ("step.p90_ns", "ns", "90th percentile of step wall time (linear)"),
    ("step.min_ns", "ns", "shortest step"),
    ("step.max_ns", "ns", "longest step"),
    ("step.within_run_std_ns", "ns", "several runs: pooled within-run standard deviation, "
     "sqrt(sum((n_r - 1) s_r^2) / sum(n_r - 1))"),
    ("step.between_run_std_ns", "ns", "several runs: sample standard deviation of the run means"),
    ("phase.gpu_ns", "ns", "device time running the phase's GPU ops, " + _PER_STEP),
    ("phase.wall_ns", "ns", "host time in the phase's ranges ('other': outside every phase), "
     + _PER_STEP),
    ("phase.host_gap_ns", "ns", "host-bound GPU gaps before the phase's ops, " + _PER_STEP),
    ("phase.gpu_median_ns", "ns", "phase.gpu_ns as the median over the analysed steps (what "
     "phases are ranked by: a few slow steps do not move it)"),
    ("phase.wall_median_ns", "ns", "phase.wall_ns as the median over the analysed steps "
     "(ranked by too)"),
    ("idle.device_ns", "ns", "device idle time booked to the cause (idle_<cause>_ns, summed "
     "over the GPU timelines), mean " + _PER_STEP),
    ("idle.host_ns", "ns", "the main thread's step time in the cause (host_<cause>_ns), mean "
     + _PER_STEP + "; empty for a cause the host never has (launch, queued, unknown)"),
    ("idle.device_median_ns", "ns", "idle.device_ns as the median over the analysed steps "
     "(what idle causes are ranked by)"),
    ("idle.host_median_ns", "ns", "idle.host_ns as the median over the analysed steps (ranked "
     "by too)"),
    ("layer.self_wall_median_ns", "ns", "the direction's self range time per step, median "
     "over the steps (step_self_forward/backward_wall_median_ns); what layers are ranked by, "
     "so a few slow steps do not reorder them"),
    ("layer.self_gpu_median_ns", "ns", "the direction's self GPU time per step, median over "
     "the steps (step_self_forward/backward_gpu_median_ns); ranked by too"),
    ("layer.self_wall_ns", "ns", "the direction's range time not covered by a child module's "
     "range, mean per step (self_forward/backward_wall_ns / the table's steps)"),
    ("layer.self_gpu_ns", "ns", "GPU time of the direction's kernels attributed to the layer "
     "itself, mean per step (self_forward/backward_gpu_ns / the table's steps)"),
    ("layer.wall_ns", "ns", "inclusive range time of the direction, per step "
     "(step_forward/backward_wall_ns)"),
    ("layer.gpu_ns", "ns", "inclusive GPU time of the direction, per step "
     "(step_forward/backward_gpu_ns)"),
    ("layer.flops", "FLOP", "the direction's FLOPs per step, inclusive (step_forward/"
     "backward_flops; 0 where not counted: an older run or an unknown op); a change means "
     "different work, named in the warnings"),
    ("layer.param_bytes", "B", "bytes of the parameters it holds (forward rows only)"),
    ("layer.saved_bytes", "B", "activations it saved for backward in the first analysed step "
     "(forward rows only)"),
    ("layer.calls_per_step", "", "forward calls per step (forward rows only)"),
    ("kernel.gpu_ns", "ns", "the kernel name's GPU time (total_ns) / the table's steps"),
    ("kernel.instances", "", "the kernel name's executions / the table's steps"),
    ("summary.tc_share", "", "share of kernel time in Tensor Core kernels (0-1)"),
    ("summary.launch_overhead_pct", "%", "host-bound GPU gaps as a share of the steps' device "
     "time"),
    ("summary.model_flops_per_step", "FLOP", "the root models' forward + backward FLOPs per "
     "step (summary model_flops_per_step)"),
    ("summary.mfu", "", "the step's model FLOPs utilisation (summary mfu, 0-1)"),
    ("summary.memory_saved_bytes", "B", "activations saved for backward in the first analysed "
     "step, every layer's"),
    ("summary.memory_gpu_peak_bytes", "B", "the GPU allocator's peak in that step"),
)  # fmt: skip

# compare.json beyond the CSV's columns: its lists and the fields of their items.
COMPARE_JSON_FIELDS = _cols(
    ("baseline", "", "the baseline side's label"),
    ("settings", "", "alpha, confidence, resamples and seed the statistics used"),
    ("sides[]", "", "each side's step statistics (fields: the 'step.' metrics, and label)"),
    ("steps[]", "", "each other side's step-time delta against the baseline"),
    ("steps[].mean_ns", "ns", "mean B - A: {value, low, high}: the change of the geometric "
     "mean of run means (one run a side: of the means), low/high its 95 % interval (between "
     "runs when tested, else within runs; null: too few steps)"),
    ("steps[].median_ns", "ns", "median B - A: {value, low, high}, of run medians likewise"),
    ("steps[].mean_pct", "%", "mean B - A in % of A's: {value, low, high}"),
    ("steps[].median_pct", "%", "median B - A in % of A's: {value, low, high}"),
    ("steps[].within_median_ns", "ns", "median B - A with its 95 % within-run interval "
     "(moving-block bootstrap of each run's steps, blocks of round(n^(1/3)) steps)"),
    ("steps[].within_median_pct", "%", "the same in % of A's"),
    ("steps[].p_value", "", "two-sided p-value of the run-level t-test on log run medians "
     "(null with one run a side)"),
    ("steps[].verdict", "", "slower, faster, no significant change, or not tested (one run "
     "a side)"),
    ("steps[].significant", "", "verdict is slower or faster"),
    ("steps[].tested", "", "the run-level test was made (a side has two runs or more)"),
    ("steps[].method", "", "how the change was judged: one run a side (within-run interval "
     "only); Welch t-test on log run medians (two or more runs a side); or t-test of a "
     "single run against the other side's runs"),
    ("steps[].runs_baseline", "", "runs of the baseline side"),
    ("steps[].runs_side", "", "runs of the side"),
    ("steps[].between_run_pct", "%", "between-run spread the test saw: pooled sd of log run "
     "medians, as a %"),
    ("steps[].minimum_effect_pct", "%", "with runs, a change within it needs p < "
     f"{rules.SMALL_CHANGE_ALPHA:g} to be called; one run a side, the gate fails only "
     "beyond it (and its limit): 2 x the "
     "within-run spread (half the p10-p90 range of a side's steps, in % of their median; "
     "the larger side's)"),
    ("steps[].detectable_pct", "%", "the change power is given for: the gate's, else 5 %"),
    ("steps[].power", "", "the run-level test's power to detect detectable_pct at alpha "
     "(noncentral t at the between-run spread)"),
    ("steps[].runs_needed", "", "runs a side that would give 80 % power for "
     "detectable_pct (null: more than 100)"),
    ("steps[].resamples", "", "bootstrap resamples behind the within-run intervals"),
    ("steps[].line", "", "the verdict as the console prints it"),
    ("deltas[]", "", "every ranked delta: the CSV's columns, 'label' for 'side' (no unit)"),
    ("warnings", "", "apples-to-apples warnings, one line each"),
)  # fmt: skip

_CHOICE = "dlprof-lite choice"
COMPARE_RULES: dict[str, Threshold] = {
    "compare_alpha": Threshold(
        rules.ALPHA,
        "p-value",
        "a run-level test is significant when p < alpha (layers: Holm-adjusted)",
        "the conventional 5 % level",
    ),
    "compare_confidence": Threshold(
        rules.CONFIDENCE, "share", "level of every interval", "1 - alpha"
    ),
    "compare_resamples": Threshold(
        rules.RESAMPLES,
        "resamples",
        "moving-block bootstrap resamples per within-run interval (percentile, fixed seed)",
        "Efron & Tibshirani 1993: 1000-2000 for percentile intervals",
    ),
    "compare_detectable_change": Threshold(
        rules.DETECTABLE_CHANGE,
        "share of the baseline mean",
        "change the power and runs needed are given for (without --gate), and the 'too "
        "few steps' warning sizes the steps for, at 80 % power",
        f"{_CHOICE}; 80 % power: Cohen 1988",
    ),
    "compare_min_effect_factor": Threshold(
        rules.MIN_EFFECT_FACTOR,
        "x within-run spread",
        "minimum effect: with runs, a change within this many times the within-run spread "
        "(half the p10-p90 range of the steps, in % of their median) needs p < "
        "compare_small_change_alpha; one run a side, the gate fails only beyond its limit "
        "and beyond it",
        f"{_CHOICE}; its false alarms are measured by scripts/compare_study.py",
    ),
    "compare_small_change_alpha": Threshold(
        rules.SMALL_CHANGE_ALPHA,
        "p-value",
        "level a change within the minimum effect must pass to be called slower or faster",
        f"{_CHOICE}; Welch's test at 0.05 on three skewed run medians a side called 3 of 20 "
        "unchanged pairs changed (scripts/compare_study.py)",
    ),
    "compare_min_steps": Threshold(
        rules.MIN_STEPS,
        "steps",
        "fewest analysed steps a side needs for the statistics",
        f"{_CHOICE}: the within-run interval of a median of 4 steps moves in whole steps",
    ),
    "compare_far_fewer_ratio": Threshold(
        rules.FAR_FEWER_RATIO,
        "ratio of steps",
        "a side with fewer than 1/ratio of the baseline's steps (or the reverse) is refused",
        f"{_CHOICE}: a window that much shorter is another capture, not another sample",
    ),
    "compare_calls_tolerance": Threshold(
        rules.CALLS_TOLERANCE,
        "share of calls per step",
        "layer calls per step differ beyond this share of the larger",
        _CHOICE,
    ),
}


_UNITS = {c.name: c.unit for c in COMPARE_METRICS}


def unit(section: str, metric: str) -> str:
    """The unit of a metric, from its definition."""
    return _UNITS.get(f"{section}.{metric}", "")


def column_definitions() -> dict[str, str]:
    return {c.name: f"{c.doc} [{c.unit}]" if c.unit else c.doc for c in COMPARE_REPORT}


def json_definitions() -> dict[str, str]:
    return {c.name: f"{c.doc} [{c.unit}]" if c.unit else c.doc for c in COMPARE_JSON_FIELDS}


def metric_definitions() -> dict[str, str]:
    return {c.name: f"{c.doc} [{c.unit}]" if c.unit else c.doc for c in COMPARE_METRICS}


def markdown_reference() -> str:
    """compare.csv's columns, its metrics, compare.json's fields and the rules as Markdown
    (docs/reference/compare.md, written by scripts/gen_reference.py)."""
    head = ["| column | unit | meaning |", "| --- | --- | --- |"]
    out = ["**compare.csv / compare.json**", "", *head]
    out += [f"| `{c.name}` | {c.unit} | {c.doc} |" for c in COMPARE_REPORT]
    out += ["", "**compare metrics** (`section.metric`)", "", "| metric | unit | meaning |",
            "| --- | --- | --- |"]  # fmt: skip
    out += [f"| `{c.name}` | {c.unit} | {c.doc} |" for c in COMPARE_METRICS]
    out += ["", "**compare.json fields**", "", "| field | unit | meaning |", "| --- | --- | --- |"]
    out += [f"| `{c.name}` | {c.unit} | {c.doc} |" for c in COMPARE_JSON_FIELDS]
    out += ["", "**compare rules**", "", "| rule | value | unit | meaning | source |",
            "| --- | --- | --- | --- | --- |"]  # fmt: skip
    out += [f"| `{k}` | {t.value:g} | {t.unit} | {t.rule} | {t.citation} |"
            for k, t in COMPARE_RULES.items()]  # fmt: skip
    return "\n".join(out) + "\n"
