"""The two threat models of the fragility attack: the L_inf and the L2 ball, each intersected with
the image box [0, 1]^d.

- `project(x, x0, epsilon, norm)`: the Euclidean projection of `x` onto
  {y : ||y - x0|| <= epsilon, 0 <= y <= 1}. For L_inf it is the coordinate-wise clamp. For L2 it
  is exact too: the KKT conditions of min ||y - x||^2 s.t. ||y - x0||_2^2 <= epsilon^2, y in
  [0, 1]^d separate over coordinates, y_i = clamp(x0_i + t (x_i - x0_i), 0, 1) with
  t = 1 / (1 + lambda) in (0, 1], lambda >= 0 the multiplier of the ball; ||y(t) - x0|| grows
  with t, so t is found by bisection (the feasible end is kept: the budget always holds).
- `step_direction(d, norm)`: sign(d) for L_inf, d / ||d||_2 per sample for L2 (0 stays 0).
- `random_in_ball(x0, epsilon, norm, generator)`: a uniform point of the ball, clamped to the
  box (the clamp moves every coordinate towards x0, so the point stays in the ball).
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.core.validation import check_choice

__all__ = ["NORMS", "project", "random_in_ball", "step_direction"]

NORMS = ("linf", "l2")
_BISECTION_STEPS = 50  # t to 2**-50: far below float32 resolution of the pixels


def _l2(v: Tensor) -> Tensor:
    return v.flatten(1).norm(dim=1).view(-1, *([1] * (v.dim() - 1)))


def project(x: Tensor, x0: Tensor, epsilon: float, norm: str) -> Tensor:
    """Project `x` onto the `norm` ball of radius `epsilon` around `x0`, intersected with [0, 1].

    Examples:
        >>> x0 = torch.full((1, 1, 1, 2), 0.5)
        >>> y = project(x0 + torch.tensor([3.0, 4.0]).view(1, 1, 1, 2), x0, 0.5, "l2")
        >>> [round(v, 4) for v in y.flatten().tolist()]  # (0.3, 0.4) shrunk onto the sphere
        [0.8, 0.9]
        >>> project(x0 + 1, x0, 0.1, "linf").flatten().tolist()
        [0.6000000238418579, 0.6000000238418579]
    """
    check_choice(norm, "norm", NORMS)
    if norm == "linf":
        return (x0 + (x - x0).clamp(-epsilon, epsilon)).clamp(0, 1)
    delta = x - x0
    inside = _l2(delta.clamp(-x0, 1 - x0)) <= epsilon
    lo = torch.zeros_like(_l2(delta))
    hi = torch.ones_like(lo)
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        fits = _l2((x0 + mid * delta).clamp(0, 1) - x0) <= epsilon
        lo, hi = torch.where(fits, mid, lo), torch.where(fits, hi, mid)
    t = torch.where(inside, torch.ones_like(lo), lo)
    return (x0 + t * delta).clamp(0, 1)


def step_direction(direction: Tensor, norm: str) -> Tensor:
    """The steepest-ascent unit step of a gradient `direction` for the norm: sign(d) (L_inf) or
    d / ||d||_2 per sample (L2); a zero direction stays zero.

    Examples:
        >>> d = torch.tensor([[[[3.0, -4.0]]]])
        >>> step_direction(d, "linf").flatten().tolist(), step_direction(d, "l2").flatten().tolist()
        ([1.0, -1.0], [0.6000000238418579, -0.800000011920929])
    """
    if norm == "linf":
        return direction.sign()
    return direction / _l2(direction).clamp_min(1e-30)


def random_in_ball(x0: Tensor, epsilon: float, norm: str, generator: torch.Generator) -> Tensor:
    """A uniform random point of the ball around `x0` (drawn on `generator`'s device), clamped to
    [0, 1].

    Examples:
        >>> x0 = torch.full((3, 1, 4, 4), 0.5)
        >>> x = random_in_ball(x0, 0.2, "l2", torch.Generator().manual_seed(0))
        >>> bool(((x - x0).flatten(1).norm(dim=1) <= 0.2 + 1e-6).all())
        True
    """
    device, dtype = generator.device, x0.dtype
    if norm == "linf":
        u = torch.rand(x0.shape, generator=generator, device=device, dtype=dtype)
        return (x0 + (2 * u.to(x0.device) - 1) * epsilon).clamp(0, 1)
    gauss = torch.randn(x0.shape, generator=generator, device=device, dtype=dtype)
    u = torch.rand((x0.shape[0],), generator=generator, device=device, dtype=dtype)
    d = gauss[0].numel()
    radius = epsilon * u.pow(1.0 / d).view(-1, *([1] * (x0.dim() - 1)))
    delta = (radius * gauss / _l2(gauss).clamp_min(1e-30)).to(x0.device)
    return (x0 + delta).clamp(0, 1)
