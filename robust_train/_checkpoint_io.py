"""Checkpoints and held-out data for `robust-train evaluate`, `compare` and `export`.

`evaluate_checkpoint(path, settings)` loads a `robust-train fit` checkpoint, rebuilds its held-out
data from the datamodule recorded in it (or a config's `data:` section) and runs the suite;
`export_checkpoint(src, dst)` writes a small copy (weights and rebuild metadata).
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.models.input_check import check_model_fits_data
from robust_train.models.loading import CheckpointError, load_classifier, read_checkpoint

__all__ = [
    "KEEP_KEYS",
    "checkpoint_meta",
    "data_config_from_yaml",
    "evaluate_checkpoint",
    "export_checkpoint",
    "heldout_tensors",
    "instantiate",
    "load_checkpoint",
]

KEEP_KEYS = (
    "state_dict",
    "robust_train",
    "hyper_parameters",
    "epoch",
    "global_step",
    "pytorch-lightning_version",
)


def instantiate(config: dict[str, Any]) -> Any:
    """Build an object from {"class_path": "pkg.mod.Class", "init_args": {...}}."""
    module_name, _, cls_name = config["class_path"].rpartition(".")
    return getattr(importlib.import_module(module_name), cls_name)(**config.get("init_args", {}))


def checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """`{"robust_train": ..., "wandb_run": ..., "epoch": ...}` of a checkpoint (empty dicts when
    absent); raises FileNotFoundError / CheckpointError with the path when it is unreadable."""
    ckpt = read_checkpoint(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{str(path)!r} is not a checkpoint written by `robust-train fit`")
    return {
        "robust_train": ckpt.get("robust_train") or {},
        "wandb_run": ckpt.get("wandb_run"),
        "epoch": ckpt.get("epoch"),
    }


def load_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any] | None]:
    """The classifier of a `robust-train fit` checkpoint and its datamodule config (or None)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"`ckpt` {str(path)!r} does not exist")
    model = load_classifier(path)
    return model, checkpoint_meta(path)["robust_train"].get("datamodule")


def data_config_from_yaml(path: str | Path) -> dict[str, Any]:
    """The `data:` section of a LightningCLI config file."""
    import yaml

    if not Path(path).is_file():
        raise FileNotFoundError(f"`data_config` {str(path)!r} does not exist")
    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict) or "data" not in config:
        raise ValueError(f"`data_config` {str(path)!r} has no `data:` section")
    return config["data"]


def heldout_tensors(
    data_config: dict[str, Any], n_samples: int, split: str = "test", model: nn.Module | None = None
) -> tuple[Tensor, Tensor, float | None]:
    """The first `n_samples` images and labels of a datamodule's held-out split, and, when a model
    is given, its accuracy on the whole split (streamed batch by batch)."""
    dm = instantiate(data_config)
    dm.prepare_data()
    dm.setup("test" if split == "test" else "validate")
    loader = dm.test_dataloader() if split == "test" else dm.val_dataloader()
    if model is not None:  # one probe forward: channels, size and classes (issue 19, items 3-4)
        check_model_fits_data(model, dm, loader)
    xs, ys, n, correct, total = [], [], 0, 0, 0
    for x, y in loader:
        if n < n_samples:
            xs.append(x)
            ys.append(y)
            n += len(x)
        if model is None and n >= n_samples:
            break
        if model is not None:
            with torch.no_grad():
                correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    if not xs:
        raise ValueError(f"the {split} split of {data_config['class_path']} is empty")
    accuracy = correct / total if model is not None and total else None
    return torch.cat(xs)[:n_samples], torch.cat(ys)[:n_samples], accuracy


def evaluate_checkpoint(
    ckpt: str | Path,
    settings: EvaluationSettings,
    *,
    data_config: str | None = None,
    split: str = "test",
    progress: bool = True,
    threads: int | None = None,
) -> dict[str, Any]:
    """Load a checkpoint and its held-out data, run the suite, add the training time."""
    model, stored = load_checkpoint(ckpt)
    if threads is not None:
        torch.set_num_threads(threads)
    elif sum(p.numel() for p in model.parameters()) < 1_000_000:
        torch.set_num_threads(1)
    config = data_config_from_yaml(data_config) if data_config else stored
    if config is None:
        raise ValueError(
            f"checkpoint {str(ckpt)!r} records no datamodule; pass --data-config CONFIG.yaml"
        )
    x, y, accuracy = heldout_tensors(config, settings.n_samples, split, model=model)
    start = time.perf_counter()
    result = evaluate_classifier(model, x, y, settings, progress=progress)
    if accuracy is not None:
        result["measures"]["split_accuracy"] = accuracy
    result["evaluation_seconds"] = time.perf_counter() - start
    meta = checkpoint_meta(ckpt)
    if meta["robust_train"].get("training_seconds") is not None:
        result["training_seconds"] = meta["robust_train"]["training_seconds"]
    if meta["epoch"] is not None:
        result["epoch"] = int(meta["epoch"])
    result["checkpoint"] = str(ckpt)
    result["split"] = split
    return result


def export_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write a small copy of a fit checkpoint: weights and rebuild metadata, no optimizer state.

    The copy loads with `load_classifier`, `robust-train evaluate` and `compare`, and as
    `init_checkpoint` for fine-tuning; it cannot resume training.
    """
    ckpt = read_checkpoint(src)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "robust_train" not in ckpt:
        raise CheckpointError(
            f"`src` {str(src)!r} is not a checkpoint written by `robust-train fit`"
        )
    small = {k: ckpt[k] for k in KEEP_KEYS if k in ckpt}
    small["state_dict"] = {k: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    torch.save(small, dst)
    return dst
