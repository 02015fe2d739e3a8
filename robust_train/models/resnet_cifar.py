"""ResNet-18 for 32x32 images (He et al., "Deep Residual Learning for Image Recognition",
CVPR 2016).

The CIFAR variant: a 3x3 stride-1 stem and no max pool, so the four stages run at 32, 16, 8 and 4
pixels. Every activation is its own non-inplace `nn.ReLU` module: `softplus()` finds all of them,
and double backprop (gradient penalties) never meets a tensor that an inplace op overwrote.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from robust_train.core.validation import check_positive_ints
from robust_train.models.config import RecordsConfig
from robust_train.models.normalize import CIFAR10_MEAN, CIFAR10_STD, Normalize, channel_stats

__all__ = ["ResNet18CIFAR", "BasicBlock"]


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the (projected) input, then ReLU."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class ResNet18CIFAR(RecordsConfig, nn.Module):
    """CIFAR-style ResNet-18 with the normalisation as its first layer.

    Args:
        num_classes: number of outputs (logits).
        in_channels: image channels.
        mean, std: normalisation statistics (a number or one per channel); None means the CIFAR-10
            training-set statistics (averaged over RGB when `in_channels` is not 3).
        width: channels of the first stage (64 in the paper; the stages use 1, 2, 4, 8 times it).
            Smaller widths make cheap test models.

    Examples:
        >>> import torch
        >>> ResNet18CIFAR(width=4)(torch.rand(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self,
        num_classes: int = 10,
        in_channels: int = 3,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        width: int = 64,
    ):
        super().__init__()
        check_positive_ints(num_classes=num_classes, in_channels=in_channels, width=width)
        self.normalize = Normalize(
            channel_stats(CIFAR10_MEAN if mean is None else mean, in_channels),
            channel_stats(CIFAR10_STD if std is None else std, in_channels),
        )
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        stages = []
        in_planes = width
        for i, stride in enumerate((1, 2, 2, 2)):
            planes = width * 2**i
            stages.append(
                nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1))
            )
            in_planes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(in_planes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(self.normalize(x))))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(self.pool(out))
