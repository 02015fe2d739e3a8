"""robust_train for the `lightning` package (`import lightning as L`).

`pytorch_lightning` and `lightning.pytorch` ship the same code as two sets of classes, and
neither Trainer takes the other's modules (`L.Trainer().fit(pytorch_lightning_module)` raises
"`model` must be a `LightningModule`"; Lightning's maintainers: the two cannot be mixed).
robust_train builds on `pytorch_lightning` (what `robust-train fit` runs); this module gives the
same classes for `lightning.pytorch`:

    import lightning as L
    from robust_train.lightning import DigitsDataModule, RobustClassifier, RobustnessMonitor

    L.Trainer(max_epochs=2, callbacks=[RobustnessMonitor()]).fit(
        RobustClassifier(net), datamodule=DigitsDataModule()
    )

Each class here is the robust_train class itself with the `lightning.pytorch` twin of its
Lightning base added (`on_lightning`): robust_train's own methods are used unchanged, every
method robust_train inherits from Lightning resolves to `lightning.pytorch`'s, so Lightning's
checks (which hooks a module overrides) see a `lightning.pytorch` class, and
`isinstance(module, robust_train.RobustClassifier)` still holds. Checkpoints are the same files:
`robust_train.models.load_classifier` and `robust-train evaluate` read either.

`on_lightning(cls)` does the same for a class of your own built on robust_train's
(a `RobustnessCallback` subclass, say).
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    import lightning.pytorch as _lightning_pytorch  # noqa: F401 - fails early without the package
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "robust_train.lightning needs the `lightning` package (pip install lightning); with "
        "`pytorch_lightning` import from robust_train, robust_train.callbacks and "
        "robust_train.data instead"
    ) from err

from robust_train import callbacks as _callbacks
from robust_train import data as _data
from robust_train.training import module as _module

__all__ = [
    "on_lightning",
    "RobustClassifier",
    "RobustnessCallback",
    "RobustnessMonitor",
    "FragilityMonitor",
    "LipschitzMonitor",
    "FidelityMonitor",
    "CertifiedMonitor",
    "LocalisationMonitor",
    "ImageDataModule",
    "DigitsDataModule",
    "MNIST5kDataModule",
    "MNISTDataModule",
    "FashionMNISTDataModule",
    "CIFAR10DataModule",
    "ImageFolderDataModule",
    "SyntheticDataModule",
]

_SOURCES = {"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}
_TWINS: dict[type, type] = {}


def _package(cls: type) -> str | None:
    root = cls.__module__.split(".")[0]
    return root if root in _SOURCES else None


def _twin_base(cls: type) -> type:
    """The `lightning.pytorch` (or `lightning.fabric`) class of a `pytorch_lightning` class."""
    root = _package(cls)
    assert root is not None
    module = _SOURCES[root] + cls.__module__[len(root) :]
    return getattr(importlib.import_module(module), cls.__qualname__)


def _lightning_bases(cls: type) -> list[type]:
    """The `pytorch_lightning` classes robust_train's classes in `cls.__mro__` derive from."""
    found: list[type] = []
    for klass in cls.__mro__:
        if _package(klass) is None:
            found += [b for b in klass.__bases__ if _package(b) and b not in found]
    return found


def _static(classes: list[type], name: str) -> tuple[type, Any] | None:
    for klass in classes:
        if name in vars(klass):
            return klass, vars(klass)[name]
    return None


def on_lightning(cls: type) -> type:
    """`cls` (a class built on `pytorch_lightning`) for `lightning.pytorch` Trainers.

    Examples:
        >>> import lightning.pytorch as L
        >>> from robust_train.callbacks import RobustnessMonitor as Monitor
        >>> twin = on_lightning(Monitor)
        >>> issubclass(twin, L.Callback), issubclass(twin, Monitor), on_lightning(Monitor) is twin
        (True, True, True)
    """
    if cls in _TWINS:
        return _TWINS[cls]
    bases = [_twin_base(b) for b in _lightning_bases(cls)]
    if not bases:
        raise TypeError(f"{cls.__qualname__} is not built on a pytorch_lightning class")
    twin = type(cls)(
        cls.__name__,
        (cls, *bases),
        {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": f"`{cls.__module__}.{cls.__qualname__}` for lightning.pytorch Trainers "
            "(robust_train.lightning.on_lightning); see its documentation.",
        },
    )
    # What robust_train inherits from pytorch_lightning resolves to lightning.pytorch instead.
    own = [k for k in cls.__mro__ if _package(k) is None and k is not object]
    for base in bases:
        for klass in base.__mro__:
            if klass.__module__.split(".")[0] != "lightning":
                continue  # torch.nn.Module, object: shared by both packages
            for name, value in vars(klass).items():
                if name.startswith("__") and name.endswith("__"):
                    continue
                if _static(own, name) is None and name not in vars(twin):
                    setattr(twin, name, value)
    _TWINS[cls] = twin
    return twin


def _exported(cls: type) -> type:
    """`on_lightning(cls)`, named as this module's attribute (pickling, class paths)."""
    twin = on_lightning(cls)
    twin.__module__ = __name__
    twin.__qualname__ = cls.__name__
    return twin


RobustClassifier = _exported(_module.RobustClassifier)
RobustnessCallback = _exported(_callbacks.RobustnessCallback)
RobustnessMonitor = _exported(_callbacks.RobustnessMonitor)
FragilityMonitor = _exported(_callbacks.FragilityMonitor)
LipschitzMonitor = _exported(_callbacks.LipschitzMonitor)
FidelityMonitor = _exported(_callbacks.FidelityMonitor)
CertifiedMonitor = _exported(_callbacks.CertifiedMonitor)
LocalisationMonitor = _exported(_callbacks.LocalisationMonitor)
ImageDataModule = _exported(_data.ImageDataModule)
DigitsDataModule = _exported(_data.DigitsDataModule)
MNIST5kDataModule = _exported(_data.MNIST5kDataModule)
MNISTDataModule = _exported(_data.MNISTDataModule)
FashionMNISTDataModule = _exported(_data.FashionMNISTDataModule)
CIFAR10DataModule = _exported(_data.CIFAR10DataModule)
ImageFolderDataModule = _exported(_data.ImageFolderDataModule)
SyntheticDataModule = _exported(_data.SyntheticDataModule)
