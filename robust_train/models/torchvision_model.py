"""Any torchvision classification model, taking [0, 1] images, with a head for `num_classes`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torchvision
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from robust_train.core.validation import check_positive
from robust_train.models import torchvision_parts as parts
from robust_train.models.config import RecordsConfig
from robust_train.models.head import find_head
from robust_train.models.normalize import IMAGENET_MEAN, IMAGENET_STD, Normalize, channel_stats
from robust_train.models.pretrained import fetch_state_dict, load_state_dict_file, resolve_weights

__all__ = ["TorchvisionClassifier", "torchvision_classifier_names"]


def torchvision_classifier_names() -> list[str]:
    """Names accepted by `TorchvisionClassifier` (torchvision's image classification models).

    Examples:
        >>> {"resnet18", "vgg11_bn"} <= set(torchvision_classifier_names())
        True
    """
    return sorted(torchvision.models.list_models(module=torchvision.models))


class TorchvisionClassifier(RecordsConfig, nn.Module):
    """`torchvision.models.get_model(name)` behind a Normalize layer, with a new head if needed.

    The normalisation is the one the weights were trained with (`weights.transforms()`), or the
    ImageNet statistics when `weights` is None. The head is replaced when `num_classes` differs from
    the pretrained one (ResNet-like `fc`, VGG/AlexNet/MobileNet/EfficientNet/ConvNeXt/MaxViT
    `classifier[-1]`, DenseNet `classifier`, SqueezeNet's final conv, Swin `head`, ViT `heads`).
    Functional ReLUs are turned into `nn.ReLU` modules where torchvision uses them (DenseNet's last
    activation, GoogLeNet/Inception's BasicConv2d), so `softplus()` reaches every ReLU of those
    families; models with other activations (EfficientNet SiLU, ConvNeXt/ViT GELU) keep them.
    MobileNetV3's `nn.Hardsigmoid` (no double backward in torch) becomes an equal clamp expression,
    and models with nn.MultiheadAttention (ViT) run the math attention kernel while gradients are
    enabled, since the fused kernels have no double backward either.

    Args:
        name: a name from `torchvision_classifier_names()`, e.g. "resnet18".
        num_classes: number of outputs.
        weights: None (random init), "DEFAULT", an enum member name such as "IMAGENET1K_V1", or
            "ResNet18_Weights.IMAGENET1K_V1". Downloaded to `$TORCH_HOME/hub/checkpoints` when
            absent; offline, a RuntimeError says where the file must go.
        in_channels: 3, 1 (the gray channel is repeated to RGB, keeping pretrained filters
            meaningful) or another number (the first convolution is rebuilt).
        weights_path: a local file holding a torchvision-format state dict (e.g. the hub file, or
            `torch.save(torchvision_model.state_dict())`); loaded instead of downloading, read
            tensors-only.
        load_weights: False builds the architecture and normalisation of `weights` without
            fetching them (load_classifier does this before loading a checkpoint).
        model_kwargs: extra keyword arguments for the torchvision constructor
            (e.g. `{"image_size": 32}` for a ViT).
        trust_weights_path: also load a `weights_path` that holds Python objects beyond tensors
            (full unpickling). RISK: that runs any code the file carries; only for files whose
            maker you trust.

    Examples:
        >>> net = TorchvisionClassifier("resnet18", num_classes=10)
        >>> net(torch.rand(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    skip_pretrained_args: ClassVar[dict[str, Any]] = {"weights_path": None, "load_weights": False}

    def __init__(
        self,
        name: str = "resnet18",
        num_classes: int = 1000,
        weights: str | None = None,
        in_channels: int = 3,
        weights_path: str | None = None,
        load_weights: bool = True,
        model_kwargs: Mapping[str, Any] | None = None,
        trust_weights_path: bool = False,
    ):
        super().__init__()
        check_positive(num_classes, "num_classes", integer=True)
        check_positive(in_channels, "in_channels", integer=True)
        names = torchvision_classifier_names()
        if name not in names:
            raise ValueError(
                f"Unknown torchvision classifier `name` {name!r}; expected one of {names}"
            )
        self.name = name
        weights_enum = resolve_weights(name, weights)
        kwargs = {**parts.build_kwargs(name, weights_enum), **dict(model_kwargs or {})}
        backbone = torchvision.models.get_model(name, weights=None, **kwargs)
        if load_weights and (weights_path is not None or weights_enum is not None):
            if weights_path is not None:
                state = load_state_dict_file(weights_path, trusted=trust_weights_path)
            else:
                state = fetch_state_dict(weights_enum, name)
            _load_backbone(
                backbone, parts.drop_aux_keys(state), source=weights_path or repr(weights_enum)
            )
        if parts.head_out_features(backbone) != num_classes:
            parts.replace_head(backbone, num_classes)
        parts.expose_functional_relus(backbone)
        parts.replace_hardsigmoid(backbone)
        self.final_relu = nn.ReLU() if name.startswith("densenet") else None
        self.repeat_gray = in_channels == 1
        if in_channels not in (1, 3):
            if getattr(backbone, "transform_input", False):
                raise ValueError(
                    f"{name} with pretrained weights needs RGB input; got in_channels={in_channels}"
                )
            parts.adapt_first_conv(backbone, in_channels)
        self.backbone = backbone
        self.math_attention = any(isinstance(m, nn.MultiheadAttention) for m in backbone.modules())
        preset = weights_enum.transforms() if weights_enum is not None else None
        mean = getattr(preset, "mean", None) or IMAGENET_MEAN
        std = getattr(preset, "std", None) or IMAGENET_STD
        n_norm = 3 if in_channels == 1 else in_channels
        self.normalize = Normalize(channel_stats(mean, n_norm), channel_stats(std, n_norm))

    def forward(self, x: Tensor) -> Tensor:
        if self.math_attention and torch.is_grad_enabled():
            with sdpa_kernel(SDPBackend.MATH):
                return self._forward(x)
        return self._forward(x)

    def _forward(self, x: Tensor) -> Tensor:
        if self.repeat_gray:
            x = x.expand(-1, 3, -1, -1)
        x = self.normalize(x)
        if self.final_relu is None:
            return self.backbone(x)
        # DenseNet: torchvision applies F.relu(inplace=True) after `features`; use a module here.
        out = self.final_relu(self.backbone.features(x))
        out = torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1)
        return self.backbone.classifier(out)


def _load_backbone(backbone: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """Load a torchvision-format state dict (any head size) into `backbone`, strictly."""
    if any(k.startswith("backbone.") for k in state):  # a TorchvisionClassifier state dict
        state = {k[len("backbone.") :]: v for k, v in state.items() if k.startswith("backbone.")}
    head = find_head(backbone).name
    head_weight = state.get(f"{head}.weight")
    if head_weight is not None and head_weight.shape[0] != parts.head_out_features(backbone):
        parts.replace_head(backbone, int(head_weight.shape[0]))
    try:
        result = backbone.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise RuntimeError(
            f"weights from {source} do not fit torchvision's {type(backbone).__name__}: {err}"
        ) from err
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(
            f"weights from {source} do not match torchvision's {type(backbone).__name__}: "
            f"missing keys {result.missing_keys[:10]}, "
            f"unexpected keys {result.unexpected_keys[:10]}"
        )
