"""A ReLU network as a list of steps that bound propagation can walk, forward and backward.

`trace_network(model)` traces the model with `torch.fx` (standard layers and the package's
`Normalize` kept whole) and classifies every operation as one of the kinds below; any other
operation is refused with an error naming it, before any bound is computed:

- ``affine``: `Conv2d`, `Linear`, `BatchNorm1d/2d` (running statistics, i.e. eval mode),
  `AvgPool2d`, `AdaptiveAvgPool2d`, `Normalize` -- a `LinearMap` (the map without its bias, its
  absolute-weight copy, their transposes, and the bias);
- ``relu``: `nn.ReLU`, `torch.relu`, `F.relu`, `Tensor.relu`;
- ``maxpool``: `nn.MaxPool2d` (no ``ceil_mode``);
- ``add``: the sum of two tensors (residual connections);
- ``reshape``: `Flatten`, `torch.flatten`, `Tensor.flatten/view/reshape`;
- ``identity``: `Dropout` (eval mode), `Identity`; ``value``: `Tensor.size` and other plain
  values the reshapes read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from robust_train.models.normalize import Normalize

__all__ = ["LinearMap", "Step", "UnsupportedLayerError", "trace_network"]


class UnsupportedLayerError(ValueError):
    """A model holds an operation that the deterministic bounds cannot propagate."""


LEAVES = (
    nn.Conv2d, nn.Linear, nn.BatchNorm1d, nn.BatchNorm2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
    nn.MaxPool2d, nn.ReLU, nn.Flatten, nn.Dropout, nn.Identity, Normalize,
)  # fmt: skip
SUPPORTED = (
    "Conv2d, Linear, BatchNorm1d/2d, AvgPool2d, AdaptiveAvgPool2d, MaxPool2d, ReLU, Flatten, "
    "Dropout, Identity, Normalize, residual sums"
)


@dataclass
class LinearMap:
    """An affine layer y = L(z) + b, split for bound propagation.

    Attributes:
        apply: z -> L(z) (no bias); apply_abs: z -> |L|(z), the map with absolute weights.
        transpose, transpose_abs: g, input shape -> L^T g and |L|^T g.
        bias: (1, *output shape) tensor of b (computed once for the input shape).
    """

    apply: Callable[[Tensor], Tensor]
    apply_abs: Callable[[Tensor], Tensor]
    transpose: Callable[[Tensor, torch.Size], Tensor]
    transpose_abs: Callable[[Tensor, torch.Size], Tensor]
    bias_of: Callable[[Tensor], Tensor]


@dataclass
class Step:
    """One operation: its kind, the names of its arguments (steps, or plain values), what the
    kind needs, and the module's path in the model for a layer."""

    name: str
    kind: str
    args: list[Any]
    linear: LinearMap | None = None
    module: nn.Module | None = None
    path: str | None = None
    call: Callable[..., Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, LEAVES) or super().is_leaf_module(m, qualname)


def trace_network(model: nn.Module) -> list[Step]:
    """The steps of `model` in execution order; the first is ``input``, the last ``output``.

    Raises:
        UnsupportedLayerError: naming the first operation that cannot be bounded.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> [s.kind for s in trace_network(net)]
        ['input', 'reshape', 'affine', 'relu', 'affine', 'output']
        >>> trace_network(nn.Sequential(nn.Linear(2, 2), nn.Tanh()))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        robust_train.certify.graph.UnsupportedLayerError: cannot bound layer '1' (Tanh): ...
    """
    try:
        graph = _Tracer().trace(model)
    except Exception as error:  # noqa: BLE001 - fx raises many kinds; all mean "not traceable"
        raise UnsupportedLayerError(
            f"cannot trace {type(model).__name__} with torch.fx ({error}); the deterministic "
            f"bounds support networks of {SUPPORTED}"
        ) from error
    modules = dict(model.named_modules())
    steps = [_classify(node, modules) for node in graph.nodes]
    if sum(s.kind == "input" for s in steps) != 1:
        raise UnsupportedLayerError("the deterministic bounds need a model with one input")
    return steps


def _names(args: Any) -> list[Any]:
    return [a.name if isinstance(a, fx.Node) else a for a in args]


def _classify(node: fx.Node, modules: dict[str, nn.Module]) -> Step:
    args = _names(node.args)
    if node.op == "placeholder":
        return Step(node.name, "input", [])
    if node.op == "output":
        return Step(node.name, "output", args)
    if node.op == "call_module":
        step = _module_step(node.name, str(node.target), modules[str(node.target)], args)
        step.path = str(node.target)
        return step
    target = node.target
    kwargs = dict(node.kwargs)
    if node.op == "call_function" and target in (operator.add, torch.add) and not kwargs:
        return Step(node.name, "add", args)
    if target in (torch.relu, F.relu, "relu") and not kwargs.get("inplace"):
        return Step(node.name, "relu", args[:1])
    if target in (torch.flatten, "flatten", "view", "reshape"):
        method = target if isinstance(target, str) else None
        call = (lambda t, *a: getattr(t, method)(*a)) if method else torch.flatten
        return Step(node.name, "reshape", args, call=call, extra=kwargs)
    if target == "size":
        return Step(node.name, "value", args, call=lambda t, *a: t.size(*a), extra=kwargs)
    if target is getattr:
        return Step(node.name, "value", args, call=getattr, extra=kwargs)
    what = getattr(target, "__name__", str(target))
    raise UnsupportedLayerError(
        f"cannot bound operation {node.name!r} ({what}): the deterministic bounds support "
        f"{SUPPORTED}"
    )


def _module_step(name: str, path: str, module: nn.Module, args: list[Any]) -> Step:
    if isinstance(module, nn.ReLU):
        return Step(name, "relu", args, module=module)
    if isinstance(module, nn.MaxPool2d):
        if module.ceil_mode or module.return_indices:
            raise UnsupportedLayerError(
                f"cannot bound layer {path!r} (MaxPool2d with ceil_mode or return_indices)"
            )
        return Step(name, "maxpool", args, module=module)
    if isinstance(module, nn.Flatten):
        return Step(name, "reshape", args, call=module)
    if isinstance(module, (nn.Dropout, nn.Identity)):
        return Step(name, "identity", args, module=module)
    linear = _linear_map(module)
    if linear is None:
        raise UnsupportedLayerError(
            f"cannot bound layer {path!r} ({type(module).__name__}): the deterministic bounds "
            f"support {SUPPORTED}"
        )
    return Step(name, "affine", args, linear=linear, module=module)


def _linear_map(module: nn.Module) -> LinearMap | None:
    if isinstance(module, nn.Linear):
        return _dense(module)
    if isinstance(module, nn.Conv2d):
        return _conv(module)
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
        if module.running_mean is None or module.running_var is None:
            return None
        var = module.running_var
        scale = torch.rsqrt(var + module.eps)
        if module.weight is not None:
            scale = scale * module.weight
        shift = -module.running_mean * scale
        if module.bias is not None:
            shift = shift + module.bias
        return _channel_affine(scale, shift)
    if isinstance(module, Normalize):
        return _channel_affine(1 / module.std, -module.mean / module.std)
    if isinstance(module, (nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
        return _positive(module)
    return None


def _vjp(fn: Callable[[Tensor], Tensor], g: Tensor, shape: torch.Size) -> Tensor:
    """L^T g for a linear `fn`, differentiable when grad mode is on."""
    keep = torch.is_grad_enabled()
    with torch.enable_grad():
        z = torch.zeros(shape, dtype=g.dtype, device=g.device, requires_grad=True)
        (out,) = torch.autograd.grad(fn(z), z, g, create_graph=keep)
    return out if keep else out.detach()


def _rows(shape: torch.Size, g: Tensor) -> torch.Size:
    return torch.Size((g.shape[0], *shape[1:]))


def _dense(m: nn.Linear) -> LinearMap:
    return LinearMap(
        apply=lambda z: F.linear(z, m.weight),
        apply_abs=lambda z: F.linear(z, m.weight.abs()),
        transpose=lambda g, shape: g @ m.weight,
        transpose_abs=lambda g, shape: g @ m.weight.abs(),
        bias_of=lambda z: F.linear(z[:1] * 0, m.weight, m.bias),
    )


def _conv(m: nn.Conv2d) -> LinearMap:
    def apply(z: Tensor, weight: Tensor) -> Tensor:
        return m._conv_forward(z, weight, None)

    def transpose(g: Tensor, shape: torch.Size, weight: Tensor) -> Tensor:
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            return _vjp(lambda z: apply(z, weight), g, _rows(shape, g))
        extra = [
            shape[2 + i]
            - ((g.shape[2 + i] - 1) * m.stride[i] - 2 * m.padding[i]
               + m.dilation[i] * (m.kernel_size[i] - 1) + 1)
            for i in range(2)
        ]  # fmt: skip
        return F.conv_transpose2d(
            g, weight, None, m.stride, m.padding, tuple(extra), m.groups, m.dilation
        )

    return LinearMap(
        apply=lambda z: apply(z, m.weight),
        apply_abs=lambda z: apply(z, m.weight.abs()),
        transpose=lambda g, shape: transpose(g, shape, m.weight),
        transpose_abs=lambda g, shape: transpose(g, shape, m.weight.abs()),
        bias_of=lambda z: m._conv_forward(z[:1] * 0, m.weight, m.bias),
    )


def _channel_affine(scale: Tensor, shift: Tensor) -> LinearMap:
    def per_channel(values: Tensor, z: Tensor) -> Tensor:
        return values.view(1, -1, *([1] * (z.dim() - 2))).to(z.dtype)

    return LinearMap(
        apply=lambda z: z * per_channel(scale, z),
        apply_abs=lambda z: z * per_channel(scale.abs(), z),
        transpose=lambda g, shape: g * per_channel(scale, g),
        transpose_abs=lambda g, shape: g * per_channel(scale.abs(), g),
        bias_of=lambda z: (z[:1] * 0) + per_channel(shift, z),
    )


def _positive(m: nn.Module) -> LinearMap:
    """A linear map with non-negative weights and no bias (average pooling)."""
    return LinearMap(
        apply=m,
        apply_abs=m,
        transpose=lambda g, shape: _vjp(m, g, _rows(shape, g)),
        transpose_abs=lambda g, shape: _vjp(m, g, _rows(shape, g)),
        bias_of=lambda z: m(z[:1] * 0),
    )
