"""Checkpoints and held-out data for `robust-train evaluate`, `compare` and `export`.

`read_fit_checkpoint(path)` reads a `robust-train fit` checkpoint ONCE into a `FitCheckpoint`
(its content and its metadata, class paths checked); every command passes that object on.
`evaluate_checkpoint(checkpoint, settings)` rebuilds the model and its held-out data from the
datamodule recorded in it (or a config's `data:` section) and runs the suite;
`export_checkpoint(src, dst)` writes a small copy (weights and rebuild metadata).

Checkpoints are read tensors-only; one holding other Python objects is refused unless the user
passes `--trust-checkpoint` (`trusted=True`), and the class paths a checkpoint records are checked
to name an `nn.Module` (model) and a `LightningDataModule` (data) before anything is built.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import Tensor, nn

from robust_train.core.resources import resolve_file
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.models.config import ClassPathNotFound, resolve_class
from robust_train.models.input_check import check_model_fits_data
from robust_train.models.loading import (
    CheckpointError,
    checkpoint_safe,
    classifier_from,
    read_checkpoint,
)

__all__ = [
    "FitCheckpoint",
    "KEEP_KEYS",
    "TRUST_FLAG",
    "add_trust_argument",
    "checkpoint_meta",
    "data_config_from_yaml",
    "evaluate_checkpoint",
    "export_checkpoint",
    "heldout_tensors",
    "instantiate",
    "load_checkpoint",
    "read_fit_checkpoint",
]

KEEP_KEYS = (
    "state_dict",
    "robust_train",
    "hyper_parameters",
    "epoch",
    "global_step",
    "pytorch-lightning_version",
)


TRUST_FLAG = "--trust-checkpoint"
TRUST_HELP = (
    "also load checkpoints that hold Python objects beyond tensors and plain values (full "
    "unpickling). RISK: unpickling runs any code the file carries; use it only for files whose "
    "maker you trust (those of `robust-train fit` and `export` never need it)"
)


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    """The `--trust-checkpoint` flag of every command that reads checkpoints (documented risk)."""
    parser.add_argument(TRUST_FLAG, action="store_true", help=TRUST_HELP)


def _read(path: str | Path, trusted: bool) -> Any:
    return read_checkpoint(path, trusted=trusted, opt_in=f"pass {TRUST_FLAG}")


def instantiate(config: dict[str, Any], what: str = "the data config") -> LightningDataModule:
    """Build a datamodule from {"class_path": "pkg.mod.Class", "init_args": {...}}; the class is
    checked to be a LightningDataModule before it is called."""
    if not isinstance(config, dict):
        raise ValueError(f"{what} must be a dict with 'class_path', got {config!r}")
    cls = resolve_class(config.get("class_path"), LightningDataModule, what)
    init_args = config.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise ValueError(f"the init_args of {what} must be a dict, got {init_args!r}")
    return cls(**init_args)


def _check_classes(meta: dict[str, Any], path: str | Path) -> None:
    """Refuse recorded class paths that import but name no nn.Module / LightningDataModule (one
    that does not import fails where it is built, if it is used)."""
    for key, base in (("model", nn.Module), ("datamodule", LightningDataModule)):
        spec = meta.get(key)
        if spec is None:
            continue
        what = f"the {key} recorded in {str(path)!r}"
        if not isinstance(spec, dict):
            raise CheckpointError(f"{what} is not a {{'class_path', 'init_args'}} dict: {spec!r}")
        try:
            resolve_class(spec.get("class_path"), base, what)
        except ClassPathNotFound:
            pass


def _meta(ckpt: Any, path: str | Path) -> dict[str, Any]:
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{str(path)!r} is not a checkpoint written by `robust-train fit`")
    meta = {
        "robust_train": ckpt.get("robust_train") or {},
        "wandb_run": ckpt.get("wandb_run"),
        "epoch": ckpt.get("epoch"),
    }
    if not isinstance(meta["robust_train"], dict):
        raise CheckpointError(f"checkpoint['robust_train'] of {str(path)!r} is not a dict")
    _check_classes(meta["robust_train"], path)
    return meta


@dataclass(frozen=True)
class FitCheckpoint:
    """A checkpoint read once: its path, its content (tensors and plain values) and `meta`
    (`{"robust_train": ..., "wandb_run": ..., "epoch": ...}`, empty dicts when absent)."""

    path: Path
    content: dict[str, Any]
    meta: dict[str, Any]

    @property
    def recorded(self) -> dict[str, Any]:
        """What `robust-train fit` recorded (`checkpoint["robust_train"]`)."""
        return self.meta["robust_train"]

    def classifier(self) -> nn.Module:
        """The classifier it holds, in eval mode (rebuilt from the recorded model config)."""
        return classifier_from(self.content, self.path)


def read_fit_checkpoint(path: str | Path, *, trusted: bool = False) -> FitCheckpoint:
    """Read a `robust-train fit` checkpoint once (a shipped one by name too:
    `robust_train.core.resources.resolve_file`); raises FileNotFoundError / CheckpointError with
    the path when it is missing or unreadable, holds Python objects and `trusted` is False, or
    records a class path of the wrong kind."""
    path = Path(resolve_file(path, "checkpoints", what="`ckpt`"))
    if path.is_dir():
        raise IsADirectoryError(f"`ckpt` {str(path)!r} is a directory, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"`ckpt` {str(path)!r} does not exist")
    content = _read(path, trusted)
    return FitCheckpoint(path, content, _meta(content, path))


def checkpoint_meta(path: str | Path, *, trusted: bool = False) -> dict[str, Any]:
    """The `meta` of `read_fit_checkpoint(path)`."""
    return read_fit_checkpoint(path, trusted=trusted).meta


def load_checkpoint(
    path: str | Path, *, trusted: bool = False
) -> tuple[nn.Module, dict[str, Any] | None]:
    """The classifier of a `robust-train fit` checkpoint and its datamodule config (or None); the
    file is read once, and its class paths are checked before the model is built."""
    checkpoint = read_fit_checkpoint(path, trusted=trusted)
    return checkpoint.classifier(), checkpoint.recorded.get("datamodule")


def data_config_from_yaml(path: str | Path) -> dict[str, Any]:
    """The `data:` section of a LightningCLI config file (a shipped config by name too)."""
    import yaml

    path = resolve_file(path, "configs", what="`data_config`")
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
    dm = instantiate(data_config, "the datamodule of the held-out data")
    dm.prepare_data()
    dm.setup("test" if split == "test" else "validate")
    loader = dm.test_dataloader() if split == "test" else dm.val_dataloader()
    if model is not None:  # one probe forward: channels, size and classes
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


def evaluate_on_split(
    model: nn.Module,
    data_config: dict[str, Any],
    settings: EvaluationSettings,
    split: str,
    *,
    progress: bool = True,
    threads: int | None = None,
) -> dict[str, Any]:
    """The suite on the first `settings.n_samples` images of a data config's split, after the
    probe (`heldout_tensors`); one torch thread for small models unless `threads` says."""
    if threads is not None:
        torch.set_num_threads(threads)
    elif sum(p.numel() for p in model.parameters()) < 1_000_000:
        torch.set_num_threads(1)
    x, y, accuracy = heldout_tensors(data_config, settings.n_samples, split, model=model)
    start = time.perf_counter()
    result = evaluate_classifier(model, x, y, settings, progress=progress)
    if accuracy is not None:
        result["measures"]["split_accuracy"] = accuracy
    result["evaluation_seconds"] = time.perf_counter() - start
    return result


def evaluate_checkpoint(
    checkpoint: FitCheckpoint | str | Path,
    settings: EvaluationSettings,
    *,
    data_config: str | None = None,
    split: str = "test",
    progress: bool = True,
    threads: int | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Rebuild a checkpoint's model and held-out data, run the suite, add the training time; a
    path is read here (`read_fit_checkpoint`), a `FitCheckpoint` is not read again."""
    if not isinstance(checkpoint, FitCheckpoint):
        checkpoint = read_fit_checkpoint(checkpoint, trusted=trusted)
    config = (
        data_config_from_yaml(data_config) if data_config else checkpoint.recorded.get("datamodule")
    )
    if config is None:
        raise ValueError(
            f"checkpoint {str(checkpoint.path)!r} records no datamodule; pass --data-config "
            "CONFIG.yaml"
        )
    model = checkpoint.classifier()
    result = evaluate_on_split(model, config, settings, split, progress=progress, threads=threads)
    if checkpoint.recorded.get("training_seconds") is not None:
        result["training_seconds"] = checkpoint.recorded["training_seconds"]
    if checkpoint.meta["epoch"] is not None:
        result["epoch"] = int(checkpoint.meta["epoch"])
    result["checkpoint"] = str(checkpoint.path)
    result["split"] = split
    return result


def export_checkpoint(src: str | Path, dst: str | Path, *, trusted: bool = False) -> Path:
    """Write a small copy of a fit checkpoint: weights and rebuild metadata, no optimizer state.

    The copy loads with `load_classifier`, `robust-train evaluate` and `compare`, and as
    `init_checkpoint` for fine-tuning; it cannot resume training. It always loads tensors-only:
    anything else (Python objects a trusted `src` held) is written as plain values or its repr.
    """
    ckpt = _read(src, trusted)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "robust_train" not in ckpt:
        raise CheckpointError(
            f"`src` {str(src)!r} is not a checkpoint written by `robust-train fit`"
        )
    _meta(ckpt, src)
    small = {k: checkpoint_safe(ckpt[k]) for k in KEEP_KEYS if k in ckpt and k != "state_dict"}
    small["state_dict"] = {
        k: checkpoint_safe(v) for k, v in ckpt["state_dict"].items() if k.startswith("model.")
    }
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    torch.save(small, dst)
    return dst
