"""What replaces removed pixels in perturbation curves: constant, blurred, noise or imputed values.

Noisy linear imputation follows ROAD (Rong et al., "A Consistent and Efficient Evaluation Strategy
for Attribution Methods", ICML 2022): every removed pixel takes the weighted mean of its 8
neighbours (weight 1/6 for the 4 direct, 1/12 for the 4 diagonal neighbours, only neighbours
inside the image count), kept pixels are fixed, then Gaussian noise is added. The linear system is
the graph Laplacian of the removed pixels with the kept ones as boundary values; it is symmetric
positive semi-definite, so it is solved matrix-free, for every image and channel at once, by
conjugate gradients with shifted sums. A removed region that touches no kept pixel keeps the
starting value (the clean image's channel mean).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from robust_train.core.runtime import generator_device

__all__ = ["constant_fill", "linear_imputation", "gaussian_blur"]


def constant_fill(
    inputs: Tensor,
    perturbation: str,
    *,
    mean: Tensor | float | None,
    blur_sigma: float,
    generator: torch.Generator | None,
) -> Tensor:
    """Per-image replacement values (B, C, H, W) for "mean", "zero", "blur" and "noise".

    "mean": the image's own per-channel mean, or `mean` (a float or a (C,) dataset mean);
    "noise": uniform U(0, 1) values drawn once per image (shared by all steps and both orders).
    For "imputation" the channel means are returned (the solver's starting values).
    """
    if perturbation == "zero":
        return torch.zeros_like(inputs)
    if perturbation == "blur":
        return gaussian_blur(inputs, blur_sigma)
    if perturbation == "noise":
        device = generator_device(generator, inputs.device)
        noise = torch.rand(inputs.shape, generator=generator, device=device, dtype=inputs.dtype)
        return noise.to(inputs.device)
    if perturbation == "mean" and mean is not None:
        value = torch.as_tensor(mean, dtype=inputs.dtype, device=inputs.device).reshape(1, -1, 1, 1)
        return value.expand_as(inputs)
    return inputs.mean(dim=(2, 3), keepdim=True).expand_as(inputs)


def gaussian_blur(images: Tensor, sigma: float) -> Tensor:
    """Separable Gaussian blur with replicated borders (kernel radius ceil(3 sigma)).

    Examples:
        >>> x = torch.zeros(1, 1, 7, 7); x[0, 0, 3, 3] = 1.0
        >>> y = gaussian_blur(x, 1.0)
        >>> round(float(y.sum()), 4), bool(y[0, 0, 3, 3] < 1)
        (1.0, True)
    """
    radius = max(1, math.ceil(3 * sigma))
    offsets = torch.arange(-radius, radius + 1, device=images.device, dtype=images.dtype)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    padded = F.pad(images, (radius, radius, radius, radius), mode="replicate")
    rows = F.conv2d(padded, kernel.view(1, 1, -1, 1).repeat(channels, 1, 1, 1), groups=channels)
    return F.conv2d(rows, kernel.view(1, 1, 1, -1).repeat(channels, 1, 1, 1), groups=channels)


def _neighbour_sum(v: Tensor) -> Tensor:
    """Weighted sum over the 8 neighbours inside the image: 1/6 direct, 1/12 diagonal."""
    p = F.pad(v, (1, 1, 1, 1))
    direct = p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:]
    diagonal = p[..., :-2, :-2] + p[..., :-2, 2:] + p[..., 2:, :-2] + p[..., 2:, 2:]
    return direct / 6.0 + diagonal / 12.0


def linear_imputation(
    images: Tensor,
    missing: Tensor,
    start: Tensor,
    *,
    max_iter: int | None = None,
    tol: float = 1e-6,
) -> Tensor:
    """ROAD linear imputation (without noise) of the `missing` pixels of every image.

    Args:
        images: (R, C, H, W); the values at missing pixels are ignored.
        missing: bool (R, 1, H, W), True where a pixel is removed (all channels).
        start: starting values broadcastable to (R, C, 1, 1).
        max_iter: conjugate-gradient iterations (default 4 * (H + W)).
        tol: stop when every residual norm is below `tol` times the larger of its right-hand
            side norm and sqrt(number of removed pixels) (an RMS floor: a right-hand side of
            zeros, as on a black background, has no relative scale).

    Returns:
        (R, C, H, W): `images` with the missing pixels replaced by the imputed values.

    Examples:
        >>> x = torch.tensor([[[[0.0, 9.0, 1.0]]]])
        >>> m = torch.tensor([[[[False, True, False]]]])
        >>> linear_imputation(x, m, torch.zeros(1, 1, 1, 1)).tolist()
        [[[[0.0, 0.5, 1.0]]]]
    """
    r, c, h, w = images.shape
    mask = missing.expand(r, c, h, w).reshape(r * c, 1, h, w).to(images.dtype)
    known = images.reshape(r * c, 1, h, w) * (1 - mask)
    degree = _neighbour_sum(torch.ones_like(mask[:1]))

    def operator(v: Tensor) -> Tensor:
        return mask * (degree * v - _neighbour_sum(mask * v))

    def dot(a: Tensor, b: Tensor) -> Tensor:
        return (a * b).flatten(1).sum(1).view(-1, 1, 1, 1)

    rhs = mask * _neighbour_sum(known)
    x = mask * start.expand(r, c, 1, 1).reshape(r * c, 1, 1, 1)
    residual = rhs - operator(x)
    direction = residual
    rs = dot(residual, residual)
    threshold = (tol**2) * torch.maximum(dot(rhs, rhs), mask.flatten(1).sum(1).view(-1, 1, 1, 1))
    for _ in range(4 * (h + w) if max_iter is None else max_iter):
        active = rs > threshold  # converged systems stop moving: results do not depend on chunks
        if not bool(active.any()):
            break
        applied = operator(direction)
        curvature = dot(direction, applied)
        alpha = torch.where(active & (curvature > 0), rs / curvature.clamp_min(1e-30), 0.0)
        x = x + alpha * direction
        residual = residual - alpha * applied
        rs_new = dot(residual, residual)
        beta = torch.where(rs > 0, rs_new / rs.clamp_min(1e-30), 0.0)
        direction = residual + beta * direction
        rs = rs_new
    return (known + mask * x).reshape(r, c, h, w)
