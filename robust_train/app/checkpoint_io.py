"""Checkpoints for `robust-train evaluate`, `compare` and `export`: reading them and exporting them.

`read_fit_checkpoint(path)` reads a `robust-train fit` checkpoint ONCE into a `FitCheckpoint`
(its content and its metadata, class paths checked); every command passes that object on.
`evaluate_checkpoint(checkpoint, settings)` rebuilds the model and its data from the datamodule
recorded in it (or a config's `data:` section) and evaluates it on a split
(`robust_train.evaluation.split.evaluate_on_split`); `export_checkpoint(src, dst)` writes a
small copy (weights and rebuild metadata). The held-out selection (`heldout_subset`,
`heldout_tensors`, `DataSettingsError`, `instantiate`) is `robust_train.evaluation.heldout`'s,
re-exported here.

Checkpoints are read tensors-only; one holding other Python objects is refused unless the user
passes `--trust-checkpoint` (`trusted=True`), and the class paths a checkpoint records are checked
to name an `nn.Module` (model) and a `LightningDataModule` (data) before anything is built. A
recorded class path is imported only from a short allow-list of installed packages (a model:
robust_train, torch, torchvision; a datamodule: robust_train's own), never from a `__main__`
module: one whose module is in the working folder, on PYTHONPATH, in another installed package
or anywhere else is refused unless the user passes `--trust-class-path` (`trust_class_path=True`)
or gives the model (`--model`) or the data (`--data-config`) themselves
(`robust_train.core.trust`).

The datamodule a checkpoint records never downloads anything or creates a folder: `download` is
turned off, a folder it names (`root`, `data_dir`, ...) must exist here, and when it cannot be
set up the error says to pass `--data-config` (one line, exit code 2).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import nn

from robust_train.core.files import OutputError, check_input, check_output, write_stream
from robust_train.core.resources import resolve_file
from robust_train.core.trust import (
    DATA_PACKAGES,
    RECORDED_PACKAGES,
    ClassPathNotFound,
    UntrustedClassPathError,
    resolve_class,
)
from robust_train.core.yaml_bounds import check_yaml_aliases
from robust_train.evaluation.heldout import (
    DataSettingsError,
    HeldOut,
    heldout_masks,
    heldout_subset,
    heldout_tensors,
    instantiate,
)
from robust_train.evaluation.settings import EvaluationSettings
from robust_train.evaluation.split import evaluate_on_split
from robust_train.models.loading import (
    CheckpointError,
    checkpoint_safe,
    classifier_from,
    read_checkpoint,
)

__all__ = [
    "CLASS_PATH_FLAG",
    "DataSettingsError",
    "FitCheckpoint",
    "HeldOut",
    "KEEP_KEYS",
    "TRUST_FLAG",
    "add_trust_argument",
    "check_input_file",
    "data_config_from_yaml",
    "evaluate_checkpoint",
    "evaluate_on_split",
    "evaluation_data",
    "export_checkpoint",
    "heldout_masks",
    "heldout_subset",
    "heldout_tensors",
    "instantiate",
    "load_checkpoint",
    "read_fit_checkpoint",
    "recorded_datamodule",
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


CLASS_PATH_FLAG = "--trust-class-path"
CLASS_PATH_HELP = (
    "also import the model and data classes a checkpoint records when their module is outside "
    "robust_train, torch and torchvision (data: outside robust_train), such as a .py file in the "
    "working folder or on PYTHONPATH, another installed package or a __main__ module. RISK: "
    "importing a module runs its code; use it only for checkpoints whose maker you trust "
    "(giving the model with --model or the data with --data-config needs no opt-in)"
)
CLASS_PATH_OPT_IN = f"pass {CLASS_PATH_FLAG} (or give the model or data yourself)"
# init args of a recorded datamodule that name a folder to read: they must exist here
PATH_ARGS = ("root", "data_dir", "data_root", "dataset_dir", "path")
PATH_SUFFIXES = ("_dir", "_root", "_path")


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    """The `--trust-checkpoint` and `--trust-class-path` flags of every command that reads
    checkpoints (documented risks)."""
    parser.add_argument(TRUST_FLAG, action="store_true", help=TRUST_HELP)
    parser.add_argument(CLASS_PATH_FLAG, action="store_true", help=CLASS_PATH_HELP)


def check_input_file(path: str | Path, flag: str) -> Path:
    """`path` if it is a regular file (through a symlink, too); else FileNotFoundError /
    IsADirectoryError / OutputError naming `flag` (a FIFO or a device node is never opened: a
    FIFO would wait for a writer forever).

    Examples:
        >>> check_input_file("/", "--ckpt")
        Traceback (most recent call last):
        ...
        IsADirectoryError: `--ckpt` '/' is a directory, not a file
        >>> check_input_file("/dev/null", "--ckpt")
        Traceback (most recent call last):
        ...
        robust_train.core.files.NotARegularFileError: `--ckpt` '/dev/null' is a character ...
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"`{flag}` {str(path)!r} is a directory, not a file")
    check_input(path, flag)
    if not path.is_file():
        raise FileNotFoundError(f"`{flag}` {str(path)!r} does not exist")
    return path


def _read(path: str | Path, trusted: bool) -> Any:
    return read_checkpoint(path, trusted=trusted, opt_in=f"pass {TRUST_FLAG}")


def _is_path_arg(name: str) -> bool:
    return name in PATH_ARGS or name.endswith(PATH_SUFFIXES)


def recorded_datamodule(
    config: dict[str, Any], checkpoint: str | Path, *, trust_class_path: bool = False
) -> LightningDataModule:
    """The datamodule a checkpoint records, built so that it cannot download or create folders:
    `download` is set to False, and every folder it names (`root`, `data_dir`, `*_dir`, ...)
    must exist here; otherwise a DataSettingsError says to pass `--data-config`.

    Examples:
        >>> config = {"class_path": "robust_train.data.MNISTDataModule",
        ...           "init_args": {"data_dir": "/nowhere/at/all", "download": True}}
        >>> recorded_datamodule(config, "x.ckpt")
        Traceback (most recent call last):
        ...
        robust_train.evaluation.heldout.DataSettingsError: the datamodule recorded in 'x.ckpt' ...
    """
    what = f"the datamodule recorded in {str(checkpoint)!r}"
    if not isinstance(config, dict):
        raise CheckpointError(f"{what} is not a {{'class_path', 'init_args'}} dict: {config!r}")
    init_args = dict(config.get("init_args") or {})
    hint = "pass --data-config CONFIG.yaml (a data: section for this machine)"
    for name, value in init_args.items():
        if _is_path_arg(name) and isinstance(value, str) and not Path(value).expanduser().exists():
            raise DataSettingsError(
                f"{what} reads {name}={value!r}, which does not exist here; data recorded in a "
                f"checkpoint is never downloaded and no folder is created for it: {hint}"
            )
    cls = resolve_class(
        config.get("class_path"),
        LightningDataModule,
        what,
        recorded=not trust_class_path,
        opt_in=CLASS_PATH_OPT_IN,
        packages=DATA_PACKAGES,
    )
    if init_args.get("download") or "download" in inspect.signature(cls).parameters:
        init_args["download"] = False
    return instantiate({**config, "init_args": init_args}, what, recorded=False)


def _check_classes(
    meta: dict[str, Any], path: str | Path, trust_class_path: bool, copy_only: bool = False
) -> None:
    """Refuse recorded class paths that import but name no nn.Module / LightningDataModule (one
    that does not import fails where it is built, if it is used). A module outside the installed
    packages is refused unless `trust_class_path`; with `copy_only` (export: nothing is built) it
    is left unimported and unchecked, with a note."""
    kinds = (
        ("model", nn.Module, RECORDED_PACKAGES),
        ("datamodule", LightningDataModule, DATA_PACKAGES),
    )
    for key, base, packages in kinds:
        spec = meta.get(key)
        if spec is None:
            continue
        what = f"the {key} recorded in {str(path)!r}"
        if not isinstance(spec, dict):
            raise CheckpointError(f"{what} is not a {{'class_path', 'init_args'}} dict: {spec!r}")
        class_path = spec.get("class_path")
        try:
            resolve_class(
                class_path, base, what, recorded=not trust_class_path, opt_in=CLASS_PATH_OPT_IN,
                packages=packages,
            )  # fmt: skip
        except ClassPathNotFound:
            pass
        except UntrustedClassPathError:
            if not copy_only:
                raise
            print(
                f"note: {what} names {class_path!r}, outside the allowed packages: copied "
                f"as text, not imported or checked (loading the copy asks for {CLASS_PATH_FLAG})",
                file=sys.stderr,
            )


def _meta(
    ckpt: Any, path: str | Path, trust_class_path: bool = False, copy_only: bool = False
) -> dict[str, Any]:
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{str(path)!r} is not a checkpoint written by `robust-train fit`")
    meta = {
        "robust_train": ckpt.get("robust_train") or {},
        "wandb_run": ckpt.get("wandb_run"),
        "epoch": ckpt.get("epoch"),
    }
    if not isinstance(meta["robust_train"], dict):
        raise CheckpointError(f"checkpoint['robust_train'] of {str(path)!r} is not a dict")
    _check_classes(meta["robust_train"], path, trust_class_path, copy_only)
    return meta


@dataclass(frozen=True)
class FitCheckpoint:
    """A checkpoint read once: its path, its content (tensors and plain values) and `meta`
    (`{"robust_train": ..., "wandb_run": ..., "epoch": ...}`, empty dicts when absent);
    `trust_class_path`: its recorded class paths may import modules outside the installed
    packages."""

    path: Path
    content: dict[str, Any]
    meta: dict[str, Any]
    trust_class_path: bool = field(default=False)

    @property
    def recorded(self) -> dict[str, Any]:
        """What `robust-train fit` recorded (`checkpoint["robust_train"]`)."""
        return self.meta["robust_train"]

    def classifier(self, device: torch.device | str = "cpu") -> nn.Module:
        """The classifier it holds, in eval mode (rebuilt from the recorded model config), its
        weights on `device`."""
        return classifier_from(
            self.content,
            self.path,
            map_location=torch.device(device),
            trust_class_path=self.trust_class_path,
            class_path_opt_in=CLASS_PATH_OPT_IN,
        )

    def datamodule(self) -> LightningDataModule | None:
        """The recorded datamodule (`recorded_datamodule`: no download, no new folder), or
        None when the checkpoint records none."""
        config = self.recorded.get("datamodule")
        if config is None:
            return None
        return recorded_datamodule(config, self.path, trust_class_path=self.trust_class_path)


def _refuse_weights_only(content: Any, path: Path, flag: str) -> None:
    """A file of weights alone (a state dict, or a checkpoint not written by `robust-train
    fit`) cannot rebuild its model: one line pointing to `--model`/`--weights`."""
    if not isinstance(content, dict) or "robust_train" in content:
        return
    what = "a state dict (weights only)" if "state_dict" not in content else "a checkpoint"
    how = (
        f"--model MODEL --weights {path.name} --data-config DATA.yaml"
        if flag == "--ckpt"
        else "--model MODEL with the weights files as positionals, and --data-config DATA.yaml"
    )
    raise CheckpointError(
        f"`{flag}` {str(path)!r} is {what} not written by `robust-train fit`, so it records no "
        f"model to rebuild: give the model and its data with {how} (MODEL: torchvision:NAME, "
        "a model YAML or a class path)"
    )


def read_fit_checkpoint(
    path: str | Path, *, trusted: bool = False, trust_class_path: bool = False, flag: str = "--ckpt"
) -> FitCheckpoint:
    """Read a `robust-train fit` checkpoint once (a shipped one by name too:
    `robust_train.core.resources.resolve_file`); raises FileNotFoundError / IsADirectoryError /
    CheckpointError naming `flag` and the path when it is missing, a folder or unreadable, holds
    Python objects and `trusted` is False, or records a class path of the wrong kind (or, unless
    `trust_class_path`, one outside the installed packages)."""
    path = check_input_file(resolve_file(path, "checkpoints", what=f"`{flag}`"), flag)
    content = _read(path, trusted)
    _refuse_weights_only(content, path, flag)
    return FitCheckpoint(path, content, _meta(content, path, trust_class_path), trust_class_path)


def load_checkpoint(
    path: str | Path, *, trusted: bool = False, trust_class_path: bool = False
) -> tuple[nn.Module, dict[str, Any] | None]:
    """The classifier of a `robust-train fit` checkpoint and its datamodule config (or None); the
    file is read once, and its class paths are checked before the model is built."""
    checkpoint = read_fit_checkpoint(path, trusted=trusted, trust_class_path=trust_class_path)
    return checkpoint.classifier(), checkpoint.recorded.get("datamodule")


def data_config_from_yaml(path: str | Path, flag: str = "--data-config") -> dict[str, Any]:
    """The `data:` section of a LightningCLI config file (a shipped config by name too), read
    with `yaml.safe_load`: tags such as `!!python/object` are refused, never run, and so are
    aliases that would expand beyond a small bound (`robust_train.core.yaml_bounds`)."""
    import yaml

    path = check_input_file(resolve_file(path, "configs", what=f"`{flag}`"), flag)
    text = path.read_text()
    check_yaml_aliases(text, f"`{flag}` {str(path)!r}")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"`{flag}` {str(path)!r} is not a plain YAML config: {first}") from None
    if not isinstance(config, dict) or "data" not in config:
        raise ValueError(f"`{flag}` {str(path)!r} has no `data:` section")
    return config["data"]


def evaluate_checkpoint(
    checkpoint: FitCheckpoint | str | Path,
    settings: EvaluationSettings,
    *,
    data_config: str | None = None,
    split: str = "test",
    progress: bool = True,
    threads: int | None = None,
    trusted: bool = False,
    trust_class_path: bool = False,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Rebuild a checkpoint's model (its weights loaded onto `device`) and held-out data, run
    the suite there, add the training time; a path is read here (`read_fit_checkpoint`), a
    `FitCheckpoint` is not read again. The data is `data_config`'s (the user's) or else the
    recorded datamodule (`recorded_datamodule`)."""
    if not isinstance(checkpoint, FitCheckpoint):
        checkpoint = read_fit_checkpoint(
            checkpoint, trusted=trusted, trust_class_path=trust_class_path
        )
    data, where = evaluation_data(data_config, checkpoint)
    model = checkpoint.classifier(device)
    result = evaluate_on_split(
        model, data, settings, split, progress=progress, threads=threads, where=where,
        device=device,
    )  # fmt: skip
    if checkpoint.recorded.get("training_seconds") is not None:
        result["training_seconds"] = checkpoint.recorded["training_seconds"]
    if checkpoint.meta["epoch"] is not None:
        result["epoch"] = int(checkpoint.meta["epoch"])
    result["checkpoint"] = str(checkpoint.path)
    result["split"] = split
    return result


def evaluation_data(
    data_config: str | None, checkpoint: FitCheckpoint | None = None
) -> tuple[dict[str, Any] | LightningDataModule, str]:
    """The data a model is evaluated on, and where its settings came from (for errors): the
    `data:` section of `--data-config` (the user's, `data_config_from_yaml`), else the
    datamodule `checkpoint` records (`FitCheckpoint.datamodule`: no download, no new folder).
    `robust-train evaluate` and `compare` resolve it here for a checkpoint (`--ckpt`) and for a
    model given by `--model` alike.

    Raises:
        ValueError: no `data_config`, and no checkpoint, or one that records no datamodule.
    """
    if data_config:
        return data_config_from_yaml(data_config), f"`--data-config` {data_config!r}"
    data = None if checkpoint is None else checkpoint.datamodule()
    if checkpoint is None or data is None:
        what = "the model" if checkpoint is None else f"checkpoint {str(checkpoint.path)!r}"
        raise ValueError(f"{what} records no datamodule; pass --data-config CONFIG.yaml")
    return data, f"the datamodule recorded in {str(checkpoint.path)!r}"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def export_checkpoint(
    src: str | Path,
    dst: str | Path,
    *,
    trusted: bool = False,
    overwrite: bool = False,
    trust_class_path: bool = False,
) -> Path:
    """Write a small copy of a fit checkpoint: weights and rebuild metadata, no optimizer state.

    The copy loads with `load_classifier`, `robust-train evaluate` and `compare`, and as
    `init_checkpoint` for fine-tuning; it cannot resume training. It always loads tensors-only:
    anything else (Python objects a trusted `src` held) is written as plain values or its repr.
    `dst` must not be `src` (the same file, also through a link), must not exist unless
    `overwrite`, and is never a symlink, a device node or a FIFO; it is written to a temporary
    file and renamed, so a killed export, or one that meets a full disk (`DiskFullError`),
    leaves no truncated file. A recorded class path outside the installed packages is copied as
    text, not imported (unless `trust_class_path`).
    """
    src, dst = check_input_file(src, "src"), Path(dst)
    if _same_file(src, dst) or dst.resolve() == src.resolve():
        raise OutputError(
            f"`dst` {str(dst)!r} is `src` {str(src)!r}: the export would replace the checkpoint "
            "it reads; pick another dst"
        )
    check_output(dst, overwrite=overwrite, flag="dst")
    ckpt = _read(src, trusted)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "robust_train" not in ckpt:
        raise CheckpointError(
            f"`src` {str(src)!r} is not a checkpoint written by `robust-train fit`"
        )
    _meta(ckpt, src, trust_class_path, copy_only=True)
    small = {k: checkpoint_safe(ckpt[k]) for k in KEEP_KEYS if k in ckpt and k != "state_dict"}
    small["state_dict"] = {
        k: checkpoint_safe(v) for k, v in ckpt["state_dict"].items() if k.startswith("model.")
    }

    return write_stream(dst, partial(torch.save, small), overwrite=overwrite, flag="dst")
