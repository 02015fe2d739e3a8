"""Classifiers that take [0, 1] images (normalisation is their first layer), and their loading."""

from robust_train.models.config import RecordsConfig, build_model, model_config
from robust_train.models.loading import load_classifier, read_checkpoint
from robust_train.models.mnist_cnn import MNISTConvNet
from robust_train.models.normalize import Normalize
from robust_train.models.registry import MODELS, get_model
from robust_train.models.resnet_cifar import ResNet18CIFAR
from robust_train.models.small_cnn import SmallCNN
from robust_train.models.small_input_resnet import SmallInputResNet
from robust_train.models.softplus import count_relus, softplus
from robust_train.models.torchvision_model import (
    TorchvisionClassifier,
    torchvision_classifier_names,
)
from robust_train.models.vgg_bn import VGGBN

__all__ = [
    "Normalize",
    "RecordsConfig",
    "model_config",
    "build_model",
    "SmallCNN",
    "MNISTConvNet",
    "ResNet18CIFAR",
    "TorchvisionClassifier",
    "SmallInputResNet",
    "VGGBN",
    "torchvision_classifier_names",
    "load_classifier",
    "read_checkpoint",
    "get_model",
    "MODELS",
    "softplus",
    "count_relus",
]
