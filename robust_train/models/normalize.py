"""Per-channel normalisation as a layer, so that models take [0, 1] images.

Keeping normalisation inside the model puts attack budgets, perturbations and explanation maps in
pixel units, and makes a checkpoint self-contained (the statistics are buffers in its state dict).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["Normalize", "channel_stats"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def channel_stats(values: float | Sequence[float], in_channels: int) -> list[float]:
    """Broadcast per-channel statistics to `in_channels` entries.

    A single number is repeated; a sequence of the right length is kept; a 3-channel (RGB)
    statistic is averaged when the model takes another number of channels (e.g. grayscale).

    Examples:
        >>> channel_stats(0.5, 3)
        [0.5, 0.5, 0.5]
        >>> channel_stats((0.25, 0.5, 0.75), 1)
        [0.5]
    """
    if isinstance(values, (int, float)):
        return [float(values)] * in_channels
    vals = [float(v) for v in values]
    if len(vals) == in_channels:
        return vals
    if len(vals) == 3 or len(vals) == 1:
        return [sum(vals) / len(vals)] * in_channels
    raise ValueError(
        f"statistics {vals!r} have {len(vals)} entries; the model takes {in_channels} channel(s)"
    )


class Normalize(nn.Module):
    """`(x - mean) / std` per channel; mean and std are (persistent) buffers.

    Args:
        mean: one number, or one per channel.
        std: one number, or one per channel; every entry > 0.

    Examples:
        >>> norm = Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])
        >>> norm(torch.ones(1, 3, 2, 2)).unique().tolist()
        [2.0]
    """

    mean: Tensor
    std: Tensor

    @classmethod
    def for_channels(
        cls,
        mean: float | Sequence[float] | None,
        std: float | Sequence[float] | None,
        in_channels: int,
    ) -> Normalize:
        """A model's input normalisation: `mean` / `std` broadcast to `in_channels`
        (`channel_stats`); None: 0 / 1 (the identity).

        Examples:
            >>> Normalize.for_channels(None, 0.5, 2).std.tolist()
            [0.5, 0.5]
        """
        return cls(
            channel_stats(0.0 if mean is None else mean, in_channels),
            channel_stats(1.0 if std is None else std, in_channels),
        )

    def __init__(self, mean: float | Sequence[float], std: float | Sequence[float]):
        super().__init__()
        mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        std_t = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        if mean_t.numel() == 0 or std_t.numel() == 0:
            raise ValueError(f"`mean` and `std` must not be empty, got mean={mean!r}, std={std!r}")
        if mean_t.numel() != std_t.numel() and min(mean_t.numel(), std_t.numel()) != 1:
            raise ValueError(
                f"`mean` and `std` must have the same length, got mean={mean!r}, std={std!r}"
            )
        if not all(math.isfinite(v) for v in mean_t.tolist()):
            raise ValueError(f"`mean` must be finite, got {mean!r}")
        if not all(math.isfinite(v) and v > 0 for v in std_t.tolist()):
            raise ValueError(f"`std` must be finite and > 0 in every channel, got {std!r}")
        n = max(mean_t.numel(), std_t.numel())
        self.register_buffer("mean", mean_t.expand(n).clone())
        self.register_buffer("std", std_t.expand(n).clone())

    def forward(self, x: Tensor) -> Tensor:
        n = self.mean.numel()
        if x.dim() < 2 or (n > 1 and x.shape[1] != n):
            raise ValueError(
                f"Normalize holds statistics for {n} channel(s) but got input of shape "
                f"{tuple(x.shape)}"
            )
        shape = (1, n) + (1,) * (x.dim() - 2)
        return (x - self.mean.view(shape)) / self.std.view(shape)

    def extra_repr(self) -> str:
        mean = [round(v, 4) for v in self.mean.tolist()]
        std = [round(v, 4) for v in self.std.tolist()]
        return f"mean={mean}, std={std}"
