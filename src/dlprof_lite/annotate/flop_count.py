"""FLOPs of one module call, counted on fake tensors: no second execution of the module.

Place in the pipeline: annotate (in the profiled process, after the run: :mod:`.flops`).

The count is :class:`torch.utils.flop_counter.FlopCounterMode`'s: the same formula table
(``flop_registry``: matmul, convolution and attention ops, a multiply-add = 2 FLOPs), the
same rule for an op outside it (decomposed when torch can, else it counts nothing), run by
our own dispatch mode so that each op's FLOPs can also be booked by its compute dtype (MFU
divides by the peak of that dtype). Added formulas, where FlopCounterMode counts nothing:

- ``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward (the CPU kernel of
  ``scaled_dot_product_attention``): torch's own ``sdpa_flop``/``sdpa_backward_flop``,
  4·B·H·S_q·S_kv·D forward (QKᵀ and AV, 2·M·N·K each) and the five backward matmuls;
- ``aten.mkldnn_rnn_layer`` (CPU LSTM) and ``aten._cudnn_rnn`` (cuDNN LSTM/GRU/RNN), forward
  and backward: the gate matmuls of each time step, W_ih·x and W_hh·h for every gate
  (``nn.LSTM`` documentation's equations), 2·T·B·(|W_ih| + |W_hh|) per layer and direction
  forward; backward the same matmuls twice (input and weight gradients), as the kernels
  compute both.

An op with no formula that is matrix-class by its name (:data:`_HEAVY`), or any op of a
namespace that is not torch's own (a custom kernel), makes the count *unknown*, never 0.
Elementwise and reduction ops count 0 by FlopCounterMode's convention.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_aten = torch.ops.aten
# Matrix-class ops by name: one of these without a formula makes the count unknown.
_HEAVY = re.compile(r"conv|(^|_)b?mm($|_)|matmul|linear|einsum|attention|attn|rnn|lstm|gru|fft")
# Namespaces of torch's own ops; an op of any other (a custom kernel) has no formula here.
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "profiler", "_c10d_functional",
                               "c10d", "c10d_functional", "_dtensor", "rngprims"})  # fmt: skip
# Ops that only ask about a tensor (FlopCounterMode skips them the same way).
_QUERIES = frozenset({"is_contiguous", "sym_is_contiguous", "is_strides_like_format",
                      "is_non_overlapping_and_dense", "size", "sym_size", "stride",
                      "sym_stride", "storage_offset", "sym_storage_offset", "numel",
                      "sym_numel", "dim", "layout"})  # fmt: skip
_CONV = re.compile(r"conv")


def _rnn_layer(*args: Any, **kwargs: Any) -> int:
    """``mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, ...)``: one layer, one direction."""
    x, w_ih, w_hh = args[0], args[1], args[2]
    steps_batch = math.prod(x.shape[:-1])
    return 2 * int(steps_batch) * int(w_ih.numel() + w_hh.numel())


def _rnn_layer_backward(*args: Any, **kwargs: Any) -> int:
    """``mkldnn_rnn_layer_backward(input, w_ih, w_hh, ...)``: input and weight gradients."""
    return 2 * _rnn_layer(*args)


def _cudnn_rnn(*args: Any, **kwargs: Any) -> int:
    """``_cudnn_rnn(input, weights, ...)``: every layer and direction (each 2-D weight is one
    gate matrix set: W_ih or W_hh)."""
    x, weights = args[0], args[1]
    batch_sizes = args[14] if len(args) > 14 else kwargs.get("batch_sizes")
    steps_batch = (
        int(sum(batch_sizes)) if batch_sizes else math.prod(x.shape[:-1])
    )  # packed: the summed batch sizes
    return 2 * int(steps_batch) * int(sum(w.numel() for w in weights if w.dim() == 2))


def _cudnn_rnn_backward(*args: Any, **kwargs: Any) -> int:
    """``_cudnn_rnn_backward(input, weights, ...)``: input and weight gradients."""
    return 2 * _cudnn_rnn(*args[:2])


def _raw(fn: Callable[..., int]) -> Callable[..., int]:
    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        return fn(*args, **kwargs)

    return formula


@functools.cache
def formulas() -> dict[Any, Callable[..., int]]:
    """FlopCounterMode's table and the added formulas; empty on a torch without
    ``torch.utils.flop_counter`` (every count is then unknown, saying why). Built on first
    use: importing the annotation never imports the FLOP counter."""
    try:
        from torch.utils import flop_counter
    except ImportError:
        return {}
    table: dict[Any, Callable[..., int]] = dict(getattr(flop_counter, "flop_registry", {}))
    added: dict[str, Callable[..., int] | None] = {
        # torch's attention formulas (already taking tensors: they read the shapes)
        "_scaled_dot_product_flash_attention_for_cpu": getattr(flop_counter, "sdpa_flop", None),
        "_scaled_dot_product_flash_attention_for_cpu_backward": getattr(
            flop_counter, "sdpa_backward_flop", None),
        "mkldnn_rnn_layer": _raw(_rnn_layer),
        "mkldnn_rnn_layer_backward": _raw(_rnn_layer_backward),
        "_cudnn_rnn": _raw(_cudnn_rnn),
        "_cudnn_rnn_backward": _raw(_cudnn_rnn_backward),
    }  # fmt: skip
    for name, formula in added.items():
        packet = getattr(_aten, name, None)
        if formula is not None and packet is not None and packet not in table:
            table[packet] = formula
    return table


def dtype_key(dtype: torch.dtype, conv: bool, tf32: tuple[bool, bool]) -> str:
    """The peak-table key of an op computing in ``dtype`` (rules.peaks DTYPES); float32 is
    TF32 where torch lets it be (``allow_tf32`` of matmul, of cuDNN for convolutions)."""
    if dtype == torch.float32:
        return "tf32" if (tf32[1] if conv else tf32[0]) else "fp32"
    if dtype == torch.float16:
        return "fp16"
    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float64:
        return "fp64"
    if "float8" in str(dtype):
        return "fp8"
    return str(dtype).removeprefix("torch.")


NOT_COUNTABLE = "not countable on fake tensors"


class Unknown(Exception):
    """The count cannot be made (its message says why)."""


class _Tally(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """FLOPs of the ops dispatched under it, by compute dtype; ``unknown``: why not all."""

    def __init__(self, tf32: tuple[bool, bool]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tf32 = tf32
        self.formulas = formulas()
        self.by_dtype: Counter[str] = Counter()
        self.unknown: str | None = None

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        packet = func._overloadpacket
        name = packet.__name__
        if name in _QUERIES:
            return NotImplemented
        if isinstance(func, torch._ops.HigherOrderOperator):
            raise Unknown(f"higher-order op {func}")
        formula = self.formulas.get(packet)
        if formula is None and func is not torch.ops.prim.device.default:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        if formula is not None:
            flops = int(formula(*args, **kwargs, out_val=out))
            first = next(
                (a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)), None
            )
            dtype = first.dtype if first is not None else torch.float32
            self.by_dtype[dtype_key(dtype, bool(_CONV.search(name)), self.tf32)] += flops
        elif self.unknown is None:
            namespace = str(func.namespace) if hasattr(func, "namespace") else "aten"
            if namespace not in _TORCH_NAMESPACES:
                self.unknown = f"custom op {namespace}.{name} has no FLOP formula"
            elif _HEAVY.search(name):
                self.unknown = f"op {namespace}.{name} has no FLOP formula"
        return out


@dataclass(frozen=True)
class TensorSpec:
    """A recorded tensor input: what a fake tensor needs to stand in for it."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool


@dataclass
class Counted:
    """One call's FLOPs: forward and backward by dtype (None: unknown, ``reason`` why)."""

    forward: Counter[str] | None
    backward: Counter[str] | None
    reason: str | None = None


@dataclass(frozen=True)
class CallState:
    """The modes a call ran under: grad on, autocast (device type, dtype) and the TF32
    switches (matmul, cuDNN; both off for a call on the CPU, which has no TF32)."""

    grad: bool
    autocast: tuple[str, torch.dtype] | None
    tf32: tuple[bool, bool]


def count_call(
    module: torch.nn.Module, args: Any, kwargs: Any, state: CallState, *, hooks: bool = False
) -> Counted:
    """FLOPs of ``module(*args, **kwargs)`` (tensors as :class:`TensorSpec`), forward and,
    when grad was on and an output needs it, backward from every output that requires grad.

    Fake tensors stand in for the inputs, parameters and buffers: the module's real
    parameters, buffers (BatchNorm statistics), gradients and the RNG are untouched. Module
    hooks (global and its modules' own) are set aside unless ``hooks``: a program's hook that
    stores outputs must not get fake tensors; a module that needs its hooks to run at all
    (``weight_norm``'s pre-hook computes the weight) is counted again with them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not formulas():
        return Counted(None, None, "this torch has no FLOP formulas (torch.utils.flop_counter)")
    try:
        fake = FakeTensorMode(allow_non_fake_inputs=False)
        with _rng_kept(), fake, _eager(module), _no_hooks(module, not hooks):
            state_dict: dict[str, torch.Tensor] = {
                name: fake.from_tensor(t) for name, t in _tensors_of(module)
            }
            fake_args, fake_kwargs = tree_map(_fake_of, (args, kwargs))
            forward = _Tally(state.tf32)
            with torch.set_grad_enabled(state.grad), _autocast(state.autocast), forward:
                out = torch.func.functional_call(
                    module, state_dict, tuple(fake_args), dict(fake_kwargs), strict=False
                )
            outputs = [
                t for t in tree_flatten(out)[0]
                if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
            ]  # fmt: skip
            backward = _Tally(state.tf32)
            if state.grad and outputs:
                grads = [torch.ones_like(t) for t in outputs]
                with backward:
                    torch.autograd.backward(outputs, grads)
    except Unknown as exc:
        return Counted(None, None, str(exc))
    except Exception as exc:  # the module cannot run on fake tensors: say why
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return Counted(None, None, f"{NOT_COUNTABLE}: {type(exc).__name__}: {first}")
    reason = forward.unknown or backward.unknown
    if reason is not None:
        return Counted(None, None, reason)
    return Counted(forward.by_dtype, backward.by_dtype if state.grad and outputs else Counter())


def _tensors_of(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _fake_of(value: Any) -> Any:
    if not isinstance(value, TensorSpec):
        return value
    tensor = torch.empty_strided(value.shape, value.stride, dtype=value.dtype,
                                 device=value.device)  # fmt: skip
    if value.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
        # Not a leaf: an in-place module (ReLU(inplace=True)) may write into it, as it wrote
        # into the output of the layer before it in the real run.
        return tensor.requires_grad_(True).clone()
    return tensor


def _autocast(state: tuple[str, torch.dtype] | None) -> contextlib.AbstractContextManager[Any]:
    if state is None:
        return contextlib.nullcontext()
    return torch.autocast(state[0], dtype=state[1])


_MODULE_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                 "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                 "_backward_pre_hooks")  # fmt: skip
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks")  # fmt: skip


@contextlib.contextmanager
def _no_hooks(module: torch.nn.Module, off: bool) -> Iterator[None]:
    """Every forward/backward module hook set aside meanwhile (restored after)."""
    if not off:
        yield
        return
    from torch.nn.modules import module as nn_module

    kept: list[tuple[Any, str, Any]] = []
    owners: list[Any] = [nn_module]
    owners.extend(module.modules())
    try:
        for owner in owners:
            names = _GLOBAL_HOOKS if owner is nn_module else _MODULE_HOOKS
            for name in names:
                table = getattr(owner, name, None)
                if table:  # an empty one stays: nothing to set aside
                    kept.append((owner, name, table))
                    setattr(owner, name, type(table)())
        yield
    finally:
        for owner, name, table in reversed(kept):
            setattr(owner, name, table)


def _rng_kept() -> contextlib.AbstractContextManager[Any]:
    """The RNG states as they were (a fake dropout still draws from the real generator)."""
    cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    devices = list(range(torch.cuda.device_count())) if cuda else []
    return torch.random.fork_rng(devices=devices)


@contextlib.contextmanager
def _eager(module: torch.nn.Module) -> Iterator[None]:
    """``module`` called eagerly: a ``model.compile()``-d module's compiled call set aside."""
    compiled = module.__dict__.get("_compiled_call_impl")
    if compiled is not None:
        module._compiled_call_impl = None
    try:
        yield
    finally:
        if compiled is not None:
            module._compiled_call_impl = compiled
