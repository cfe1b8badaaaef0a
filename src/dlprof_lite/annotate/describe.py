"""The ``module`` fact: input shapes and dtypes of a module's first call (rule in rules.names).

Written once per module (not per call), so that the layer table can show what each layer
computed on and settle Tensor Core use where kernel names cannot tell. At most
:data:`MAX_MODULE_FACTS` per process: a program that builds new modules every step must not
write a mark per step.
"""

from __future__ import annotations

from typing import Any

import torch

from dlprof_lite.annotate.graph import tensors
from dlprof_lite.rules.facts import fact_text

MAX_MODULE_FACTS = 10_000
_MAX_INPUTS = 4  # shapes listed per call; more are counted, not listed


def describe(
    module: torch.nn.Module, layer: str, type_name: str, args: Any, wrapper: str | None = None
) -> str:
    """The mark text of the ``module`` fact of ``module``'s first call with ``args``;
    ``wrapper``: the wrappers around it, as words (:mod:`.wrappers`)."""
    found = list(tensors(args))
    shapes = ["x".join(str(int(n)) for n in t.shape) or "scalar" for t in found[:_MAX_INPUTS]]
    if len(found) > _MAX_INPUTS:
        shapes.append(f"+{len(found) - _MAX_INPUTS} more")
    first = found[0] if found else None
    param = next(module.parameters(recurse=False), None)
    device = first.device.type if first is not None else None
    return fact_text(
        "module",
        {
            "layer": layer,
            "type": type_name,
            "in_shape": ", ".join(shapes) or None,
            "dtype": _dtype(first.dtype) if first is not None else None,
            "param_dtype": _dtype(param.dtype) if param is not None else None,
            "autocast": _autocast(device or "cpu"),
            "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_conv": bool(torch.backends.cudnn.allow_tf32),
            "device": device,
            "wrapper": wrapper,
        },
    )


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The autocast dtype in force for ``device_type`` (None when autocast is off)."""
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except (TypeError, RuntimeError, AttributeError):  # an older torch or an odd device
        return None


def _autocast(device_type: str) -> str | None:
    dtype = autocast_dtype(device_type)
    return None if dtype is None else _dtype(dtype)
