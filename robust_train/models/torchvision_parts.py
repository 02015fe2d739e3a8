"""Surgery on torchvision classifiers: find and replace the head, adapt the stem, expose ReLUs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train.models.head import find_head

_AUX_PREFIXES = ("aux1.", "aux2.", "AuxLogits.")


def build_kwargs(name: str, weights: Any) -> dict[str, Any]:
    """Constructor arguments torchvision's builder would set for `weights` (not loading them)."""
    kwargs: dict[str, Any] = {}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(
            aux_logits=False, init_weights=weights is None, transform_input=weights is not None
        )
    if weights is not None and name.startswith("vit_"):
        kwargs["image_size"] = weights.meta["min_size"][0]
    if weights is not None and name.startswith("maxvit"):
        kwargs["input_size"] = weights.meta["min_size"]
    return kwargs


def drop_aux_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Remove the auxiliary heads of GoogLeNet / Inception v3 (built here without them)."""
    return {k: v for k, v in state.items() if not k.startswith(_AUX_PREFIXES)}


def head_out_features(model: nn.Module) -> int:
    parent, attr, _ = find_head(model)
    layer = getattr(parent, attr)
    return layer.out_features if isinstance(layer, nn.Linear) else layer.out_channels


def replace_head(model: nn.Module, num_classes: int) -> None:
    """Swap the final layer for a freshly initialised one with `num_classes` outputs."""
    parent, attr, _ = find_head(model)
    old = getattr(parent, attr)
    new: nn.Module
    if isinstance(old, nn.Linear):
        new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None)
    else:  # SqueezeNet's 1x1 convolution
        new = nn.Conv2d(old.in_channels, num_classes, old.kernel_size, old.stride, old.padding)
        if hasattr(model, "num_classes"):
            setattr(model, "num_classes", num_classes)  # noqa: B010 (not a tensor/module attribute)
    setattr(parent, attr, new)


def adapt_first_conv(model: nn.Module, in_channels: int) -> None:
    """Give the first 3-channel convolution `in_channels` inputs; pretrained filters are averaged
    over RGB and rescaled by 3 / in_channels, so a constant image gives the same response."""
    for module in model.modules():
        for attr, child in module.named_children():
            if isinstance(child, nn.Conv2d) and child.in_channels == 3:
                new = nn.Conv2d(
                    in_channels,
                    child.out_channels,
                    child.kernel_size,  # type: ignore[arg-type]
                    child.stride,  # type: ignore[arg-type]
                    child.padding,  # type: ignore[arg-type]
                    child.dilation,  # type: ignore[arg-type]
                    child.groups,
                    child.bias is not None,
                    child.padding_mode,
                )
                with torch.no_grad():
                    mean = child.weight.mean(dim=1, keepdim=True)
                    new.weight.copy_(mean.repeat(1, in_channels, 1, 1) * (3.0 / in_channels))
                    if child.bias is not None and new.bias is not None:
                        new.bias.copy_(child.bias)
                setattr(module, attr, new)
                return
    raise ValueError(
        f"{type(model).__name__} has no 3-channel Conv2d to adapt to {in_channels} channels"
    )


class ConvBNReLU(nn.Module):
    """GoogLeNet / Inception's BasicConv2d with its functional ReLU as an `nn.ReLU` module.

    Keeps the `conv` and `bn` children (same state-dict keys), so `softplus()` can swap the ReLU.
    """

    def __init__(self, conv: nn.Module, bn: nn.Module):
        super().__init__()
        self.conv = conv
        self.bn = bn
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.bn(self.conv(x)))


def expose_functional_relus(model: nn.Module) -> int:
    """Replace every BasicConv2d (conv, bn, F.relu) by `ConvBNReLU`; return how many."""
    count = 0
    for module in list(model.modules()):
        for attr, child in list(module.named_children()):
            if (
                type(child).__name__ == "BasicConv2d"
                and hasattr(child, "conv")
                and hasattr(child, "bn")
            ):
                setattr(module, attr, ConvBNReLU(getattr(child, "conv"), getattr(child, "bn")))  # noqa: B009
                count += 1
    return count


class Hardsigmoid(nn.Module):
    """`clamp(x / 6 + 1/2, 0, 1)` written with clamp, which (unlike torch's hardsigmoid kernel,
    used by MobileNetV3's squeeze-excitation) has a second derivative for double backprop."""

    def forward(self, x: Tensor) -> Tensor:
        return (x / 6.0 + 0.5).clamp(0.0, 1.0)


def replace_hardsigmoid(model: nn.Module) -> int:
    """Replace every nn.Hardsigmoid by the twice-differentiable `Hardsigmoid`; return how many."""
    count = 0
    for module in list(model.modules()):
        for attr, child in list(module.named_children()):
            if isinstance(child, nn.Hardsigmoid):
                setattr(module, attr, Hardsigmoid())
                count += 1
    return count
