"""Interval bounds on the input gradient of a ReLU network over an L_inf ball (Wicker, Heo,
Costabello & Weller, "Robust Explanation Constraints for Neural Networks", ICLR 2023).

Forward: interval bound propagation of every activation over the box
B = [x - eps, x + eps] cap [0, 1]^d (affine layers in centre-radius form: centre through the
layer, radius through its absolute weights; ReLU and max pooling are monotone). Backward: the
chain rule of the target logit's gradient in interval arithmetic, from the fixed one-hot vector
at the logits down to the input: through an affine layer g -> L^T g (centre through L^T, radius
through |L|^T); through a ReLU whose pre-activation interval is [l, u] the derivative is 1
(l > 0), 0 (u <= 0, as autograd takes it at 0) or anywhere in [0, 1]; through a max pool each
window sends its gradient to one input, which may be any input whose upper bound reaches the
largest lower bound of the window, and is surely the one whose lower bound beats the second
largest upper bound -- a selector in {0, [0, 1], 1}; residual sums add their gradients.

Every interval contains the exact value at every point of the box (up to floating-point
rounding), so the gradient interval contains the saliency map of every x' in the ball.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.certify.graph import Step, UnsupportedLayerError

__all__ = ["Box", "forward_bounds", "gradient_bounds", "input_box"]


@dataclass
class Box:
    """Elementwise bounds lower <= value <= upper of one tensor."""

    lower: Tensor
    upper: Tensor

    def __add__(self, other: Box) -> Box:
        return Box(self.lower + other.lower, self.upper + other.upper)

    def map(self, fn: Callable[[Tensor], Tensor]) -> Box:
        """Apply a monotone (non-decreasing) function to both ends."""
        return Box(fn(self.lower), fn(self.upper))

    def intersect(self, other: Box) -> Box:
        return Box(torch.maximum(self.lower, other.lower), torch.minimum(self.upper, other.upper))


def input_box(inputs: Tensor, epsilon: float) -> Box:
    """The L_inf ball of radius `epsilon` around `inputs`, intersected with [0, 1].

    Examples:
        >>> input_box(torch.tensor([0.0, 0.5]), 0.1)
        Box(lower=tensor([0.0000, 0.4000]), upper=tensor([0.1000, 0.6000]))
    """
    return Box((inputs - epsilon).clamp(0, 1), (inputs + epsilon).clamp(0, 1))


Tighten = Callable[[Step, dict[str, Any]], Box]


def forward_bounds(steps: list[Step], box: Box, tighten: Tighten | None = None) -> dict[str, Any]:
    """Bounds of every step's output (a `Box`) over `box`; plain values (sizes) as they are.

    `tighten(step, env)`, when given, is called before each ReLU and returns tighter bounds of
    its input (the CROWN pass), which replace the interval ones there and feed what follows.
    """
    env: dict[str, Any] = {}
    for step in steps:
        if step.kind == "input":
            env[step.name] = box
        elif step.kind == "output":
            env[step.name] = env[step.args[0]]
        elif step.kind == "relu":
            if tighten is not None:
                env[step.args[0]] = tighten(step, env)
            env[step.name] = env[step.args[0]].map(lambda t: t.clamp_min(0))
        else:
            env[step.name] = _forward(step, env)
    return env


def _forward(step: Step, env: dict[str, Any]) -> Any:
    first: Any = env[step.args[0]]
    if step.kind == "affine":
        assert step.linear is not None
        mid, rad = (first.upper + first.lower) / 2, (first.upper - first.lower) / 2
        centre = step.linear.apply(mid) + step.linear.bias_of(mid)
        radius = step.linear.apply_abs(rad)
        return Box(centre - radius, centre + radius)
    if step.kind == "maxpool":
        assert step.module is not None
        return first.map(step.module)
    if step.kind == "add":
        second = env[step.args[1]]
        if not (isinstance(first, Box) and isinstance(second, Box)):
            raise UnsupportedLayerError(f"cannot bound {step.name!r}: a sum with a constant")
        return first + second
    if step.kind == "identity":
        return first
    rest = [env[a] if isinstance(a, str) and a in env else a for a in step.args[1:]]
    assert step.call is not None
    if step.kind == "value":
        value = first.lower if isinstance(first, Box) else first
        return step.call(value, *rest, **step.extra)
    call = step.call
    return first.map(lambda t: call(t, *rest, **step.extra))


def gradient_bounds(steps: list[Step], env: dict[str, Any], target: Tensor) -> Box:
    """Bounds of d logit_target / d input over the box of `forward_bounds` (its `env`)."""
    logits = env[steps[-1].name].lower
    onehot = F.one_hot(target, logits.shape[1]).to(logits.dtype)
    grads: dict[str, Box] = {steps[-1].args[0]: Box(onehot, onehot)}
    for step in reversed(steps[:-1]):
        grad = grads.pop(step.name, None)
        if grad is None or step.kind == "value":
            continue
        if step.kind == "input":
            return grad
        if step.kind == "add":
            for name in step.args[:2]:
                _accumulate(grads, name, grad)
            continue
        _accumulate(grads, step.args[0], _backward(step, env[step.args[0]], grad))
    raise UnsupportedLayerError("the model's output does not depend on its input")


def _accumulate(grads: dict[str, Box], name: str, grad: Box) -> None:
    grads[name] = grads[name] + grad if name in grads else grad


def _backward(step: Step, before: Box, grad: Box) -> Box:
    """The bounds of the gradient at a step's input, from those at its output."""
    if step.kind == "affine":
        assert step.linear is not None
        shape = before.lower.shape
        mid, rad = (grad.upper + grad.lower) / 2, (grad.upper - grad.lower) / 2
        centre = step.linear.transpose(mid, shape)
        radius = step.linear.transpose_abs(rad, shape)
        return Box(centre - radius, centre + radius)
    if step.kind == "relu":
        on = before.lower > 0
        maybe = (before.upper > 0) & ~on
        zero = torch.zeros_like(grad.lower)
        lower = torch.where(on, grad.lower, torch.where(maybe, grad.lower.clamp_max(0), zero))
        upper = torch.where(on, grad.upper, torch.where(maybe, grad.upper.clamp_min(0), zero))
        return Box(lower, upper)
    if step.kind == "maxpool":
        assert step.module is not None
        return _maxpool_backward(step.module, before, grad)
    if step.kind == "reshape":
        return grad.map(lambda t: t.reshape(before.lower.shape))
    return grad  # identity


def pool_geometry(module: nn.Module) -> tuple[tuple[int, int], ...]:
    """(kernel, stride, padding, dilation) of a max pool, each as a pair."""

    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))

    stride = module.stride if module.stride is not None else module.kernel_size  # type: ignore[union-attr]
    return tuple(
        pair(v)
        for v in (module.kernel_size, stride, module.padding, module.dilation)  # type: ignore[union-attr]
    )


def pool_windows(t: Tensor, module: nn.Module) -> Tensor:
    """(N*C, kh*kw, L): every window of a max pool over t (N, C, H, W), -inf in the padding."""
    kernel, stride, pad, dilation = pool_geometry(module)
    n, c, h, w = t.shape
    padded = F.pad(t.reshape(n * c, 1, h, w), (pad[1], pad[1], pad[0], pad[0]), value=-torch.inf)
    return F.unfold(padded, kernel, dilation=dilation, stride=stride)


def second_largest(windows: Tensor) -> Tensor:
    """(N, 1, L): the second largest value of each window (-inf for one-element windows)."""
    if windows.shape[1] < 2:
        return torch.full_like(windows[:, :1], -torch.inf)
    return windows.topk(2, dim=1).values[:, 1:2]


def _maxpool_backward(module: nn.Module, before: Box, grad: Box) -> Box:
    kernel, stride, pad, dilation = pool_geometry(module)
    n, c, h, w = before.lower.shape
    low, high = pool_windows(before.lower, module), pool_windows(before.upper, module)
    candidate = (high >= low.max(1, keepdim=True).values).to(grad.lower.dtype)
    certain = (low > second_largest(high)).to(grad.lower.dtype)
    g_low = grad.lower.reshape(n * c, 1, -1)
    g_high = grad.upper.reshape(n * c, 1, -1)
    lower = torch.where(g_low < 0, candidate * g_low, certain * g_low)
    upper = torch.where(g_high > 0, candidate * g_high, certain * g_high)
    size = (h + 2 * pad[0], w + 2 * pad[1])

    def fold(t: Tensor) -> Tensor:
        out = F.fold(t, size, kernel, dilation=dilation, stride=stride)
        return out[..., pad[0] : pad[0] + h, pad[1] : pad[1] + w].reshape(n, c, h, w)

    return Box(fold(lower), fold(upper))
