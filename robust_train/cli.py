"""`robust-train` command line: LightningCLI subcommands plus evaluation commands.

    robust-train fit --config configs/digits_smoothness.yaml
    robust-train test --config configs/digits_smoothness.yaml --ckpt_path checkpoints/digits_smoothness/last.ckpt

Checkpoints go to checkpoints/<experiment>/ (best by val/acc, and last.ckpt); the default logger is
W&B in offline mode under runs/ (see robust_train.loggers.SafeWandbLogger); any Lightning logger
can replace it with --trainer.logger.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytorch_lightning import LightningDataModule
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from robust_train.module import RobustClassifier

DEFAULT_LOGGER = {
    "class_path": "robust_train.loggers.SafeWandbLogger",
    "init_args": {"save_dir": "runs", "project": "robust-train"},
}


class SaveConfigNextToCheckpoints(SaveConfigCallback):
    """Write the resolved config as config.yaml in the checkpoint folder (not the working directory)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved or trainer.checkpoint_callback is None or not trainer.checkpoint_callback.dirpath:
            return
        if trainer.is_global_zero:
            folder = Path(trainer.checkpoint_callback.dirpath)
            folder.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, str(folder / self.config_filename), skip_none=False, overwrite=True,
                             multifile=self.multifile)
        self.already_saved = True


class RobustCLI(LightningCLI):
    """LightningCLI with an `experiment` name that places checkpoints and names the run."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--experiment", type=str, default="default",
                            help="run name; checkpoints go to <checkpoint_root>/<experiment>/")
        parser.add_argument("--checkpoint_root", type=str, default="checkpoints",
                            help="folder that holds one checkpoint folder per experiment")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": "val/acc",
            "checkpoint.mode": "max",
            "checkpoint.save_last": True,
            "checkpoint.filename": "best",
            "checkpoint.auto_insert_metric_name": False,
        })

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        experiment = config.get("experiment") or "default"
        if config.get("checkpoint") is not None and not config.checkpoint.get("dirpath"):
            config.checkpoint.dirpath = f"{config.checkpoint_root}/{experiment}"
        logger = config.trainer.get("logger")
        if _is_default_logger(logger) and not logger.init_args.get("name"):
            logger.init_args.name = experiment


def _is_default_logger(logger: Any) -> bool:
    return logger is not None and not isinstance(logger, (bool, list)) and \
        str(getattr(logger, "class_path", "")).endswith("SafeWandbLogger")


def lightning_main(args: Sequence[str] | None = None, run: bool = True) -> RobustCLI:
    """Run (or, with run=False, only build) the LightningCLI for RobustClassifier."""
    return RobustCLI(
        RobustClassifier,
        LightningDataModule,
        subclass_mode_data=True,
        trainer_defaults={"logger": DEFAULT_LOGGER},
        save_config_callback=SaveConfigNextToCheckpoints,
        save_config_kwargs={"overwrite": True},
        args=list(args) if args is not None else None,
        run=run,
        auto_configure_optimizers=False,
    )


def _demo(argv: list[str]) -> int:
    from robust_train.demo import main as demo_main

    return demo_main(argv)


def _evaluate(argv: list[str]) -> int:
    from robust_train.commands import evaluate_main

    return evaluate_main(argv)


def _compare(argv: list[str]) -> int:
    from robust_train.commands import compare_main

    return compare_main(argv)


def _export(argv: list[str]) -> int:
    from robust_train.commands import export_main

    return export_main(argv)


EXTRA_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "demo": _demo, "evaluate": _evaluate, "compare": _compare, "export": _export,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `robust-train` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in EXTRA_COMMANDS:
        return EXTRA_COMMANDS[argv[0]](argv[1:])
    lightning_main(argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
