"""A torchvision ResNet with a stem for small images (28x28 digits, 32x32 CIFAR).

torchvision's ResNet stem (a 7x7 convolution of stride 2 and a 3x3 max-pool of stride 2) divides
the side by 4 before the first block, for 224x224 ImageNet images. On a 28x28 digit the blocks
then run at 7, 4, 2 and 1 pixels a side: `layer4` ends on 1x1, where Grad-CAM's map is constant.
He et al. (CVPR 2016, section 4.2) start their CIFAR networks with one 3x3 convolution of stride
1 and no pool instead, which keeps the image's full resolution through the first stage at about
16 times the block FLOPs. `SmallInputResNet` offers three stems (`STEMS`):

- "torchvision": unchanged (28 -> 7 at layer1, 1x1 at layer4);
- "3x3_pool": a 3x3 convolution of stride 1, then torchvision's max-pool (28 -> 14 at layer1,
  2x2 at layer4), a quarter of the blocks' FLOPs of "3x3";
- "3x3": a 3x3 convolution of stride 1, no pool (28 -> 28 at layer1, 4x4 at layer4; the CIFAR
  stem).

The blocks, the head and the normalisation are torchvision's (`TorchvisionClassifier`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from robust_train.core.validation import check_choice
from robust_train.models.torchvision_model import TorchvisionClassifier

__all__ = ["STEMS", "SmallInputResNet"]

STEMS = ("torchvision", "3x3_pool", "3x3")


class SmallInputResNet(TorchvisionClassifier):
    """A torchvision ResNet (ResNet, ResNeXt, Wide ResNet) whose stem suits small images.

    The stem's convolution becomes a 3x3 convolution of stride 1 and padding 1 with the same
    widths (no bias: a BatchNorm follows), and with `stem="3x3"` the max-pool becomes an
    `nn.Identity` (module doc). With `weights` the blocks and the head load their pretrained
    values and a replaced stem convolution starts from a random initialisation (torchvision's
    kaiming-normal, fan-out).

    Args:
        name: a torchvision ResNet-family name ("resnet18", "resnet50", "resnext50_32x4d",
            "wide_resnet50_2", ...).
        num_classes: number of outputs.
        in_channels: as `TorchvisionClassifier` (1: the gray channel is repeated to RGB).
        stem: one of `STEMS`.
        weights, weights_path, load_weights, trust_weights_path, model_kwargs: as
            `TorchvisionClassifier`.

    Examples:
        >>> import torch
        >>> net = SmallInputResNet("resnet18", num_classes=10, in_channels=1, stem="3x3_pool")
        >>> net(torch.rand(2, 1, 28, 28)).shape
        torch.Size([2, 10])
        >>> tuple(net.backbone.conv1.kernel_size), type(net.backbone.maxpool).__name__
        ((3, 3), 'MaxPool2d')
    """

    def __init__(
        self,
        name: str = "resnet18",
        num_classes: int = 10,
        in_channels: int = 1,
        stem: str = "3x3_pool",
        weights: str | None = None,
        weights_path: str | None = None,
        load_weights: bool = True,
        model_kwargs: Mapping[str, Any] | None = None,
        trust_weights_path: bool = False,
    ) -> None:
        check_choice(stem, "stem", STEMS)
        super().__init__(
            name=name,
            num_classes=num_classes,
            weights=weights,
            in_channels=in_channels,
            weights_path=weights_path,
            load_weights=load_weights,
            model_kwargs=model_kwargs,
            trust_weights_path=trust_weights_path,
        )
        backbone = self.backbone
        conv = getattr(backbone, "conv1", None)
        if not isinstance(conv, nn.Conv2d) or not hasattr(backbone, "maxpool"):
            raise ValueError(
                f"`name` {name!r} is not a ResNet-family torchvision model (a `conv1` convolution "
                "and a `maxpool` stem); SmallInputResNet takes resnet*, resnext* and wide_resnet*"
            )
        self.stem = stem
        if stem == "torchvision":
            return
        small = nn.Conv2d(conv.in_channels, conv.out_channels, 3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(small.weight, mode="fan_out", nonlinearity="relu")
        backbone.conv1 = small
        if stem == "3x3":
            backbone.maxpool = nn.Identity()
