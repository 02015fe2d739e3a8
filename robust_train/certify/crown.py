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

Networks must be a chain (no residual sums): `crown_tightener` refuses the others.
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

    Args:
        steps: `trace_network(model)`; must form a chain (each step reads the previous one).
        rows_per_chunk: unstable neurons back-substituted at once (memory).

    Raises:
        UnsupportedLayerError: for a network with residual sums.
    """
    chain = [s for s in steps if s.kind not in ("value", "output")]
    for before, step in zip(chain, chain[1:], strict=False):
        if step.kind == "add" or step.args[0] != before.name:
            raise UnsupportedLayerError(
                f"method 'crown' bounds chains of layers; {step.name!r} does not read the step "
                "before it (a residual sum); use method 'interval'"
            )
    position = {s.name: i for i, s in enumerate(chain)}

    def tighten(step: Step, env: dict[str, Any]) -> Box:
        name = step.args[0]
        box: Box = env[name]
        if _exact_by_intervals(chain[: position[name] + 1]):
            return box
        lower, upper = box.lower.clone(), box.upper.clone()
        for b in range(lower.shape[0]):
            unstable = ((lower[b] < 0) & (upper[b] > 0)).flatten().nonzero().flatten()
            for start in range(0, len(unstable), rows_per_chunk):
                index = unstable[start : start + rows_per_chunk]
                low, high = _bounds_of(chain[: position[name] + 1], env, b, index)
                flat_l, flat_u = lower[b].view(-1), upper[b].view(-1)
                flat_l[index] = torch.maximum(flat_l[index], low)
                flat_u[index] = torch.minimum(flat_u[index], high)
        return Box(lower, upper)

    return tighten


def _exact_by_intervals(chain: list[Step]) -> bool:
    """Whether interval bounds are already exact: no nonlinearity, and at most one affine layer
    that mixes entries (per-channel scalings such as BatchNorm map a box onto a box)."""
    if any(s.kind in ("relu", "maxpool") for s in chain):
        return False
    mixing = [s for s in chain if s.kind == "affine" and not isinstance(s.module, CHANNELWISE)]
    return len(mixing) <= 1


def _bounds_of(chain: list[Step], env: dict[str, Any], b: int, index: Tensor) -> tuple[Tensor, ...]:
    """CROWN lower and upper bounds of the neurons `index` of the last step's output, image b."""
    shape = env[chain[-1].name].lower.shape[1:]
    rows = len(index)
    eye = torch.zeros(rows, shape.numel(), dtype=env[chain[-1].name].lower.dtype)
    eye = eye.to(env[chain[-1].name].lower.device)
    eye[torch.arange(rows), index] = 1.0
    coef = torch.cat([eye, -eye]).view(2 * rows, *shape)
    lowest = _lower_bound(chain, env, b, coef)
    return lowest[:rows], -lowest[rows:]


def _lower_bound(chain: list[Step], env: dict[str, Any], b: int, coef: Tensor) -> Tensor:
    """min over the input box of sum(coef * output of the chain's last step), per row."""
    bias = coef.new_zeros(coef.shape[0])
    for i in range(len(chain) - 1, 0, -1):
        step, before = chain[i], env[chain[i - 1].name]
        low, high = before.lower[b : b + 1], before.upper[b : b + 1]
        if step.kind == "affine":
            assert step.linear is not None
            bias = bias + (coef * step.linear.bias_of(low)).flatten(1).sum(1)
            coef = step.linear.transpose(coef, low.shape)
        elif step.kind == "relu":
            coef, extra = _relu_relaxation(coef, low, high)
            bias = bias + extra
        elif step.kind == "maxpool":
            coef, extra = _maxpool_relaxation(step, coef, low, high)
            bias = bias + extra
        elif step.kind == "reshape":
            coef = coef.reshape(coef.shape[0], *low.shape[1:])
    box = env[chain[0].name]
    low, high = box.lower[b : b + 1], box.upper[b : b + 1]
    value = coef.clamp_min(0) * low + coef.clamp_max(0) * high
    return value.flatten(1).sum(1) + bias


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
