"""A Weights & Biases logger that is offline by default and never stops training.

W&B is the default logger of `robust-train fit`. Runs are written under `runs/` in offline mode
(sync later with `wandb sync runs/wandb/offline-run-*`); a run goes online only when the user asks
(`--trainer.logger.init_args.offline=false` or WANDB_MODE=online, with a key from `wandb login`).
If W&B cannot start or a log call fails (no server, no key, a full disk), training goes on: the
failure is reported once as a warning. A run that cannot start drops every later call; a failing
kind of call (say, images) drops later calls of that kind only, so scalars keep arriving.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only, rank_zero_warn


class SafeWandbLogger(WandbLogger):
    """WandbLogger with offline default and failures turned into one warning.

    Args:
        save_dir: where runs are written (default "runs").
        project: W&B project name.
        offline: None = offline unless the environment says WANDB_MODE=online.
        **kwargs: passed to WandbLogger / wandb.init.

    Example:
        >>> logger = SafeWandbLogger(save_dir="runs", name="demo")
        >>> logger.is_offline
        True
    """

    def __init__(self, save_dir: str = "runs", project: str = "robust-train", offline: bool | None = None,
                 **kwargs: Any) -> None:
        if offline is None:
            offline = os.environ.get("WANDB_MODE", "offline").lower() != "online"
        # Absolute: W&B's writer is a separate long-lived process with a working directory of its own.
        save_dir = os.path.abspath(save_dir)
        os.makedirs(save_dir, exist_ok=True)
        kwargs.setdefault("log_model", False)
        super().__init__(save_dir=save_dir, project=project, offline=offline, **kwargs)
        self.is_offline = offline
        self.failed: str | None = None  # set when the run itself could not start
        self.failures: dict[str, str] = {}  # kind of call -> first error

    def _guard(self, what: str, fn: Callable[[], Any]) -> Any:
        if self.failed is not None or what in self.failures:
            return None
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - any logging failure must not kill training
            self.failures[what] = f"{type(err).__name__}: {err}"
            scope = "all W&B logging" if what == "starting the run" else f"W&B {what} calls"
            rank_zero_warn(f"W&B {what} failed ({self.failures[what]}); {scope} skipped for the rest of this run. "
                           "Training continues and checkpoints are still written.")
            if what == "starting the run":
                self.failed = self.failures[what]
            return None

    @property
    def experiment(self) -> Any:
        if self.failed is not None:
            return None
        return self._guard("starting the run", lambda: WandbLogger.experiment.fget(self))  # type: ignore[attr-defined]

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        self._guard("log_hyperparams", lambda: super(SafeWandbLogger, self).log_hyperparams(params))

    @rank_zero_only
    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self._guard("log_metrics", lambda: super(SafeWandbLogger, self).log_metrics(metrics, step))

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        self._guard("log_image", lambda: super(SafeWandbLogger, self).log_image(key, images, step, **kwargs))

    @rank_zero_only
    def log_table(self, key: str, columns: Any = None, data: Any = None, dataframe: Any = None,
                  step: int | None = None) -> None:
        self._guard("log_table", lambda: super(SafeWandbLogger, self).log_table(key, columns, data, dataframe, step))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self._guard("after_save_checkpoint", lambda: super(SafeWandbLogger, self).after_save_checkpoint(checkpoint_callback))

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self._guard("finalize", lambda: super(SafeWandbLogger, self).finalize(status))
