"""Models by name, for configs and the command line: `get_model("small_cnn", width=16)`."""

from __future__ import annotations

from typing import Any

from torch import nn

from robust_train.core.registry import Registry
from robust_train.models.mnist_cnn import MNISTConvNet
from robust_train.models.resnet_cifar import ResNet18CIFAR
from robust_train.models.small_cnn import SmallCNN
from robust_train.models.small_input_resnet import SmallInputResNet
from robust_train.models.torchvision_model import (
    TorchvisionClassifier,
    torchvision_classifier_names,
)
from robust_train.models.vgg_bn import VGGBN

__all__ = ["get_model", "MODELS"]

MODELS: Registry[type[nn.Module]] = Registry("MODELS", "model")
MODELS.add_all(
    {
        "small_cnn": SmallCNN,
        "mnist_cnn": MNISTConvNet,
        "resnet18_cifar": ResNet18CIFAR,
        "vgg_bn": VGGBN,
        "resnet_small_input": SmallInputResNet,
    }
)


def get_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a model by name: "small_cnn", "mnist_cnn", "resnet18_cifar", "vgg_bn",
    "resnet_small_input" (a torchvision ResNet with a small-image stem), or any torchvision
    classifier name
    (e.g. "resnet18", "vgg11", "densenet121": a `TorchvisionClassifier(name=name, **kwargs)`).

    Examples:
        >>> type(get_model("small_cnn", width=8)).__name__
        'SmallCNN'
        >>> get_model("resnet18", num_classes=3).name
        'resnet18'
        >>> type(get_model("vgg_bn", hidden=16)).__name__
        'VGGBN'
    """
    if isinstance(name, str) and name not in MODELS and name in torchvision_classifier_names():
        return TorchvisionClassifier(name=name, **kwargs)
    try:
        model_class = MODELS.lookup(name, "model")
    except ValueError as err:
        raise ValueError(
            f"{err} or a torchvision classifier name "
            "(robust_train.models.torchvision_classifier_names())"
        ) from None
    return model_class(**kwargs)
