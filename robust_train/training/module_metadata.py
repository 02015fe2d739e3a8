"""Helpers of `RobustClassifier`: the class count of a model, and the checkpoint
metadata that `load_classifier` and `robust-train evaluate` rebuild the model and data from."""

from __future__ import annotations

import math
from typing import Any

import pytorch_lightning as pl
from torch import nn


def infer_num_classes(model: nn.Module) -> int:
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(
            "`num_classes` could not be inferred (the model has no nn.Linear); pass num_classes="
        )
    return int(linears[-1].out_features)


def try_model_config(model: nn.Module) -> dict[str, Any] | None:
    """The model's {"class_path", "init_args"} (load_classifier rebuilds it without fetching
    weights)."""
    try:
        from robust_train.models import model_config

        return model_config(model)
    except (ImportError, TypeError, ValueError, AttributeError):
        return None


def try_datamodule_config(trainer: pl.Trainer | None) -> dict[str, Any] | None:
    dm = getattr(trainer, "datamodule", None) if trainer is not None else None
    if dm is None:
        return None
    from robust_train.data import datamodule_config

    config = datamodule_config(dm)
    # LightningCLI adds private keys (`_class_path`, `_instantiator`) to hparams; keep the
    # constructor arguments.
    init_args = {
        k: v for k, v in config["init_args"].items() if not k.startswith("_") and _is_plain(v)
    }
    return {**config, "init_args": init_args}


def _is_plain(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool, type(None))):
        return not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False
