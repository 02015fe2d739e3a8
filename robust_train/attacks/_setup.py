"""Argument checks and restart seeds of the attacks (the softplus surrogate and its diagnosis are
`robust_train.models.softplus.smooth_relus` / `zero_direction_cause`)."""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.core.runtime import make_generator


def check_k(k: object, name: str, height: int, width: int) -> int:
    """Raise unless `k` is an int in [1, H*W]; name the map size in the error.

    Examples:
        >>> check_k(3, "k", 2, 2)
        3
    """
    n = height * width
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(
            f"`{name}` must be an int in [1, H*W] = [1, {n}] for {height}x{width} images, got {k!r}"
        )
    return k


def check_region(region: object, batch: int, height: int, width: int) -> Tensor:
    """Check a target region: bool (B, H, W) or (1, H, W), at least one pixel set per image."""
    if not isinstance(region, Tensor) or region.dtype != torch.bool:
        kind = f"dtype {region.dtype}" if isinstance(region, Tensor) else type(region).__name__
        raise TypeError(f"`target_region` must be a bool tensor (B or 1, H, W), got {kind}")
    if (
        region.dim() != 3
        or region.shape[0] not in (1, batch)
        or region.shape[1:] != (height, width)
    ):
        raise ValueError(
            f"`target_region` must have shape ({batch} or 1, {height}, {width}), "
            f"got {tuple(region.shape)}"
        )
    empty = ~region.flatten(1).any(1)
    if bool(empty.any()):
        raise ValueError(
            f"`target_region` has no pixel set for image(s) {empty.nonzero().flatten().tolist()}"
        )
    return region.expand(batch, height, width)


def restart_seeds(
    generator: torch.Generator | None, seed: int | None, n_restarts: int
) -> list[int]:
    """One seed per restart, drawn up front, so restart r draws the same numbers for any n_steps.

    Examples:
        >>> restart_seeds(None, 0, 2) == restart_seeds(None, 0, 2)
        True
    """
    generator = make_generator(generator, seed, "cpu")
    device = "cpu" if generator is None else generator.device
    draws = torch.randint(0, 2**62, (n_restarts,), generator=generator, device=device)
    return [int(s) for s in draws]
