"""Building blocks of mask-based explanations: Gaussian blur, total variation, upsampling,
jitter."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def gaussian_blur(images: Tensor, sigma: float) -> Tensor:
    """Separable Gaussian blur of (B, C, H, W) images, replicate padding, radius round(4 sigma).

    Matches `scipy.ndimage.gaussian_filter(..., mode="nearest", truncate=4.0)` per channel.

    Examples:
        >>> img = torch.zeros(1, 1, 9, 9); img[0, 0, 4, 4] = 1.0
        >>> blurred = gaussian_blur(img, 1.0)
        >>> round(float(blurred.sum()), 4), round(float(blurred.max()), 4)
        (1.0, 0.1592)
    """
    if sigma <= 0:
        return images
    radius = max(1, int(4.0 * sigma + 0.5))
    offsets = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    kernel = torch.exp(-0.5 * (offsets / sigma) ** 2)
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    out = F.pad(images, (radius, radius, radius, radius), mode="replicate")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(channels, 1, 1, -1), groups=channels)
    return F.conv2d(out, kernel.view(1, 1, -1, 1).expand(channels, 1, -1, 1), groups=channels)


def total_variation(masks: Tensor, beta: float) -> Tensor:
    """Per-mask `sum_u |m(u) - m(u + e_y)|^beta + |m(u) - m(u + e_x)|^beta`, shape (B,).

    Fong & Vedaldi (2017) regulariser that favours smooth, blob-like masks.

    Examples:
        >>> m = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]])
        >>> total_variation(m, 3.0).tolist()
        [2.0]
    """
    dy = (masks[:, :, 1:, :] - masks[:, :, :-1, :]).abs().pow(beta)
    dx = (masks[:, :, :, 1:] - masks[:, :, :, :-1]).abs().pow(beta)
    return dy.flatten(1).sum(1) + dx.flatten(1).sum(1)


def upsample(masks: Tensor, size: tuple[int, int]) -> Tensor:
    """Bilinear upsampling of (B, 1, h, w) masks to `size` (identity when already that size)."""
    if tuple(masks.shape[-2:]) == tuple(size):
        return masks
    return F.interpolate(masks, size=size, mode="bilinear", align_corners=False)


def shift(images: Tensor, dy: int, dx: int) -> Tensor:
    """Translate images by (dy, dx) pixels, filling the border by replication."""
    if dy == 0 and dx == 0:
        return images
    pad = max(abs(dy), abs(dx))
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    height, width = images.shape[-2:]
    top, left = pad - dy, pad - dx
    return padded[:, :, top : top + height, left : left + width]


def mask_size(height: int, width: int, mask_scale: float, min_mask_size: int) -> tuple[int, int]:
    """Mask resolution: `round(side * mask_scale)`, at least `min_mask_size`, at most the side.

    Examples:
        >>> mask_size(224, 224, 1 / 8, 8), mask_size(32, 32, 1 / 8, 8), mask_size(8, 8, 1 / 8, 8)
        ((28, 28), (8, 8), (8, 8))
    """
    return (
        min(height, max(min_mask_size, round(height * mask_scale))),
        min(width, max(min_mask_size, round(width * mask_scale))),
    )
