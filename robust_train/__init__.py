"""robust_train: train image classifiers whose explanations are robust, and measure it while
they train.

`RobustClassifier` is imported on first use, so `robust-train --help` and the argument checks of
the commands start without loading PyTorch Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robust_train.training.module import RobustClassifier

__version__ = "0.2.0"

__all__ = ["RobustClassifier", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "RobustClassifier":
        from robust_train.training.module import RobustClassifier

        return RobustClassifier
    raise AttributeError(f"module 'robust_train' has no attribute {name!r}")
