"""A small, cheap CNN for 8x8 digits and 28x28 (Fashion-)MNIST.

Cheap on purpose: explanation penalties backpropagate through the input gradient (double
backprop), which costs about three forward passes per step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from robust_train.core.validation import check_positive_ints, check_probability
from robust_train.models.config import RecordsConfig
from robust_train.models.normalize import Normalize

__all__ = ["SmallCNN"]


class SmallCNN(RecordsConfig, nn.Module):
    """Normalize -> 3 x (conv3x3 [-> BatchNorm] -> ReLU) with 2x2 average pools -> pool -> linear.

    Widths are `width, width, 2*width`. There are `1 + floor(log2(input_size / 8))` 2x2 average
    pools (1 to 3): after the second convolution, then after the first, then after the third; so
    8x8 digits end on a 4x4 map, 28x28 MNIST on 7x7 and 32x32 images on 4x4. An adaptive average
    pool to `pool_size` x `pool_size` and a linear layer follow. `pool_size=1` is a global pool; the
    default 4 keeps the spatial layout (the design notes say why).
    Activations are `nn.ReLU` modules (not inplace), so `softplus()` can swap them.

    Args:
        in_channels: image channels.
        num_classes: number of outputs (logits).
        input_size: the (larger) side of the input images; sets the number of pools only, any
            size is accepted thanks to the adaptive pool.
        width: channels of the first two convolutions (the third has `2 * width`).
        mean, std: normalisation statistics (a number or one per channel); None means 0 and 1
            (no shift or scale; the Normalize layer is kept so every model has one).
        dropout: dropout probability before the linear layer.
        batchnorm: add BatchNorm2d after every convolution.
        pool_size: side of the map the adaptive pool produces before the linear layer.

    Examples:
        >>> import torch
        >>> SmallCNN(width=8)(torch.rand(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        input_size: int = 8,
        width: int = 32,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        dropout: float = 0.0,
        batchnorm: bool = False,
        pool_size: int = 4,
    ):
        super().__init__()
        check_positive_ints(
            in_channels=in_channels,
            num_classes=num_classes,
            input_size=input_size,
            width=width,
            pool_size=pool_size,
        )
        check_probability(dropout, "dropout")
        self.normalize = Normalize.for_channels(mean, std, in_channels)
        n_pools = 1 + max(0, int(math.floor(math.log2(max(input_size, 8) / 8))))
        pool_after = {1, 0, 2} if n_pools >= 3 else ({1, 0} if n_pools == 2 else {1})
        layers: list[nn.Module] = []
        cin = in_channels
        for i, cout in enumerate((width, width, 2 * width)):
            layers.append(nn.Conv2d(cin, cout, 3, padding=1, bias=not batchnorm))
            if batchnorm:
                layers.append(nn.BatchNorm2d(cout))
            layers.append(nn.ReLU())
            if i in pool_after:
                layers.append(nn.AvgPool2d(2))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(pool_size), nn.Flatten())
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(cin * pool_size * pool_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.dropout(self.pool(self.features(self.normalize(x)))))
