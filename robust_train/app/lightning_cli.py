"""The LightningCLI runner behind `robust-train fit|validate|test|predict`.

    robust-train fit --config configs/digits_smoothness.yaml
    robust-train fit --config configs/digits_smoothness.yaml --ckpt_path last       # resume
    robust-train test --config configs/digits_smoothness.yaml --ckpt_path best

Run folders (their lifecycle: robust_train.training.run_folder): each fit writes to
`<checkpoint_root>/<experiment>/version_<N>/` (best.ckpt, last.ckpt, config.yaml; claimed with an
exclusive mkdir, so fits started at the same moment get a folder each, and printed at the end), and
`<checkpoint_root>/<experiment>/latest` points to the newest. `--experiment` is a plain run name
(one folder name: no path separator, not `..`, not absolute). `--ckpt_path last` / `best` name the
checkpoints of that latest run (a `--ckpt_path` that is a symlink is read only when it points to a
regular file in its own folder: `check_resume_link`); a fit resumed from a checkpoint inside a run
folder continues in that folder (and in the same W&B run). The model is always built from the config
given (`--config`, flags); the checkpoint supplies weights and training state and must fit that
model. The default logger is W&B, offline, under runs/
(robust_train.training.loggers.SafeWandbLogger). Parse errors are one line with a "did you mean"
(robust_train.app.parse_errors); options are never abbreviated. `--config` and `--ckpt_path` take
shipped files by name too (`--config mnist5k_baseline`; robust_train.app.shipped_files), and the
relative paths inside a shipped config name shipped files. `--trainer.limit_train_batches 1` is one
batch and `1.0` the whole epoch, as Lightning means them (`RobustTrainer`). Before training, one
probe forward checks the model's outputs against the data's classes
(`robust_train.models.input_check`), and a fit that fails leaves nothing behind: its run folder, its
W&B run and what Lightning's own loggers wrote (`--trainer.logger null`: lightning_logs/version_N)
are removed when no checkpoint was saved.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse.typing import PositiveInt
from pytorch_lightning import LightningDataModule, Trainer
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from pytorch_lightning.utilities.exceptions import SIGTERMException

from robust_train.app.parse_errors import describe_parse_error
from robust_train.app.shipped_files import lightning_arguments
from robust_train.core.files import write_text
from robust_train.core.lightning_noise import quiet_lightning
from robust_train.core.runtime import set_threads
from robust_train.core.yaml_bounds import check_yaml_aliases
from robust_train.models.config import record_config
from robust_train.models.input_check import DataMismatchError, check_model_fits_data
from robust_train.models.loading import CheckpointError, read_checkpoint
from robust_train.training.checkpointing import RunCheckpoint
from robust_train.training.loggers import SafeWandbLogger
from robust_train.training.module import RobustClassifier
from robust_train.training.run_folder import (
    RunFolder,
    check_resume_link,
    check_run_name,
    keyword_checkpoint,
)

__all__ = [
    "DEFAULT_LOGGER",
    "RobustCLI",
    "RobustTrainer",
    "check_resume_link",
    "bound_yaml_values",
    "check_run_name",
    "lightning_main",
    "run_subcommand",
]

DEFAULT_LOGGER = {
    "class_path": "robust_train.training.loggers.SafeWandbLogger",
    "init_args": {"save_dir": "runs", "project": "robust-train"},
}
KEYWORD_CHECKPOINTS = ("last", "best")


class RobustTrainer(Trainer):
    """Lightning's Trainer with `limit_*_batches` typed `int | float | None`: from a config or
    the command line `1` is one batch and `1.0` the whole split, as Lightning means them.
    (Trainer annotates them `float | int`, so the parser would read `1` as `1.0`: all batches.)

    Examples:
        >>> RobustTrainer(limit_train_batches=1, logger=False).limit_train_batches
        1
    """

    def __init__(
        self,
        *,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        **kwargs: Any,
    ) -> None:
        limits: dict[str, Any] = {
            "limit_train_batches": limit_train_batches,
            "limit_val_batches": limit_val_batches,
            "limit_test_batches": limit_test_batches,
            "limit_predict_batches": limit_predict_batches,
        }
        super().__init__(**{k: v for k, v in limits.items() if v is not None}, **kwargs)


class QuietParser(LightningArgumentParser):
    """Parse errors raise (jsonargparse's ArgumentError) as one line with a "did you mean" where a
    known option is close (robust_train.app.parse_errors), instead of printing the whole usage; the
    console script prints them (robust_train.app.cli). Options are never abbreviated:
    `--trainer.max_epoch 1` is an error, not `--trainer.max_epochs 1`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["exit_on_error"] = False
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> Any:
        return super().error(describe_parse_error(message, ex, self), ex)


class SaveConfigToRun(SaveConfigCallback):
    """The resolved config: config.yaml in the run folder (fit only), the W&B run config (every
    key: optimizer, model and penalty arguments, trainer settings) and config.yaml in the W&B run's
    files."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        folder = getattr(trainer.checkpoint_callback, "dirpath", None)
        if stage == "fit" and folder and trainer.is_global_zero:
            text = self.parser.dump(self.config, skip_none=False)
            write_text(Path(folder) / self.config_filename, text, overwrite=True)
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer: Any, pl_module: Any, stage: str) -> None:
        text = self.parser.dump(self.config, skip_none=False)
        config = yaml.safe_load(text)
        config.pop("config", None)  # the paths of the --config files, not settings
        describe = getattr(pl_module, "run_config", None)  # model class, penalty terms
        if callable(describe):
            config.update(describe())
        for logger in trainer.loggers:
            logger.log_hyperparams(config)
            save_file = getattr(logger, "save_file", None)
            if callable(save_file):
                save_file(self.config_filename, text)


class RobustCLI(LightningCLI):
    """LightningCLI with run folders, resume by keyword, `--threads` and one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Only the parser of the subcommand that the command line names: LightningCLI builds one
        # for each subcommand (fit, validate, test, predict), each reading the trainer's, model's
        # and data's signatures anew, which made more than half of a command's parsing time.
        argv = kwargs.get("args")
        argv = sys.argv[1:] if argv is None else argv
        first = argv[0] if isinstance(argv, (list, tuple)) and argv else None
        every = type(self).subcommands()
        if kwargs.get("run", True) and first in every:
            only = {first: every[first]}
            self.subcommands = lambda: only  # type: ignore[method-assign]
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--experiment",
            type=str,
            default="default",
            help="run name; checkpoints go to <checkpoint_root>/<experiment>/version_<N>/",
        )
        parser.add_argument(
            "--checkpoint_root",
            type=str,
            default="checkpoints",
            help="folder that holds one folder per experiment",
        )
        parser.add_argument(
            "--threads",
            type=PositiveInt | None,
            default=None,
            help="torch CPU threads (default: 1 for models under a million parameters, "
            "where one thread is fastest, else torch's default)",
        )
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/acc",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                "checkpoint.filename": "best",
                "checkpoint.auto_insert_metric_name": False,
                "checkpoint.save_on_train_epoch_end": True,
                "checkpoint.enable_version_counter": False,
            }
        )

    def _parse_ckpt_path(self) -> None:
        """Resolve `--ckpt_path last|best` and read the checkpoint once (clear errors when it is
        missing or corrupt). Unlike LightningCLI, hyper-parameters stored in the checkpoint are not
        fed back to the parser: the config given builds the model; the checkpoint must fit it."""
        self.resume_checkpoint: dict[str, Any] | None = None
        if not self.config.get("subcommand"):
            return
        config = self.config[self.config.subcommand]
        check_run_name(config.get("experiment") or "default")
        path = config.get("ckpt_path")
        if not path:
            return
        if path in KEYWORD_CHECKPOINTS and not Path(path).exists():
            path = keyword_checkpoint(
                path, config.checkpoint_root, config.get("experiment") or "default"
            )
        path = config.ckpt_path = check_resume_link(path)
        trusted = config.get("weights_only") is False  # Lightning's own opt-in to full unpickling
        ckpt = read_checkpoint(path, trusted=trusted, opt_in="pass --weights_only false")
        if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
            raise CheckpointError(
                f"`--ckpt_path` {path!r} is not a Lightning checkpoint (no 'state_dict')"
            )
        self.resume_checkpoint = {
            "resumable": self.config.subcommand != "fit" or "optimizer_states" in ckpt,
            "path": str(Path(path).resolve()),
            "shapes": _tensor_shapes(ckpt["state_dict"]),
            "wandb_run": ckpt.get("wandb_run"),
        }

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        experiment = check_run_name(config.get("experiment") or "default")
        resume = getattr(self, "resume_checkpoint", None)
        self.run_folder = RunFolder()
        if config.get("checkpoint") is not None and not config.checkpoint.get("dirpath"):
            folder = self.run_folder.choose(
                config.checkpoint_root, experiment, self.subcommand, (resume or {}).get("path")
            )
            config.checkpoint.dirpath = str(folder)
        logger = config.trainer.get("logger")
        if _is_wandb_logger(logger):
            if _is_default_logger(logger) and not logger.init_args.get("name"):
                logger.init_args.name = experiment
            run = (resume or {}).get("wandb_run") or {}
            if run.get("id") and not logger.init_args.get("id"):
                logger.init_args.id = run["id"]  # continue the run the checkpoint belongs to

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except BaseException:
            self._release()
            raise

    def after_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        set_threads(self.model, config.get("threads"))
        # a model class without RecordsConfig: checkpoints record the config section that built it
        record_config(getattr(self.model, "model", None), (config.get("model") or {}).get("model"))
        resume = getattr(self, "resume_checkpoint", None)
        self._folder().track(self.trainer)
        try:
            if resume is not None:
                _check_fits(resume, self.model)
                _check_resumable(resume)
            if self.datamodule is not None:
                check_model_and_data(self.model, self.datamodule)
        except Exception:
            for logger in self.trainer.loggers:  # the fit will not start: leave nothing behind
                if isinstance(logger, SafeWandbLogger):
                    logger.finalize("failed")
            self._release()
            raise

    def _folder(self) -> RunFolder:
        """This command's run folder (none claimed before `before_instantiate_classes`)."""
        if getattr(self, "run_folder", None) is None:
            self.run_folder = RunFolder()
        return self.run_folder

    def _release(self) -> None:
        """Remove the run folder this command claimed, and what Lightning's own loggers wrote,
        when no checkpoint was saved (`RunFolder.release`)."""
        self._folder().release()

    def _run_subcommand(self, subcommand: str) -> None:
        """Run it; an interrupted fit (Ctrl+C: Lightning exits with 1; SIGTERM) says what was saved
        and exits with 130 / 143; a fit that fails leaves nothing behind; a finished fit prints
        its run folder."""
        try:
            super()._run_subcommand(subcommand)
        except SIGTERMException:
            self._report_interrupt("SIGTERM")
            raise SystemExit(143) from None
        except SystemExit:
            if getattr(self.trainer, "interrupted", False):
                self._report_interrupt("interrupt")
                raise SystemExit(130) from None
            self._release_if_unsaved(subcommand)
            raise
        except BaseException:
            self._release_if_unsaved(subcommand)
            raise
        self._release_if_unsaved(subcommand)
        folder = getattr(self.trainer.checkpoint_callback, "dirpath", None)
        if subcommand == "fit" and folder and any(Path(folder).glob("*.ckpt")):
            names = ", ".join(sorted(p.name for p in Path(folder).iterdir()))
            print(f"run folder: {folder} ({names})", flush=True)

    def _release_if_unsaved(self, subcommand: str) -> None:
        callback = self.trainer.checkpoint_callback
        if subcommand == "fit" and not getattr(callback, "_saved_this_run", False):
            self._release()

    def _report_interrupt(self, what: str) -> None:
        last = getattr(self.trainer.checkpoint_callback, "last_model_path", "")
        saved = (
            f"{last} holds the last finished epoch; resume with --ckpt_path {last}"
            if last
            else "no epoch had finished, nothing was saved"
        )
        print(f"robust-train: {self.subcommand} stopped by {what}; {saved}", file=sys.stderr)


def _tensor_shapes(state: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor of a state dict (a module's extra state, which is not a tensor,
    such as a distillation term's snapshot, is left out on both sides of `_check_fits`)."""
    return {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}


def _check_fits(resume: dict[str, Any], model: torch.nn.Module) -> None:
    """Refuse a checkpoint whose weights do not fit the configured model, before any work."""
    own = _tensor_shapes(model.state_dict())
    stored = resume["shapes"]
    missing = sorted(set(own) - set(stored))
    unexpected = sorted(set(stored) - set(own))
    shapes = [
        f"{k} {stored[k]} vs {own[k]}"
        for k in sorted(set(own) & set(stored))
        if own[k] != stored[k]
    ]
    if missing or unexpected or shapes:
        details = "; ".join(
            part
            for part in (
                f"{len(missing)} missing key(s) e.g. {missing[0]}" if missing else "",
                f"{len(unexpected)} unexpected key(s) e.g. {unexpected[0]}" if unexpected else "",
                f"{len(shapes)} shape mismatch(es) e.g. {shapes[0]} (checkpoint vs model)"
                if shapes
                else "",
            )
            if part
        )
        name = type(getattr(model, "model", model)).__name__
        raise CheckpointError(
            f"checkpoint {resume['path']!r} does not fit the configured model "
            f"({name}): {details}; pass the config it was trained with"
        )


def _check_resumable(resume: dict[str, Any]) -> None:
    """Refuse to resume a fit from a checkpoint of weights alone (best.ckpt), before any work."""
    if not resume.get("resumable", True):
        path = resume["path"]
        raise CheckpointError(
            f"`--ckpt_path` {path!r} holds weights only (no optimizer or loop state: best.ckpt "
            "is written so), so a fit cannot resume from it: resume with `--ckpt_path last`, or "
            f"start a new fit from these weights with `--model.init_checkpoint {path}`"
        )


def check_model_and_data(module: Any, datamodule: Any) -> None:
    """Refuse, before training, a model whose outputs (or `num_classes`) do not match the data's
    classes, or that cannot take the data's images: one probe forward
    (`robust_train.models.input_check.check_model_fits_data`); the data module's own errors
    (such as an empty class folder) are raised as they are."""
    try:
        classes = getattr(datamodule, "num_classes", None)
    except NotImplementedError:
        classes = None
    net = getattr(module, "model", module)
    check_model_fits_data(net, datamodule)
    declared = getattr(module, "num_classes", None)
    if isinstance(classes, int) and isinstance(declared, int) and declared != classes:
        raise DataMismatchError(
            f"`--model.num_classes` {declared} does not match the data: the model "
            f"({type(net).__name__}) has {declared} classes but the data "
            f"({type(datamodule).__name__}) has {classes} classes"
        )


def _is_wandb_logger(logger: Any) -> bool:
    return (
        logger is not None
        and not isinstance(logger, (bool, list))
        and str(getattr(logger, "class_path", "")).endswith("WandbLogger")
    )


def _is_default_logger(logger: Any) -> bool:
    return _is_wandb_logger(logger) and str(logger.class_path).endswith("SafeWandbLogger")


def bound_yaml_values() -> None:
    """Make jsonargparse refuse YAML whose aliases would expand beyond the bound
    (robust_train.core.yaml_bounds) in every value it loads: flags given as YAML and config
    files named inside a config, as well as `--config` (checked before parsing). Idempotent."""
    from jsonargparse import get_loader, set_loader

    loader = get_loader("yaml")
    if getattr(loader, "bounded", False):
        return

    def bounded(text: Any) -> Any:
        if isinstance(text, str):
            check_yaml_aliases(text, "a YAML value")
        return loader(text)

    bounded.bounded = True  # type: ignore[attr-defined]
    set_loader("yaml", bounded, exceptions=(yaml.YAMLError,))


def lightning_main(args: Sequence[str] | None = None, run: bool = True) -> RobustCLI:
    """Run (or, with run=False, only build) the LightningCLI for RobustClassifier.

    Examples:
        >>> sorted(RobustCLI.subcommands())
        ['fit', 'predict', 'test', 'validate']
    """
    quiet_lightning()
    bound_yaml_values()
    return RobustCLI(
        RobustClassifier,
        LightningDataModule,
        subclass_mode_data=True,
        trainer_class=RobustTrainer,
        trainer_defaults={"logger": DEFAULT_LOGGER},
        save_config_callback=SaveConfigToRun,
        save_config_kwargs={"overwrite": True},
        parser_class=QuietParser,
        args=lightning_arguments(args) if args is not None else None,
        run=run,
        auto_configure_optimizers=False,
    )


def run_subcommand(argv: list[str]) -> int:
    """`robust-train fit|validate|test|predict ...` (argv starts with the subcommand)."""
    lightning_main(argv)
    return 0
