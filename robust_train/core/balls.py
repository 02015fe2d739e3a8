"""The L_inf and L2 balls of every threat model, defined once: draw, project, step.

Attacks, penalties, the Lipschitz estimate and the certificates' empirical check all perturb an
image inside a ball around it; they share these functions.

- `random_offset(shape, radius, norm, generator)`: a uniform offset of the ball (L_inf: each value
  in [-radius, radius]; L2: a uniform direction times radius * U^(1/d), d the size of one row).
- `random_on_sphere(shape, radius, generator)`: an offset of L2 length `radius`, uniform in
  direction.
- `random_in_ball(x0, epsilon, norm, generator)`: `x0` plus a uniform offset, clamped to [0, 1]
  (the clamp moves every coordinate towards `x0`, so the point stays in the ball).
- `project_offset(delta, radius, norm)`: the offset pulled back into the ball (L_inf: clamp;
  L2: rescaled to length `radius` when longer); the image box is not considered.
- `project(x, x0, epsilon, norm)`: the Euclidean projection of `x` onto the ball around `x0`
  intersected with the image box [0, 1]^d. For L_inf it is the coordinate-wise clamp. For L2 it is
  exact too: the KKT conditions of min ||y - x||^2 s.t. ||y - x0||_2^2 <= epsilon^2, y in
  [0, 1]^d separate over coordinates, y_i = clamp(x0_i + t (x_i - x0_i), 0, 1) with
  t = 1 / (1 + lambda) in (0, 1]; ||y(t) - x0|| grows with t, so t is found by bisection (the
  feasible end is kept: the budget always holds).
- `step_direction(d, norm)`: the steepest-ascent unit step, sign(d) for L_inf and d / ||d||_2 per
  sample for L2 (a zero direction stays zero).

Random draws: every function draws on `generator`'s device (or `device`) in `dtype`, L_inf with
one `rand` of the full shape, L2 with one `randn` of the full shape followed by one `rand` of one
value per row, so a seeded caller gets the same points whichever function it goes through. With
`like`, the raw draws are moved to its device and dtype before they are scaled (a caller that
draws on the CPU in float32 for reproducibility computes the offset in its images' precision).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from robust_train.core.validation import check_choice

__all__ = [
    "NORMS",
    "per_sample_norm",
    "project",
    "project_offset",
    "random_in_ball",
    "random_offset",
    "random_on_sphere",
    "step_direction",
]

NORMS = ("linf", "l2")
_BISECTION_STEPS = 50  # t to 2**-50: far below float32 resolution of the pixels
_TINY_LENGTH = 1e-30  # below any length a float32 Gaussian draw or a gradient step has
_TINY_RADIUS = 1e-12


def per_sample_norm(t: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm of each row flattened, shape (B,).

    Examples:
        >>> per_sample_norm(torch.tensor([[3.0, 4.0], [1.0, 0.0]])).tolist()
        [5.0, 1.0]
    """
    return t.flatten(1).norm(p=p, dim=1)


def _rows(v: Tensor, like: Tensor) -> Tensor:
    """(B,) -> (B, 1, 1, ...) to broadcast against `like`."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def random_on_sphere(
    shape: Sequence[int],
    radius: float | Tensor,
    generator: torch.Generator | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    like: Tensor | None = None,
) -> Tensor:
    """Offsets of L2 length `radius` per row (a float or a broadcastable tensor), uniform in
    direction, shape `shape`, drawn on `device` (default: the generator's) in `dtype` and moved
    to `like`'s device and dtype when it is given.

    Examples:
        >>> d = random_on_sphere((2, 1, 3, 3), 0.5, torch.Generator().manual_seed(0))
        >>> [round(v, 4) for v in per_sample_norm(d).tolist()]
        [0.5, 0.5]
    """
    device = generator.device if device is None and generator is not None else device
    gauss = _moved(torch.randn(tuple(shape), generator=generator, device=device, dtype=dtype), like)
    return _to_length(gauss, radius)


def random_offset(
    shape: Sequence[int],
    radius: float,
    norm: str,
    generator: torch.Generator | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    like: Tensor | None = None,
) -> Tensor:
    """A uniform random offset of the `norm` ball of `radius` for every row of `shape`, drawn on
    `device` (default: the generator's, else the default device) in `dtype`.

    Args:
        shape: (B, ...) of the offsets; each row is one draw.
        radius: radius of the ball (>= 0).
        norm: "linf" or "l2".
        generator: random number generator (None: the global one of `device`).
        device: where the numbers are drawn.
        dtype: dtype of the draw (default: torch's default dtype).
        like: when given, the draws are moved to its device and dtype before they are scaled.

    Returns:
        Offsets of shape `shape` (on `like`'s device and in its dtype when it is given).

    Raises:
        ValueError: `norm` is not one of `NORMS`.

    Examples:
        >>> d = random_offset((4, 1, 3, 3), 0.2, "linf", torch.Generator().manual_seed(0))
        >>> bool((d.abs() <= 0.2).all()), d.shape
        (True, torch.Size([4, 1, 3, 3]))
    """
    check_choice(norm, "norm", NORMS)
    device = generator.device if device is None and generator is not None else device
    if norm == "linf":
        u = _moved(torch.rand(tuple(shape), generator=generator, device=device, dtype=dtype), like)
        return (2 * u - 1) * radius
    gauss = torch.randn(tuple(shape), generator=generator, device=device, dtype=dtype)
    u = torch.rand((gauss.shape[0],), generator=generator, device=device, dtype=dtype)
    gauss, u = _moved(gauss, like), _moved(u, like)
    lengths = radius * u.pow(1.0 / gauss[0].numel())
    return _to_length(gauss, _rows(lengths, gauss))


def _moved(draw: Tensor, like: Tensor | None) -> Tensor:
    return draw if like is None else draw.to(like)


def _to_length(gauss: Tensor, radius: float | Tensor) -> Tensor:
    """Gaussian rows `gauss` scaled to L2 length `radius` (their directions are uniform)."""
    return radius * gauss / _rows(per_sample_norm(gauss).clamp_min(_TINY_LENGTH), gauss)


def random_in_ball(x0: Tensor, epsilon: float, norm: str, generator: torch.Generator) -> Tensor:
    """A uniform random point of the ball around `x0` (drawn on `generator`'s device in `x0`'s
    dtype), clamped to [0, 1].

    Examples:
        >>> x0 = torch.full((3, 1, 4, 4), 0.5)
        >>> x = random_in_ball(x0, 0.2, "l2", torch.Generator().manual_seed(0))
        >>> bool((per_sample_norm(x - x0) <= 0.2 + 1e-6).all())
        True
    """
    delta = random_offset(x0.shape, epsilon, norm, generator, dtype=x0.dtype)
    return (x0 + delta.to(x0.device)).clamp(0, 1)


def project_offset(delta: Tensor, radius: float, norm: str) -> Tensor:
    """`delta` pulled back into the `norm` ball of `radius` (L_inf: clamped per value; L2: each row
    longer than `radius` rescaled to length `radius`).

    Examples:
        >>> d = torch.tensor([[3.0, 4.0], [0.1, 0.0]])
        >>> [[round(v, 4) for v in row] for row in project_offset(d, 1.0, "l2").tolist()]
        [[0.6, 0.8], [0.1, 0.0]]
        >>> [[round(v, 4) for v in row] for row in project_offset(d, 1.0, "linf").tolist()]
        [[1.0, 1.0], [0.1, 0.0]]
    """
    check_choice(norm, "norm", NORMS)
    if norm == "linf":
        return delta.clamp(-radius, radius)
    scale = (radius / per_sample_norm(delta).clamp_min(_TINY_RADIUS)).clamp(max=1.0)
    return delta * _rows(scale, delta)


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
    inside = _rows(per_sample_norm(delta.clamp(-x0, 1 - x0)), x) <= epsilon
    lo = torch.zeros_like(_rows(per_sample_norm(delta), x))
    hi = torch.ones_like(lo)
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        fits = _rows(per_sample_norm((x0 + mid * delta).clamp(0, 1) - x0), x) <= epsilon
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
    return direction / _rows(per_sample_norm(direction).clamp_min(_TINY_LENGTH), direction)
