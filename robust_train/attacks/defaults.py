"""Attack defaults that depend on the image size, defined once for the attack, the evaluation
suite and the monitors.

- epsilon: 0.1 (pixel units) up to 28 px (8x8 digits, MNIST), else 8/255 (CIFAR-10 and larger);
- k: an eighth of the pixels, at least 1 (8 for 8x8 digits, 98 for 28x28, 128 for 32x32);
- target region of the targeted attack: the top-left quarter of the image.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["default_epsilon", "default_k", "target_region"]


def default_epsilon(height: int, width: int) -> float:
    """L_inf budget: 0.1 for images up to 28 px a side, else 8/255.

    Examples:
        >>> default_epsilon(8, 8), round(default_epsilon(32, 32), 4)
        (0.1, 0.0314)
    """
    return 0.1 if max(height, width) <= 28 else 8 / 255


def default_k(height: int, width: int) -> int:
    """Top-k size: an eighth of the pixels, at least 1.

    Examples:
        >>> default_k(8, 8), default_k(28, 28), default_k(2, 2)
        (8, 98, 1)
    """
    return max(1, (height * width) // 8)


def target_region(height: int, width: int) -> Tensor:
    """Default region of the targeted attack: the top-left quarter of the image, (1, H, W) bool.

    Examples:
        >>> target_region(4, 4).int()[0]
        tensor([[1, 1, 0, 0],
                [1, 1, 0, 0],
                [0, 0, 0, 0],
                [0, 0, 0, 0]], dtype=torch.int32)
    """
    region = torch.zeros(1, height, width, dtype=torch.bool)
    region[:, : max(1, height // 2), : max(1, width // 2)] = True
    return region
