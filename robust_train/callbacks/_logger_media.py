"""Send a monitor's figures and curves to the Trainer's loggers, never stopping training.

W&B loggers (WandbLogger, SafeWandbLogger) get the example grids as `wandb.Image`s through
`logger.log_image` and the fidelity curves as a `wandb.plot.line_series` chart. Every other logger
gets PNG files under `<log_dir>/robustness/epoch_XXX_<name>.png`. A failing logger is reported in
one warning and skipped for the rest of the run; the other loggers and training go on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger, WandbLogger
from pytorch_lightning.utilities import rank_zero_warn

from robust_train.callbacks.figures import Report, render_curves, render_examples, save_png
from robust_train.core.lightning_compat import lightning_classes


class MediaWriter:
    """Logs a `Report`'s media (rank zero only) and, at fit end, its scalars, per logger.

    Args:
        owner: name of the callback, for the warning.

    Examples:
        >>> writer = MediaWriter("FragilityMonitor")
        >>> writer.failed
        []
    """

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.failed: list[str] = []
        self._failed_ids: set[int] = set()

    def write_media(self, trainer: pl.Trainer, report: Report, epoch: int) -> None:
        """Log the example grids and curves of `report` to every logger of `trainer`."""
        if not trainer.is_global_zero or not (report.examples or report.curves):
            return
        cache: dict[str, np.ndarray] = {}
        written_dirs: set[Path] = set()
        for logger in trainer.loggers:
            if id(logger) in self._failed_ids:
                continue
            try:
                if isinstance(logger, lightning_classes("loggers.WandbLogger")):  # either package
                    self._to_wandb(logger, report, trainer.global_step, cache)  # type: ignore[arg-type]
                else:
                    folder = log_dir(logger, trainer) / "robustness"
                    if folder not in written_dirs:
                        written_dirs.add(folder)
                        self._to_files(folder, report, epoch, cache)
            except Exception as err:  # noqa: BLE001 - media must never stop training
                self._fail(logger, "media", err)

    def write_scalars(self, trainer: pl.Trainer, scalars: dict[str, float]) -> None:
        """Log scalars straight to the loggers (where `LightningModule.log` is not allowed)."""
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if id(logger) in self._failed_ids:
                continue
            try:
                logger.log_metrics(scalars, step=trainer.global_step)
                logger.save()
            except Exception as err:  # noqa: BLE001 - logging must never stop training
                self._fail(logger, "scalars", err)

    def _fail(self, logger: Logger, what: str, err: Exception) -> None:
        self._failed_ids.add(id(logger))
        message = f"{type(logger).__name__}: {type(err).__name__}: {err}"
        self.failed.append(message)
        rank_zero_warn(
            f"{self.owner}: logging {what} failed ({message}); this monitor sends nothing more "
            "to this logger for the rest of the run, training continues."
        )

    @staticmethod
    def _to_wandb(
        logger: WandbLogger, report: Report, step: int, cache: dict[str, np.ndarray]
    ) -> None:
        for key, ex in report.examples.items():
            image = cache.setdefault(key, render_examples(ex))
            logger.log_image(key=key, images=[image], step=step, caption=[ex.caption])
        if report.curves:
            import wandb

            charts: dict[str, Any] = {}
            for key, c in report.curves.items():
                charts[key] = wandb.plot.line_series(
                    xs=c.xs,
                    ys=list(c.lines.values()),
                    keys=list(c.lines),
                    title=c.title,
                    xname=c.xname,
                )
            logger.log_metrics(charts, step=step)

    @staticmethod
    def _to_files(folder: Path, report: Report, epoch: int, cache: dict[str, np.ndarray]) -> None:
        for key, ex in report.examples.items():
            save_png(cache.setdefault(key, render_examples(ex)), folder / png_name(key, epoch))
        for key, c in report.curves.items():
            save_png(cache.setdefault(key, render_curves(c)), folder / png_name(key, epoch))


def png_name(key: str, epoch: int) -> str:
    """File name of a logged figure.

    Examples:
        >>> png_name("robustness/topk/examples", 3), png_name("fidelity/saliency/curves", 12)
        ('epoch_003_topk_examples.png', 'epoch_012_fidelity_saliency_curves.png')
    """
    slug = key.removeprefix("robustness/").replace("/", "_")
    return f"epoch_{epoch:03d}_{slug}.png"


def log_dir(logger: Logger, trainer: pl.Trainer) -> Path:
    """The run folder of a (non-W&B) logger: its `log_dir`, else the Trainer's, else `save_dir`."""
    for candidate in (getattr(logger, "log_dir", None), trainer.log_dir, logger.save_dir):
        if candidate:
            return Path(candidate)
    return Path(trainer.default_root_dir)
