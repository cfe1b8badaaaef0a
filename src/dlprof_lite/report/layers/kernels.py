"""What each layer ran: its kernels, its device, its input shapes and dtypes, and Tensor Core
use inferred from its dtype where kernel names cannot tell.

Place in the pipeline: report. A pure function of three :class:`~dlprof_lite.ingest.Profile`
frames, merged by the layers table on ``layer`` (issue #12, items 5 and 6):

- ``kernels``: each kernel's ``layer`` (the innermost module, from ingest), name and Tensor
  Core verdict (``tc_class`` from the name rules, :mod:`dlprof_lite.rules.tensor_cores`);
- ``marks``: the ``module`` fact the annotation writes at each module's first call (input
  shapes, dtypes, autocast, TF32, device, the wrappers its model ran in;
  :func:`dlprof_lite.report.run_facts.module_facts`);
- ``gpus``: the compute capability of the devices the kernels ran on.

Kernel columns describe the layer's own kernels (those whose innermost module it is), as
``gpu_ns`` does; ``device`` looks inside too, so that a container whose children ran
kernels is a ``gpu`` layer. ``tc_inferred`` is its own column: a name verdict (``tc``,
``no tc``, ``tc?`` in ``top_kernels``) is never replaced by an inference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import pandas as pd

from dlprof_lite.numeric import cat_mask, sum_by
from dlprof_lite.report.frames import groups
from dlprof_lite.report.metrics import LAYER_IMPLEMENTATION_REPORT
from dlprof_lite.report.run_facts import module_facts
from dlprof_lite.rules.gemm import (
    GENERIC_KERNEL,
    mma_capable,
    mma_input_type,
    tc_eligible_family,
    unknown_is_matmul,
)
from dlprof_lite.rules.names import parse_module_range

# The frame's columns: ``layer``, then those defined in the metric registry.
LAYER_KERNEL_COLUMNS = ("layer", *(c.name for c in LAYER_IMPLEMENTATION_REPORT))
TOP_KERNELS = 3  # kernels listed per layer (issue #12: "the top 3 kernel names")
NAME_WIDTH = 48  # characters of a kernel name in top_kernels; the kernels table has them whole
TC_INFERRED = "tc (inferred)"
DEVICES = ("gpu", "cpu", "mixed")
_TAGS = {"tc": "tc", "no_tc": "no tc", "unknown": "tc?"}  # name verdicts as top_kernels says them
_PATH_SEP = "/"  # ingest.paths.PATH_SEP: range paths join range names with it
# Short names that say nothing (rules/gemm.py GENERIC_KERNEL: CUTLASS's ``Kernel``, CuTe's
# ``device_kernel``): the first template argument of the full name says which kernel it is.
_FIRST_ARG = re.compile(r"<\s*(?:\(\w+\)\s*)?([A-Za-z_][\w:]*)")


def layer_implementations(
    kernels: pd.DataFrame, facts: pd.DataFrame | None, gpus: pd.DataFrame,
    layers: Iterable[str] = (),
) -> pd.DataFrame:
    """One row per layer (:data:`LAYER_KERNEL_COLUMNS`): the layers of ``kernels``, those of
    the ``module`` facts (``Profile.facts``), then ``layers`` (e.g. every layer with wall time).

    ``kernels`` are the analysed window's (the caller chooses them); facts are first calls,
    wherever they were. A layer without a fact (a profile annotated before facts, emit_nvtx
    or DLProf layers) has no shape or dtype, and so no inferred Tensor Core use.
    """
    described = module_facts(facts).set_index("layer")
    own, distinct = _by_kernel(kernels)
    names = list(dict.fromkeys([*own["layer"], *described.index, *layers]))
    fact = described.reindex(pd.Index(names, dtype=object)).astype(object)
    fact = fact.where(fact.notna(), None)
    kernel_types = _first_types(kernels)
    types = [t if t is not None else kernel_types.get(n) for n, t in zip(names, fact["type"])]
    families = [tc_eligible_family(t) if t is not None else None for t in types]
    out = pd.DataFrame({"layer": pd.Series(names, dtype=object)})
    out["device"] = _devices(names, _with_gpu_work(kernels), list(fact["device"]))
    out["distinct_kernels"] = out["layer"].map(distinct).fillna(0).astype("int64")
    out["top_kernels"] = out["layer"].map(_top_kernels(own)).astype(object)
    out["wrapper"] = list(fact["wrapper"])
    out["in_shape"] = list(fact["in_shape"])
    out["in_dtype"] = list(fact["dtype"])
    out["dtype"] = _compute_dtypes(fact, families)
    out["tc_inferred"] = _tc_inferred(
        names,
        families,
        _matmul_dtypes(fact),
        [
            conv if family == "conv" else mm
            for family, mm, conv in zip(families, fact["tf32"], fact["tf32_conv"], strict=True)
        ],
        _unknown_kernels(kernels, gpus),
    )
    out = out.astype({c: object for c in LAYER_KERNEL_COLUMNS if c != "distinct_kernels"})
    return out.where(out.notna(), None).loc[:, list(LAYER_KERNEL_COLUMNS)]


def display_name(name: str, short: str | None) -> str:
    """The kernel name ``top_kernels`` shows: the short name, or for a generic one
    (``Kernel``, ``device_kernel``) the short name with the full name's first template
    argument (``Kernel<cutlass_75_tensorop_f16_s1688gemm_f16_256x128_nn_align1>``)."""
    base = short or name
    if GENERIC_KERNEL.match(base):
        arg = _FIRST_ARG.search(name)
        if arg is not None:
            base = f"{base}<{arg[1].rsplit('::', 1)[-1]}>"
    return base if len(base) <= NAME_WIDTH else base[: NAME_WIDTH - 1] + "…"


def _by_kernel(kernels: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """GPU time per layer, displayed kernel name and name verdict (kernels with a layer);
    and per layer the number of distinct kernel names (full names, as the kernels table)."""
    has = kernels["layer"].notna().to_numpy(dtype=bool)
    cols = ["layer", "name", "short_name", "tc_class"]
    if not has.any():
        empty = pd.DataFrame({c: pd.Series(dtype=object) for c in ["layer", "display", "tc_class"]})
        return empty.assign(dur_ns=pd.Series(dtype="int64")), pd.Series(dtype="int64")
    # Group by name first (categorical codes, no per-row strings), then name each group;
    # a kernel without a short name or a verdict still counts.
    group, first = groups(kernels, cols, has)
    found = kernels[cols].take(first).reset_index(drop=True)
    found["dur_ns"] = sum_by(group, kernels["dur_ns"].to_numpy(dtype=np.int64)[has], len(first))
    names, shorts = found["name"].astype(str), found["short_name"].astype(object)
    found["display"] = [display_name(n, s if isinstance(s, str) else None)
                        for n, s in zip(names, shorts, strict=True)]  # fmt: skip
    found["layer"] = found["layer"].astype(str)
    found["tc_class"] = found["tc_class"].astype(str)
    distinct = found.drop_duplicates(["layer", "name"]).groupby("layer", sort=False).size()
    keys = ["layer", "display", "tc_class"]
    return found.groupby(keys, sort=False)["dur_ns"].sum().reset_index(), distinct


def _top_kernels(own: pd.DataFrame) -> dict[str, str]:
    """``name 62% tc; name 20% no tc; name 9% tc?; +4 more`` per layer with kernels."""
    if own.empty:
        return {}
    per = own.groupby(["layer", "display"], sort=False).agg(
        dur_ns=("dur_ns", "sum"), verdict=("tc_class", "first"), verdicts=("tc_class", "nunique")
    )
    # One verdict per displayed kernel; ``part tc`` when its instances differ.
    tags = per["verdict"].map(_TAGS).fillna("tc?")
    per["tag"] = tags.where(per["verdicts"] == 1, "part tc")
    per = per.reset_index().sort_values(["layer", "dur_ns", "display"],
                                        ascending=[True, False, True], kind="stable")  # fmt: skip
    out = {}
    for layer, rows in per.groupby("layer", sort=False):
        total = float(rows["dur_ns"].sum())
        top = rows.head(TOP_KERNELS)
        rows_top = zip(top["display"], top["dur_ns"], top["tag"], strict=True)
        parts = [f"{d} {_percent(t, total)} {tag}" for d, t, tag in rows_top]
        if len(rows) > TOP_KERNELS:
            parts.append(f"+{len(rows) - TOP_KERNELS} more")
        out[str(layer)] = "; ".join(parts)
    return out


def _percent(part: float, whole: float) -> str:
    share = 100.0 * part / whole if whole > 0 else 0.0
    return "<1%" if share < 0.5 else f"{share:.0f}%"


def _first_types(kernels: pd.DataFrame) -> dict[str, str]:
    """Each layer's type as ingest named it (the first kernel's ``layer_type``)."""
    _, first = groups(kernels, ["layer"], kernels["layer"].notna().to_numpy(dtype=bool))
    pairs = kernels[["layer", "layer_type"]].take(first).dropna()
    return dict(zip(pairs["layer"].astype(str), pairs["layer_type"].astype(str), strict=True))


def _with_gpu_work(kernels: pd.DataFrame) -> set[str]:
    """Layers that ran kernels themselves or through a module inside them.

    The module ranges enclosing a kernel are read from its range path (one parse per
    distinct path): a container's own kernels are few or none, its children's are its work.
    A path elided in the middle (very deep nesting) misses the elided modules.
    """
    has = kernels["layer"].notna().to_numpy(dtype=bool)
    found = {str(layer) for layer in kernels["layer"][has].unique()}  # per category, not row
    paths = kernels["range_path"][has].dropna().unique()
    for path in paths:
        for part in str(path).split(_PATH_SEP):
            module = parse_module_range(part)
            if module is not None:
                found.add(module.qualname)
    return found


def _devices(names: list[str], gpu_work: set[str], recorded: list[object]) -> list[str]:
    """``gpu``, ``cpu`` or ``mixed`` per layer, from its kernels and its recorded device.

    The fact's device is where the first call's inputs were: ``cuda`` is a GPU layer even
    without kernels (a view, a reshape); ``cpu`` with kernels is ``mixed`` (inputs on the
    CPU, work on the GPU). Without a fact (or another device type), kernels decide.
    """
    out = []
    for name, device in zip(names, recorded, strict=True):
        work = name in gpu_work
        if device == "cuda":
            out.append("gpu")
        elif device == "cpu":
            out.append("mixed" if work else "cpu")
        else:
            out.append("gpu" if work else "cpu")
    return out


def _compute_dtypes(fact: pd.DataFrame, families: list[str | None]) -> list[str | None]:
    """The dtype a layer computes in: for a matmul-class layer (conv, linear, matmul,
    attention, RNN) its matmul dtype (:func:`_matmul_dtypes`); for any other layer its
    parameters', else its input's (autocast runs only the matmul-class ops in lower
    precision: PyTorch "Automatic Mixed Precision" op reference)."""
    matmul = _matmul_dtypes(fact)
    rows = zip(fact["param_dtype"], fact["dtype"], families, matmul, strict=True)
    return [mm if family is not None else (param if param is not None else given)
            for param, given, family, mm in rows]  # fmt: skip


def _matmul_dtypes(fact: pd.DataFrame) -> list[str | None]:
    """The dtype a layer's matmuls run in: the autocast dtype when autocast was on, else its
    parameters', else its input's. Autocast leaves float64 alone (ATen's autocast casts
    only floating tensors that are not double: ``is_eligible`` in aten/src/ATen/autocast_mode.h)."""
    out: list[str | None] = []
    for autocast, param, given in zip(fact["autocast"], fact["param_dtype"], fact["dtype"]):
        own = param if param is not None else given
        out.append(autocast if autocast is not None and own != "float64" else own)
    return out


class _Unknown(NamedTuple):
    """A layer's own kernels whose names the rules cannot tell: the lowest compute
    capability they ran on, and whether a name says it is a matmul (a GEMM template)."""

    cc: tuple[int, int]
    matmul_named: bool


def _unknown_kernels(kernels: pd.DataFrame, gpus: pd.DataFrame) -> dict[str, _Unknown]:
    """Per layer whose own kernels include names the rules cannot tell (``unknown``); a
    layer is left out where a device they ran on has no recorded compute capability."""
    unknown = kernels["layer"].notna().to_numpy(bool) & cat_mask(
        kernels["tc_class"], lambda verdict: verdict == "unknown"
    )
    if not unknown.any():
        return {}
    known = gpus[gpus["cc_major"].fillna(0) > 0]
    rows = zip(known["device_id"], known["cc_major"], known["cc_minor"].fillna(0), strict=True)
    cc = {int(d): (int(a), int(b)) for d, a, b in rows}
    cols = ["layer", "device_id", "name", "tc_rule"]
    found = kernels[cols].take(groups(kernels, cols, unknown)[1]).astype(object)
    out: dict[str, _Unknown] = {}
    missing: set[str] = set()
    for layer, device, name, rule in found.itertuples(index=False):  # distinct kernels only
        here = cc.get(int(device))
        if here is None:
            missing.add(str(layer))
            continue
        seen = out.get(str(layer), _Unknown(here, False))
        matmul = seen.matmul_named or unknown_is_matmul(str(name), str(rule))
        out[str(layer)] = _Unknown(min(seen.cc, here), matmul)
    return {layer: v for layer, v in out.items() if layer not in missing}


def _tc_inferred(
    names: list[str],
    families: list[str | None],
    dtypes: list[str | None],
    tf32: list[object],
    unknown: dict[str, _Unknown],
) -> list[str | None]:
    """``tc (inferred)`` for a layer whose own kernels include names that cannot tell, when
    it is matmul-class or one of those names says matmul (an Inductor GEMM template in a
    compiled model), on a GPU whose Tensor Cores take its matmul dtype (FP16, BF16, FP8, or
    FP32 as TF32 where PyTorch allows it: ``tf32`` is the matmul switch for matmul layers and
    cuDNN's (``torch.backends.cudnn.allow_tf32``) for convolutions)."""
    out: list[str | None] = []
    for name, family, dtype, allow in zip(names, families, dtypes, tf32, strict=True):
        found = unknown.get(name)
        ok = found is not None and (family is not None or found.matmul_named)
        mma = mma_input_type(dtype, allow is True)
        ok = ok and found is not None and mma is not None and mma_capable(mma, found.cc)
        out.append(TC_INFERRED if ok else None)
    return out
