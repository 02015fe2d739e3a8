"""The CNN of the attributional-robustness papers for 28x28 digits, with adjustable widths.

RAR (Chen et al. 2019, arXiv 1905.09957) and Madry et al. (2018) train on MNIST a network of
conv5x5-32, 2x2 max-pool, conv5x5-64, 2x2 max-pool, FC 1024, FC 10 (3.3M parameters, 13 MB in
float32). The same layout with narrower layers (`channels`, `hidden`) costs less per step on a
CPU, which the inner loops of the literature's methods need.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from robust_train.core.validation import check_positive, check_positive_ints, check_probability
from robust_train.models.config import RecordsConfig
from robust_train.models.normalize import Normalize

__all__ = ["MNISTConvNet"]


class MNISTConvNet(RecordsConfig, nn.Module):
    """Normalize -> conv5x5-c1 -> ReLU -> maxpool2 -> conv5x5-c2 -> ReLU -> maxpool2 -> FC hidden
    -> ReLU [-> dropout] -> FC num_classes ("same" padding, so 28x28 ends on 7x7).

    `MNISTConvNet(channels=(32, 64), hidden=1024)` is the RAR / Madry architecture. Activations are
    separate, non-inplace `nn.ReLU` modules, so `robust_train.models.softplus` can swap them.

    Args:
        in_channels: image channels.
        num_classes: number of logits.
        input_size: side of the (square) input, a multiple of 4.
        channels: output channels of the two convolutions.
        hidden: width of the hidden fully connected layer.
        mean, std: normalisation statistics (None: 0 and 1).
        dropout: dropout probability before the last layer.

    Examples:
        >>> import torch
        >>> net = MNISTConvNet(channels=(8, 16), hidden=64)
        >>> net(torch.rand(2, 1, 28, 28)).shape
        torch.Size([2, 10])
        >>> sum(p.numel() for p in MNISTConvNet().parameters())
        3274634
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        input_size: int = 28,
        channels: Sequence[int] = (32, 64),
        hidden: int = 1024,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_positive_ints(
            in_channels=in_channels, num_classes=num_classes, input_size=input_size, hidden=hidden
        )
        if input_size % 4:
            raise ValueError(f"`input_size` must be a multiple of 4, got {input_size!r}")
        widths = tuple(channels)
        if len(widths) != 2:
            raise ValueError(f"`channels` must hold two widths, got {channels!r}")
        for width in widths:
            check_positive(width, "channels", integer=True)
        check_probability(dropout, "dropout")
        self.normalize = Normalize.for_channels(mean, std, in_channels)
        c1, c2 = widths
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        side = input_size // 4
        self.hidden = nn.Sequential(
            nn.Linear(c2 * side * side, hidden), nn.ReLU(), nn.Dropout(dropout)
        )
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.hidden(self.features(self.normalize(x))))
