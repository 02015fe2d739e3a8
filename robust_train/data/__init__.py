"""LightningDataModules yielding float images in [0, 1], shape (B, C, H, W), and class indices."""

from robust_train.data.base import ImageDataModule, ImageTensorDataset
from robust_train.data.check import SplitCheck, UnreadableImageError, check_datamodule
from robust_train.data.cluttered import ClutteredMNIST5kDataModule, render_cluttered
from robust_train.data.digits import DigitsDataModule, load_digits_tensors
from robust_train.data.image_folder import ImageFolderDataModule
from robust_train.data.mnist5k import MNIST5kDataModule, load_mnist5k_tensors
from robust_train.data.registry import DATAMODULES, datamodule_config, get_datamodule
from robust_train.data.synthetic import SyntheticDataModule
from robust_train.data.torchvision_data import (
    CIFAR10DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
)

__all__ = [
    "ImageDataModule",
    "ImageTensorDataset",
    "DigitsDataModule",
    "load_digits_tensors",
    "MNISTDataModule",
    "MNIST5kDataModule",
    "load_mnist5k_tensors",
    "ClutteredMNIST5kDataModule",
    "render_cluttered",
    "FashionMNISTDataModule",
    "CIFAR10DataModule",
    "ImageFolderDataModule",
    "SyntheticDataModule",
    "get_datamodule",
    "datamodule_config",
    "DATAMODULES",
    "check_datamodule",
    "SplitCheck",
    "UnreadableImageError",
]
