"""Lightning's classes in each Lightning package in use: `pytorch_lightning` (what robust_train
builds on) and `lightning.pytorch` (`import lightning as L`, see robust_train.lightning).

The two packages hold the same code as different classes, so `isinstance(x, pl.X)` is False for
an `L.X`. Checks that should hold for both ask for `lightning_classes("X")`; `lightning.pytorch`
is only looked at when it has been imported (no object of it can exist otherwise).
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["lightning_classes"]

PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def lightning_classes(path: str) -> tuple[type, ...]:
    """The class at `path` (below the package: "LightningModule", "loggers.WandbLogger") of each
    Lightning package in use.

    Examples:
        >>> import pytorch_lightning
        >>> pytorch_lightning.Callback in lightning_classes("Callback")
        True
    """
    module, _, name = path.rpartition(".")
    found = []
    for package in PACKAGES:
        if package != PACKAGES[0] and package not in sys.modules:
            continue
        where = importlib.import_module(f"{package}.{module}" if module else package)
        found.append(getattr(where, name))
    return tuple(found)
