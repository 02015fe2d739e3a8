"""Random draws shared by the explainers that multiply the batch (SmoothGrad, perturbation).

Chunking, generators and the gradient guard live in `robust_train.core.runtime`, defined once for
the whole package.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["randint_pair", "randn_like_rows"]


def randn_like_rows(
    shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor
) -> Tensor:
    """Standard normal numbers of `shape`, drawn from `generator` (or the global generator).

    Drawn on the generator's device and moved to `like`'s device and dtype, so a CPU generator
    can drive a computation on an accelerator.

    Examples:
        >>> randn_like_rows((2, 3), torch.manual_seed(0), torch.zeros(1)).shape
        torch.Size([2, 3])
    """
    device = like.device if generator is None else generator.device
    z = torch.randn(shape, generator=generator, device=device, dtype=like.dtype)
    return z.to(like.device)


def randint_pair(high: int, generator: torch.Generator | None) -> tuple[int, int]:
    """Two integers in [0, high), e.g. a random (dy, dx) shift.

    Examples:
        >>> all(0 <= v < 3 for v in randint_pair(3, torch.manual_seed(0)))
        True
    """
    device = torch.device("cpu") if generator is None else generator.device
    values = torch.randint(0, high, (2,), generator=generator, device=device)
    return int(values[0]), int(values[1])
