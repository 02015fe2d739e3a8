"""From explanations (B, C, H, W) to importance maps (B, H, W), and their normalisation."""

from __future__ import annotations

import torch  # noqa: F401  (used by the doctests)
from torch import Tensor

from robust_train.core.validation import check_choice


def importance_map(explanation: Tensor) -> Tensor:
    """Per-pixel importance `sum_c |E_c|` (Ghorbani et al. 2019), shape (B, H, W).

    A (B, 1, H, W) mask (meaningful perturbation) or an already reduced (B, H, W) map is accepted.
    Differentiable (the subgradient of |.| at 0 is 0).

    Examples:
        >>> importance_map(torch.tensor([[[[1.0, -2.0]], [[-3.0, 0.5]]]])).tolist()
        [[[4.0, 2.5]]]
    """
    if explanation.dim() == 3:
        return explanation.abs()
    if explanation.dim() != 4:
        raise ValueError(
            "`explanation` must have shape (B, C, H, W) or (B, H, W), "
            f"got shape {tuple(explanation.shape)}"
        )
    return explanation.abs().sum(dim=1)


def normalize_map(maps: Tensor, method: str = "sum", eps: float = 1e-12) -> Tensor:
    """Normalise each (H, W) map so maps of different scale can be compared.

    Args:
        maps: non-negative importance maps (B, H, W).
        method: "sum" (each map sums to 1), "max" (max 1, as Quantus normalises), or "none".
        eps: guards the division for an all-zero map.

    Examples:
        >>> normalize_map(torch.tensor([[[1.0, 3.0]]])).tolist()
        [[[0.25, 0.75]]]
    """
    check_choice(method, "method", ("sum", "max", "none"))
    if method == "none":
        return maps
    flat = maps.flatten(1)
    scale = flat.sum(1) if method == "sum" else flat.abs().amax(1)
    return maps / (scale.clamp_min(eps)).view(-1, *([1] * (maps.dim() - 1)))


def flat_importance(maps: Tensor) -> Tensor:
    """(B, H, W) -> (B, H*W), row-major, used by rank metrics and perturbation curves.

    Examples:
        >>> flat_importance(torch.arange(8.0).view(2, 2, 2)).tolist()
        [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    """
    return maps.reshape(maps.shape[0], -1)


__all__ = ["importance_map", "normalize_map", "flat_importance"]
