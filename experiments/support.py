"""What the experiments share: a Lightning Trainer that only trains; results files read and
written the same way whether gzip-compressed or not; the mean of the measured values."""

from __future__ import annotations

import gzip
import math
from pathlib import Path
from typing import Any


def quiet_trainer(**options: Any) -> Any:
    """A CPU `pytorch_lightning.Trainer` that only trains: no logger, checkpoints, progress bar,
    model summary, sanity check or validation. `options` (max_epochs, limit_train_batches,
    callbacks, ...) are added, and override these."""
    import pytorch_lightning as pl

    quiet = {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
    }
    return pl.Trainer(**{**quiet, **options})


def read_text(path: Path) -> str:
    """The text of `path`, decompressed when its name ends in `.gz` (results are stored so)."""
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode()
    return path.read_text()


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path`, gzip-compressed (no timestamp) when its name ends in `.gz`."""
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def finite_mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (an image a measure skipped); NaN if none is.

    Examples:
        >>> finite_mean([0.5, float("nan"), 1.0]), math.isnan(finite_mean([float("nan")]))
        (0.75, True)
    """
    finite = [v for v in values if v == v]
    return sum(finite) / len(finite) if finite else math.nan
