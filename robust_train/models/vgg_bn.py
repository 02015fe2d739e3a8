"""A small VGG-style network with BatchNorm for 28x28 digits (Simonyan & Zisserman, ICLR 2015;
BatchNorm: Ioffe & Szegedy, ICML 2015), sized for a CPU.

VGG stacks 3x3 convolutions, each followed by BatchNorm and a ReLU in the `_bn` variants, in
stages that a 2x2 max-pool closes, then fully connected layers on the flattened map. torchvision's
`vgg11_bn` does this with five stages of 64-512 channels and two 4096-wide layers for 224x224
images (129M parameters); on 28x28 digits its five pools leave less than one pixel. `VGGBN` keeps
the layout and scales it down: by default two stages of two convolutions (28 -> 14 -> 7), as many
pools as MNISTConvNet, so the last stage's rectified and pooled 7x7 output is the default layer of
Grad-CAM (`robust_train.explain`), as in MNISTConvNet.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from robust_train.core.validation import check_positive, check_positive_ints, check_probability
from robust_train.models.config import RecordsConfig
from robust_train.models.normalize import Normalize

__all__ = ["VGGBN"]


def _check_stages(stages: Sequence[Sequence[int]], input_size: int) -> list[list[int]]:
    if isinstance(stages, (str, int)) or not stages:
        raise ValueError(f"`stages` must be a non-empty list of lists of widths, got {stages!r}")
    out = []
    for i, stage in enumerate(stages):
        if isinstance(stage, (str, int)) or not stage:
            raise ValueError(f"`stages[{i}]` must be a non-empty list of widths, got {stage!r}")
        for width in stage:
            check_positive(width, f"stages[{i}]", integer=True)
        out.append([int(w) for w in stage])
    if input_size % 2 ** len(out):
        raise ValueError(
            f"`input_size` {input_size} must be a multiple of 2 ** len(stages) = "
            f"{2 ** len(out)} (one 2x2 max-pool per stage)"
        )
    return out


def _global_pool(global_pool: bool | str, side: int) -> list[nn.Module]:
    """The head's pooling modules for `global_pool` over a `side` x `side` map."""
    if global_pool is False:
        return []
    if global_pool is True or global_pool == "avg":
        return [nn.AdaptiveAvgPool2d(1)]
    if global_pool == "max":  # a max-pool module, which the explainers' max-pool rules know
        return [nn.MaxPool2d(side)]
    raise ValueError(f"`global_pool` must be False, True, 'avg' or 'max', got {global_pool!r}")


class VGGBN(RecordsConfig, nn.Module):
    """Normalize -> stages of (conv3x3 -> BatchNorm -> ReLU) x n, each closed by a 2x2 max-pool
    -> flatten -> FC hidden -> ReLU [-> dropout] -> FC num_classes.

    The convolutions have no bias (the BatchNorm after each one has its own shift), "same"
    padding, and every activation is its own non-inplace `nn.ReLU` module, so
    `robust_train.models.softplus` can swap them and LRP merges each BatchNorm into the
    convolution before it. The default (two stages of 32 and 64 channels, hidden 128) has
    0.47M parameters; a 28x28 image ends on 64 x 7 x 7.

    Args:
        in_channels: image channels.
        num_classes: number of logits.
        input_size: side of the (square) input, a multiple of 2 ** len(stages).
        stages: the widths of each stage's convolutions, e.g. ((32, 32), (64, 64)).
        hidden: width of the hidden fully connected layer.
        mean, std: normalisation statistics (None: 0 and 1).
        dropout: dropout probability before the last layer.
        global_pool: reduce the last stage's output over its positions before the fully
            connected layers, instead of flattening it (a head that does not depend on where
            the object is): True or "avg" averages, as ResNet's head; "max" takes each
            channel's maximum (a `nn.MaxPool2d` over the whole map), so a small object on a
            large background is not diluted by the background's positions. False flattens.

    Raises:
        ValueError: a width, size, probability or `global_pool` out of range (named in the
            message).

    Examples:
        >>> import torch
        >>> net = VGGBN(stages=((8,), (16, 16)), hidden=32)
        >>> net(torch.rand(2, 1, 28, 28)).shape
        torch.Size([2, 10])
        >>> sum(p.numel() for p in VGGBN().parameters())
        468010
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        input_size: int = 28,
        stages: Sequence[Sequence[int]] = ((32, 32), (64, 64)),
        hidden: int = 128,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        dropout: float = 0.0,
        global_pool: bool | str = False,
    ) -> None:
        super().__init__()
        check_positive_ints(
            in_channels=in_channels, num_classes=num_classes, input_size=input_size, hidden=hidden
        )
        widths = _check_stages(stages, input_size)
        check_probability(dropout, "dropout")
        side = input_size // 2 ** len(widths)
        head = _global_pool(global_pool, side)
        side = 1 if head else side
        self.normalize = Normalize.for_channels(mean, std, in_channels)
        layers: list[nn.Module] = []
        cin = in_channels
        for stage in widths:
            for cout in stage:
                layers += [
                    nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                    nn.BatchNorm2d(cout),
                    nn.ReLU(),
                ]
                cin = cout
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.hidden = nn.Sequential(
            *head,
            nn.Flatten(),
            nn.Linear(cin * side * side, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
        )
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.hidden(self.features(self.normalize(x))))
