"""Training: `RobustClassifier` (the LightningModule: task loss plus penalty terms), its
precision checks, run folders (`run_folder`: from their claim to their release) and checkpoints,
and the loggers it writes to.

`RobustClassifier` is imported on first use, so importing `robust_train.training.loggers` or
`robust_train.training.checkpointing` does not load the module's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robust_train.training.module import RobustClassifier

__all__ = ["RobustClassifier"]


def __getattr__(name: str) -> Any:
    if name == "RobustClassifier":
        from robust_train.training.module import RobustClassifier

        return RobustClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
