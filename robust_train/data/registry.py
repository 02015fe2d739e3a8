"""DataModules by name, for configs and the command line."""

from __future__ import annotations

import sys
from typing import Any

import pytorch_lightning as pl

from robust_train.core.registry import Registry
from robust_train.data.cluttered import ClutteredMNIST5kDataModule
from robust_train.data.digits import DigitsDataModule
from robust_train.data.image_folder import ImageFolderDataModule
from robust_train.data.mnist5k import MNIST5kDataModule
from robust_train.data.synthetic import SyntheticDataModule
from robust_train.data.torchvision_data import (
    CIFAR10DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
)

__all__ = ["DATAMODULES", "get_datamodule", "datamodule_config"]

DATAMODULES: Registry[type[pl.LightningDataModule]] = Registry("DATAMODULES", "datamodule")
DATAMODULES.add_all(
    {
        "digits": DigitsDataModule,
        "mnist": MNISTDataModule,
        "mnist5k": MNIST5kDataModule,
        "cluttered_mnist5k": ClutteredMNIST5kDataModule,
        "fashion_mnist": FashionMNISTDataModule,
        "cifar10": CIFAR10DataModule,
        "image_folder": ImageFolderDataModule,
        "synthetic": SyntheticDataModule,
    }
)


def get_datamodule(name: str, **kwargs: Any) -> pl.LightningDataModule:
    """Build a DataModule by name ("digits", "mnist", "mnist5k", "cluttered_mnist5k",
    "fashion_mnist", "cifar10", "image_folder", "synthetic"), passing `kwargs` to its constructor.

    Examples:
        >>> get_datamodule("digits", batch_size=32).hparams.batch_size
        32
    """
    return DATAMODULES.lookup(name, "datamodule")(**kwargs)


def datamodule_config(datamodule: pl.LightningDataModule) -> dict[str, Any]:
    """`{"class_path", "init_args"}` of a DataModule (from its saved hyper-parameters), the layout
    checkpoints store next to the model config.

    Examples:
        >>> datamodule_config(DigitsDataModule(seed=3))["init_args"]["seed"]
        3
    """
    cls = type(datamodule)
    module = cls.__module__
    public = "robust_train.data"
    if (
        module.startswith(public + ".")
        and getattr(sys.modules.get(public), cls.__qualname__, None) is cls
    ):
        module = public
    return {"class_path": f"{module}.{cls.__qualname__}", "init_args": dict(datamodule.hparams)}
