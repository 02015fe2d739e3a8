"""Tighter pre-activation bounds by linear back-substitution (CROWN: Zhang et al., NeurIPS 2018,
"Efficient Neural Network Robustness Certification with General Activation Functions"; the
max-pool relaxation of DeepPoly, Singh et al., POPL 2019).

For a ReLU whose input z is not fixed in sign by the interval bounds (l < 0 < u), a lower bound
of c * z over the input box comes from writing c * z as a linear function of the input through
every earlier layer, replacing each nonlinearity by a linear bound chosen by the sign of its
coefficient: a ReLU with input in [l, u] by alpha * z <= relu(z) <= u / (u - l) * (z - l), alpha
= 1 where u >= -l else 0; a max-pool window by z_j <= max <= max_i u_i (j the input of the
largest lower bound; exactly z_j when its lower bound reaches every other upper bound). Then the
linear function is minimised over the box in closed form. Upper bounds are -lower bounds of
-z. The result is intersected with the interval bounds, so it is never looser; fewer unstable
ReLUs means a tighter ReLU-derivative mask in the backward pass of `robust_train.certify.interval`.

Residual sums are bounded too: the back-substitution follows the traced graph, not a chain.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.certify.graph import Step, UnsupportedLayerError
from robust_train.certify.interval import Box, Tighten, pool_geometry, pool_windows, second_largest
from robust_train.models.normalize import Normalize

__all__ = ["crown_tightener"]

CHANNELWISE = (nn.BatchNorm1d, nn.BatchNorm2d, Normalize)


def crown_tightener(steps: list[Step], rows_per_chunk: int = 512) -> Tighten:
    """The `tighten` hook of `forward_bounds` that runs CROWN before each ReLU.

    The back-substitution walks the traced graph backwards from the ReLU's input: a residual
    sum hands its coefficients to both of its arguments, and an argument read by several steps
    collects the sum of what they hand it (the linear bound of a sum is the sum of the bounds).

    Args:
        steps: `trace_network(model)`, in execution order.
        rows_per_chunk: unstable neurons back-substituted at once (memory).
    """
    position = {s.name: i for i, s in enumerate(steps)}

    def tighten(step: Step, env: dict[str, Any]) -> Box:
        name = step.args[0]
        box: Box = env[name]
        before = steps[: position[name] + 1]
        if _exact_by_intervals(before):
            return box
        lower, upper = box.lower.clone(), box.upper.clone()
        for b in range(lower.shape[0]):
            unstable = ((lower[b] < 0) & (upper[b] > 0)).flatten().nonzero().flatten()
            for start in range(0, len(unstable), rows_per_chunk):
                index = unstable[start : start + rows_per_chunk]
                low, high = _bounds_of(before, env, b, index)
                flat_l, flat_u = lower[b].view(-1), upper[b].view(-1)
                flat_l[index] = torch.maximum(flat_l[index], low)
                flat_u[index] = torch.minimum(flat_u[index], high)
        return Box(lower, upper)

    return tighten


def _exact_by_intervals(steps: list[Step]) -> bool:
    """Whether interval bounds are already exact: no nonlinearity, no sum, and at most one
    affine layer that mixes entries (per-channel scalings such as BatchNorm map a box onto a
    box)."""
    if any(s.kind in ("relu", "maxpool", "add") for s in steps):
        return False
    mixing = [s for s in steps if s.kind == "affine" and not isinstance(s.module, CHANNELWISE)]
    return len(mixing) <= 1


def _bounds_of(steps: list[Step], env: dict[str, Any], b: int, index: Tensor) -> tuple[Tensor, ...]:
    """CROWN lower and upper bounds of the neurons `index` of the last step's output, image b."""
    last = env[steps[-1].name].lower
    shape = last.shape[1:]
    rows = len(index)
    eye = torch.zeros(rows, shape.numel(), dtype=last.dtype, device=last.device)
    eye[torch.arange(rows), index] = 1.0
    coef = torch.cat([eye, -eye]).view(2 * rows, *shape)
    lowest = _lower_bound(steps, env, b, coef)
    return lowest[:rows], -lowest[rows:]


def _lower_bound(steps: list[Step], env: dict[str, Any], b: int, coef: Tensor) -> Tensor:
    """min over the input box of sum(coef * output of the last step), per row: the linear
    bounds are carried backwards through the graph, each step's coefficients handed to the
    steps it reads."""
    bias = coef.new_zeros(coef.shape[0])
    coefs: dict[str, Tensor] = {steps[-1].name: coef}
    for step in reversed(steps):
        c = coefs.pop(step.name, None)
        if c is None:
            continue
        if step.kind == "input":
            low, high = env[step.name].lower[b : b + 1], env[step.name].upper[b : b + 1]
            value = c.clamp_min(0) * low + c.clamp_max(0) * high
            return value.flatten(1).sum(1) + bias
        if step.kind == "add":
            for name in step.args[:2]:
                _hand(coefs, name, c)
            continue
        before = env[step.args[0]]
        low, high = before.lower[b : b + 1], before.upper[b : b + 1]
        if step.kind == "affine":
            assert step.linear is not None
            bias = bias + (c * step.linear.bias_of(low)).flatten(1).sum(1)
            c = step.linear.transpose(c, low.shape)
        elif step.kind == "relu":
            c, extra = _relu_relaxation(c, low, high)
            bias = bias + extra
        elif step.kind == "maxpool":
            c, extra = _maxpool_relaxation(step, c, low, high)
            bias = bias + extra
        elif step.kind == "reshape":
            c = c.reshape(c.shape[0], *low.shape[1:])
        _hand(coefs, step.args[0], c)
    raise UnsupportedLayerError("the bounded neurons do not depend on the model's input")


def _hand(coefs: dict[str, Tensor], name: str, coef: Tensor) -> None:
    coefs[name] = coefs[name] + coef if name in coefs else coef


def _relu_relaxation(coef: Tensor, low: Tensor, high: Tensor) -> tuple[Tensor, Tensor]:
    active, unstable = low >= 0, (low < 0) & (high > 0)
    slope = high / (high - low).where(unstable, torch.ones_like(low))
    alpha = (high >= -low).to(low.dtype)
    one, zero = torch.ones_like(low), torch.zeros_like(low)
    below = torch.where(active, one, torch.where(unstable, alpha, zero))
    above = torch.where(active, one, torch.where(unstable, slope, zero))
    intercept = torch.where(unstable, -slope * low, zero)
    pos, neg = coef.clamp_min(0), coef.clamp_max(0)
    return pos * below + neg * above, (neg * intercept).flatten(1).sum(1)


def _maxpool_relaxation(
    step: Step, coef: Tensor, low: Tensor, high: Tensor
) -> tuple[Tensor, Tensor]:
    assert step.module is not None
    kernel, stride, pad, dilation = pool_geometry(step.module)
    best, index = F.max_pool2d(
        low, kernel, stride, pad, dilation, return_indices=True
    )  # j: the input of the largest lower bound of each window
    top = step.module(high)
    at_best = high.flatten(2).gather(2, index.flatten(2)).view_as(index)
    second = second_largest(pool_windows(high, step.module)).view_as(index)
    exact = ((at_best >= top) & (best >= second)).to(low.dtype)
    pos, neg = coef.clamp_min(0), coef.clamp_max(0)
    extra = (neg * (1 - exact) * top).flatten(1).sum(1)
    through = (pos + neg * exact).flatten(2)
    rows, channels = coef.shape[:2]
    out = coef.new_zeros(rows, channels, low.shape[2] * low.shape[3])
    out.scatter_add_(2, index.flatten(2).expand(rows, -1, -1), through)
    return out.view(rows, *low.shape[1:]), extra
