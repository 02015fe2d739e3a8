"""Ground-truth localisation of importance maps: does the map point at the object?

Three measures of an importance map (B, H, W), non-negative (`robust_train.explain.importance_map`
or a Grad-CAM map), against a ground-truth mask of the object (B, H, W), one value per image:

- `relevance_mass_accuracy`: the share of the map's total mass that lies inside the mask
  (Arras, Osman & Samek, "CLEVR-XAI", Information Fusion 2022);
- `relevance_rank_accuracy`: with K the number of mask pixels, the share of the map's K highest
  pixels that lie inside the mask (same paper);
- `pointing_game`: 1 when the map's maximum lies inside the mask, or within `tolerance` pixels
  of it (Zhang et al., "Top-down neural attention by excitation backprop", IJCV 2018, who allow
  15 pixels on their image sizes); a tie for the maximum is a hit when any of the tied pixels is.

Each is 1 for a map that is the mask itself and 0 for a map that is zero on the mask. An image
with an empty mask, or (mass accuracy) an all-zero map, gets NaN: nothing was measured.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from robust_train.core.validation import check_non_negative

__all__ = ["pointing_game", "relevance_mass_accuracy", "relevance_rank_accuracy"]


def _check(maps: Tensor, masks: Tensor) -> tuple[Tensor, Tensor]:
    """Validated (B, H*W) float maps and bool masks."""
    if maps.dim() != 3:
        raise ValueError(f"`maps` must be (B, H, W), got shape {tuple(maps.shape)}")
    if tuple(masks.shape) != tuple(maps.shape):
        raise ValueError(
            f"`masks` must have the shape of `maps` {tuple(maps.shape)}, got {tuple(masks.shape)}"
        )
    if maps.numel() and bool((maps < 0).any()):
        raise ValueError(
            f"`maps` must be non-negative importance maps (min {float(maps.min()):.3g}): "
            "take robust_train.explain.importance_map of a signed explanation"
        )
    return maps.detach().flatten(1).float(), masks.to(maps.device).flatten(1).bool()


def relevance_mass_accuracy(maps: Tensor, masks: Tensor) -> Tensor:
    """Share of each map's mass inside its mask (Arras et al. 2022).

    Args:
        maps: non-negative importance maps (B, H, W).
        masks: ground-truth masks (B, H, W), bool or 0/1.

    Returns:
        (B,) values in [0, 1]; NaN for an empty mask or an all-zero map.

    Raises:
        ValueError: shapes that differ, or a negative map value.

    Examples:
        >>> maps = torch.tensor([[[1.0, 3.0], [0.0, 0.0]]])
        >>> relevance_mass_accuracy(maps, torch.tensor([[[True, False], [False, False]]]))
        tensor([0.2500])
    """
    flat, mask = _check(maps, masks)
    total = flat.sum(1)
    inside = (flat * mask).sum(1)
    undefined = (total == 0) | ~mask.any(1)
    return torch.where(undefined, torch.full_like(total, float("nan")), inside / total)


def relevance_rank_accuracy(maps: Tensor, masks: Tensor) -> Tensor:
    """Share of each map's K highest pixels inside its mask, K the mask's size (Arras et al.
    2022). Ties at the K-th value are broken by `torch.topk`'s order.

    Args:
        maps: non-negative importance maps (B, H, W).
        masks: ground-truth masks (B, H, W), bool or 0/1.

    Returns:
        (B,) values in [0, 1]; NaN for an empty mask.

    Raises:
        ValueError: shapes that differ, or a negative map value.

    Examples:
        >>> maps = torch.tensor([[[4.0, 3.0], [2.0, 1.0]]])
        >>> relevance_rank_accuracy(maps, torch.tensor([[[True, False], [True, False]]]))
        tensor([0.5000])
    """
    flat, mask = _check(maps, masks)
    sizes = mask.sum(1)
    out = torch.full((flat.shape[0],), float("nan"), device=flat.device)
    if flat.numel() == 0:
        return out
    order = torch.sort(flat, dim=1, descending=True, stable=True).indices
    ranked_inside = mask.gather(1, order)
    rank = torch.arange(flat.shape[1], device=flat.device)
    hits = (ranked_inside & (rank[None, :] < sizes[:, None])).sum(1).float()
    measured = sizes > 0
    out[measured] = hits[measured] / sizes[measured].float()
    return out


def pointing_game(maps: Tensor, masks: Tensor, *, tolerance: float = 0.0) -> Tensor:
    """1.0 where each map's maximum falls on its mask, or within `tolerance` pixels (Euclidean)
    of a mask pixel, else 0.0 (Zhang et al. 2018).

    Args:
        maps: non-negative importance maps (B, H, W).
        masks: ground-truth masks (B, H, W), bool or 0/1.
        tolerance: distance in pixels a maximum may lie off the mask and still count.

    Returns:
        (B,) hits (0.0 or 1.0); NaN for an empty mask.

    Raises:
        ValueError: shapes that differ, a negative map value or a negative `tolerance`.

    Examples:
        >>> maps = torch.tensor([[[0.0, 1.0, 0.0, 0.0]]])
        >>> mask = torch.tensor([[[False, False, False, True]]])
        >>> pointing_game(maps, mask), pointing_game(maps, mask, tolerance=2)
        (tensor([0.]), tensor([1.]))
    """
    check_non_negative(tolerance, "tolerance")
    flat, mask = _check(maps, masks)
    if tolerance > 0:
        mask = _dilate(mask.view(masks.shape), tolerance).flatten(1)
    peak = flat == flat.amax(1, keepdim=True) if flat.numel() else flat.bool()
    hits = (peak & mask).any(1).float()
    empty = ~masks.to(flat.device).flatten(1).bool().any(1)
    return torch.where(empty, torch.full_like(hits, float("nan")), hits)


def _dilate(masks: Tensor, radius: float) -> Tensor:
    """Every pixel within `radius` (Euclidean) of a mask pixel, bool (B, H, W)."""
    r = int(radius)
    offsets = torch.arange(-r, r + 1, device=masks.device, dtype=torch.float32)
    disk = (offsets[:, None] ** 2 + offsets[None, :] ** 2) <= radius**2
    kernel = disk.float()[None, None]
    grown = F.conv2d(masks.float()[:, None], kernel, padding=r)
    return grown[:, 0] > 0.5
