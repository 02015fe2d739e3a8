"""The DeepLIFT rescale rule as differentiable autograd nodes, and the calls they replace.

Two forwards, each under a `torch.overrides.TorchFunctionMode` that intercepts every elementwise
nonlinearity CALL (modules and functional calls alike, each call on its own, so a module called
several times is handled per call) and every `max_pool2d` call:

1. `TrueForward`: the model on the stacked batch [x; x0] (B rows and one row of a baseline the
   batch shares, else B), every call run as it is (with the graph when the map must be
   differentiable), recording per call the multiplier (f(z) - f(z0)) / (z - z0) of the x rows
   (f'(z) where |z - z0| < eps), or, for a max-pool, its input [z; z0] and argmax indices. They
   are computed here, inside the call, so under any outer mode (the softplus surrogate
   `smooth_relus`), which the autograd engine does not carry into a backward.
2. `Chain`: the model on x (B rows), each call replaced by a node (`_Rescale`,
   `_RescaleMaxPool`) whose forward is the call and whose backward is the rescale rule of
   Shrikumar et al. (2017) (times the recorded multiplier) or Captum's max-pool rule, from the
   recorded true values of the same call. The backward of the chain's target logit is the
   DeepLIFT multiplier chain.

The records and backwards are differentiable torch operations on the true forward, so with
`create_graph=True` the multipliers keep their graph through the TRUE forward and the map's
derivative is the derivative of the DeepLIFT map (a graph through the chain itself would give
the chain's, not the true, dependence of the pre-activations on x). The chain's first backward
never enters the true forward's graph (one stacked forward would send zero gradients through
all its rows, at twice the cost).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from robust_train.core.interception import NOT_INTERCEPTED, CallInterceptor
from robust_train.models.softplus import smoothing_active

__all__ = ["Chain", "TrueForward"]

Fn = Callable[[Tensor], Tensor]

# Elementwise nonlinearities: the function the mode sees -> the out-of-place function it runs.
_OUT_OF_PLACE: dict[Any, Any] = {
    F.relu: F.relu,
    torch.relu: torch.relu,
    torch.relu_: torch.relu,
    Tensor.relu: torch.relu,
    Tensor.relu_: torch.relu,
    F.relu6: F.relu6,
    F.hardtanh: F.hardtanh,
    torch._C._nn.hardtanh_: F.hardtanh,
    F.leaky_relu: F.leaky_relu,
    torch._C._nn.leaky_relu_: F.leaky_relu,
    F.elu: F.elu,
    torch._C._nn.elu_: F.elu,
    F.selu: F.selu,
    F.celu: F.celu,
    F.gelu: F.gelu,
    F.silu: F.silu,
    F.mish: F.mish,
    F.softplus: F.softplus,
    F.hardswish: F.hardswish,
    F.hardsigmoid: F.hardsigmoid,
    torch.sigmoid: torch.sigmoid,
    Tensor.sigmoid: torch.sigmoid,
    torch.tanh: torch.tanh,
    Tensor.tanh: torch.tanh,
}
_MAX_POOLS = frozenset((F.max_pool2d, torch.max_pool2d))
_RELUS = frozenset(func for func, target in _OUT_OF_PLACE.items() if target in (F.relu, torch.relu))
# Piecewise-linear functions: f'' = 0 almost everywhere, so their slope f'(z) needs no graph
# (torch has no double backward for hardsigmoid). `smooth_relus` turns the ReLUs into softplus.
_PIECEWISE = frozenset(
    func
    for func, target in _OUT_OF_PLACE.items()
    if target in (F.relu, torch.relu, F.relu6, F.hardtanh, F.leaky_relu, F.hardsigmoid)
)
_SMOOTHED = frozenset(func for func in _RELUS | {F.relu6})


@dataclass
class _Call:
    """What the true forward recorded for one call: for an elementwise call the multiplier of
    the x rows; for a max-pool its input [z; z0] and the argmax indices."""

    func: Any
    shape: tuple[int, ...]
    multiplier: Tensor | None = None
    source: Tensor | None = None
    indices: Tensor | None = None


class _Intercept(CallInterceptor):
    """The calls both forwards intercept, on tensors of `rows` rows; others run as they are."""

    def __init__(self, rows: int, *, maxpool: bool) -> None:
        super().__init__()
        self.rows, self.maxpool = rows, maxpool

    def intercept(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        z = args[0] if args else None
        if isinstance(z, Tensor) and z.dim() >= 1 and z.shape[0] == self.rows:
            if func in _OUT_OF_PLACE:
                return self.elementwise(func, z, _elementwise(func, args[1:], kwargs))
            pool = self.maxpool and func in _MAX_POOLS and z.dim() == 4
            if pool and not kwargs.get("return_indices", False):
                return self.max_pool(func, z, _pool(args[1:], kwargs))
        return NOT_INTERCEPTED

    def elementwise(self, func: Any, z: Tensor, run: Fn) -> Tensor:
        raise NotImplementedError

    def max_pool(self, func: Any, z: Tensor, run: Callable[[Tensor], Any]) -> Tensor:
        raise NotImplementedError


class TrueForward(_Intercept):
    """Forward 1 on [x; x0]: `batch` rows of x then `baseline_rows` of the baseline (1 when
    the baseline is shared by the batch: rows do not interact in eval mode). Runs every call
    and records it in `calls`."""

    def __init__(self, batch: int, baseline_rows: int, *, maxpool: bool, graph: bool, eps: float):
        super().__init__(batch + baseline_rows, maxpool=maxpool)
        self.batch, self.graph, self.eps = batch, graph, eps
        self.calls: list[_Call] = []

    def elementwise(self, func: Any, z: Tensor, run: Fn) -> Tensor:
        out = run(z)
        linear_pieces = func in _PIECEWISE and not (func in _SMOOTHED and smoothing_active())
        relu = func in _RELUS and linear_pieces
        slope = _slope(run, z, out, self.batch, relu, self.graph and not linear_pieces)
        b = self.batch
        ratio, small = _rescaled(out[:b] - out[b:], z[:b] - z[b:], self.eps)
        multiplier = torch.where(small, slope, ratio)
        self.calls.append(_Call(func, tuple(z.shape[1:]), multiplier=multiplier))
        return out

    def max_pool(self, func: Any, z: Tensor, run: Callable[[Tensor], Any]) -> Tensor:
        out, indices = run(z)
        self.calls.append(_Call(func, tuple(z.shape[1:]), source=z, indices=indices))
        return out


class Chain(_Intercept):
    """Forward 2 on x (`batch` rows): each call becomes the rescale node of the true forward's
    record of the same call, in call order."""

    def __init__(self, batch: int, calls: list[_Call], *, maxpool: bool, eps: float) -> None:
        super().__init__(batch, maxpool=maxpool)
        self.calls, self.eps, self.used = calls, eps, 0

    def _next(self, func: Any, h: Tensor) -> _Call:
        if self.used >= len(self.calls) or self.calls[self.used].func is not func:
            raise RuntimeError(
                "deeplift: the model made different nonlinearity calls on the inputs than on "
                f"the stacked inputs and baselines (call {self.used + 1}: {func!r}); DeepLIFT "
                "needs a forward whose calls do not depend on the batch"
            )
        call = self.calls[self.used]
        if call.shape != tuple(h.shape[1:]):
            raise RuntimeError(
                f"deeplift: call {self.used + 1} ({func!r}) saw rows of shape "
                f"{tuple(h.shape[1:])} on the inputs but {call.shape} on inputs and baselines"
            )
        self.used += 1
        return call

    def elementwise(self, func: Any, z: Tensor, run: Fn) -> Tensor:
        call = self._next(func, z)
        return _Rescale.apply(z, run, call.multiplier)

    def max_pool(self, func: Any, z: Tensor, run: Callable[[Tensor], Any]) -> Tensor:
        call = self._next(func, z)
        return _RescaleMaxPool.apply(z, call.source, call.indices, self.eps)

    def check_all_used(self) -> None:
        """Raise when the chain made fewer calls than the true forward."""
        if self.used != len(self.calls):
            raise RuntimeError(
                f"deeplift: the model made {self.used} nonlinearity calls on the inputs but "
                f"{len(self.calls)} on the stacked inputs and baselines"
            )


def _elementwise(func: Any, rest: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn:
    """`func` with its other arguments bound, out of place (in-place forms return a new tensor)."""
    target = _OUT_OF_PLACE[func]
    options = {key: value for key, value in kwargs.items() if key != "inplace"}
    return lambda t: target(t, *rest, **options)


def _pool(rest: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[Tensor], Any]:
    """max_pool2d with its window arguments bound, returning (values, indices)."""
    options = {key: value for key, value in kwargs.items() if key != "return_indices"}
    return lambda t: F.max_pool2d_with_indices(t, *rest, **options)


def _slope(run: Fn, z: Tensor, out: Tensor, b: int, relu: bool, graph: bool) -> Tensor:
    """f'(z) on the first `b` rows of `z` (out = f(z)): with a graph through the true forward
    when `graph` (f'' is then the true one), written out for a ReLU."""
    if relu:
        return (z[:b] > 0).to(z.dtype)
    if graph and out.requires_grad:
        (slope,) = torch.autograd.grad(out[:b].sum(), z, create_graph=True)
        return slope[:b]
    with torch.enable_grad():
        leaf = z[:b].detach().requires_grad_(True)
        (slope,) = torch.autograd.grad(run(leaf).sum(), leaf)
    return slope


def _rescaled(change: Tensor, dz: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """`change / dz` where |dz| >= eps (a safe denominator elsewhere), and the mask |dz| < eps."""
    small = dz.abs() < eps
    return change / dz.masked_fill(small, 1.0), small


class _Rescale(torch.autograd.Function):
    """The chain rows h: forward f(h); backward g * m, with m the multiplier the true forward
    recorded: (f(z) - f(z0)) / (z - z0), and f'(z) where |z - z0| < eps."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, run: Fn, multiplier: Tensor) -> Tensor:
        ctx.save_for_backward(multiplier)
        return run(h)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:
        (multiplier,) = ctx.saved_tensors
        return g * multiplier, None, None


class _RescaleMaxPool(torch.autograd.Function):
    """The chain rows h: forward their values at the argmax `indices` of the true rows;
    backward Captum's DeepLift max-pool rule from the true pre-activations [z; z0] = `source`,
    the windows' shares summed where windows overlap."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, source: Tensor, indices: Tensor, eps: float) -> Tensor:
        ctx.eps = eps
        ctx.save_for_backward(source, indices)
        chain = indices[: len(h)]
        return h.flatten(2).gather(2, chain.flatten(2)).view_as(chain).to(h.dtype)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None, None]:
        source, indices = ctx.saved_tensors
        b = len(g)
        flat_z, flat_i, flat_g = source.flatten(2), indices.flatten(2), g.flatten(2)
        pooled = flat_z.gather(2, flat_i)  # differentiable in the true z
        out_x, out_0 = pooled[:b], pooled[b:]  # the baseline: b rows, or 1 shared row
        i_x, i_0 = flat_i[:b], flat_i[b:].expand_as(flat_g)
        top = torch.maximum(out_x, out_0)
        empty = torch.zeros_like(flat_z[:b])
        shared = empty.scatter_add(2, i_x, flat_g * (top - out_0)).scatter_add(
            2, i_0, flat_g * (out_x - top)
        )
        ratio, small = _rescaled(shared, flat_z[:b] - flat_z[b:], ctx.eps)
        plain = empty.scatter_add(2, i_x, flat_g)
        grad = torch.where(small, plain, ratio).view(source[:b].shape)
        return grad, None, None, None
