"""A Weights & Biases logger that is offline by default and never stops training.

W&B is the default logger of `robust-train fit`. Runs are written under `runs/` in offline mode
(sync later with `wandb sync runs/wandb/offline-run-*`); a run goes online only when the user asks
(`--trainer.logger.init_args.offline=false` or WANDB_MODE=online, with a key from `wandb login`).
An online run whose server cannot be reached (a TCP connection to `WANDB_BASE_URL`, by default
api.wandb.ai, within ROBUST_TRAIN_WANDB_TIMEOUT seconds, 5 by default) is written offline
instead, with one warning, rather than waiting for W&B's own timeout and logging nothing.
If W&B cannot start or a log call fails (no server, no key, a full disk), training goes on: the
failure is reported once as a warning. A run that cannot start drops every later call; a failing
kind of call (say, images) drops later calls of that kind only, so scalars keep arriving. A fit
that stops on an error or a signal (Ctrl+C, SIGTERM) is finished as failed (exit code 1), not as
a success.

Run records: `robust-train fit` logs the full resolved config as the run config and config.yaml
in the run's files; at the end of a fit the run summary gets the best and last checkpoints
(`checkpoint/best_path`, `checkpoint/best_score`, `checkpoint/monitor`, `checkpoint/last_path`);
`robust-train evaluate` adds its numbers to the summary of the run a checkpoint came from
(`eval/...`, see `record_evaluation`). A fit that fails before its first checkpoint, or one that
ends without a training step (`--trainer.max_epochs 0`), leaves no run: it is finished as failed
and, offline, its folder, the `debug*.log` links W&B made to it and the folders this logger
created (`runs/`, `runs/wandb/`, when they are then empty) are removed.

Checkpoint artifacts (`log_model=True` or "all") work offline too: W&B records the artifact in
the offline run and uploads the checkpoint files with `wandb sync`.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities import rank_zero_only, rank_zero_warn

from robust_train.core.files import write_text


class SafeWandbLogger(WandbLogger):
    """WandbLogger with offline default and failures turned into one warning.

    Args:
        save_dir: where runs are written (default "runs").
        project: W&B project name.
        offline: None = offline unless the environment says WANDB_MODE=online.
        **kwargs: passed to WandbLogger / wandb.init.

    Examples:
        >>> logger = SafeWandbLogger(save_dir="runs", name="demo")
        >>> logger.is_offline
        True
    """

    def __init__(
        self,
        save_dir: str = "runs",
        project: str = "robust-train",
        offline: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if offline is None:
            offline = os.environ.get("WANDB_MODE", "offline").lower() != "online"
        # Absolute: W&B's writer is a separate long-lived process with a working directory of
        # its own.
        save_dir = os.path.abspath(save_dir)
        # the folders this run creates, deepest first: removed again if the run is discarded
        self._created_dirs = [
            d for d in (os.path.join(save_dir, "wandb"), save_dir) if not os.path.isdir(d)
        ]
        self._run_root = save_dir  # created when the run starts: a fit that fails first leaves none
        log_model = kwargs.pop("log_model", False)
        # WandbLogger refuses log_model offline, yet W&B records artifacts offline and uploads
        # them with `wandb sync`: set it after the check.
        super().__init__(
            save_dir=save_dir, project=project, offline=offline, log_model=False, **kwargs
        )
        self._log_model = log_model
        if self._wandb_init.get("anonymous") is None:
            self._wandb_init.pop("anonymous", None)  # W&B warns on every run when it is passed
        self.is_offline = offline
        self.failed: str | None = None  # set when the run itself could not start
        self.failures: dict[str, str] = {}  # kind of call -> first error
        self.checkpoint_saved = False  # a checkpoint was written while this logger was attached
        self.empty_fit = False  # set by RunCheckpoint when a fit ended without a training step
        self._checkpoint_callback: Any = None

    def _guard(self, what: str, fn: Callable[[], Any]) -> Any:
        if self.failed is not None or what in self.failures:
            return None
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - any logging failure must not kill training
            self.failures[what] = f"{type(err).__name__}: {err}"
            scope = "all W&B logging" if what == "starting the run" else f"W&B {what} calls"
            rank_zero_warn(
                f"W&B {what} failed ({self.failures[what]}); {scope} skipped for the rest of "
                "this run. "
                "Training continues and checkpoints are still written."
            )
            if what == "starting the run":
                self.failed = self.failures[what]
            return None

    @property
    def experiment(self) -> Any:
        if self.failed is not None:
            return None

        def start() -> Any:
            if self._experiment is None:
                os.makedirs(self._run_root, exist_ok=True)
                self._offline_when_unreachable()
            return WandbLogger.experiment.fget(self)  # type: ignore[attr-defined]

        return self._guard("starting the run", start)

    def _offline_when_unreachable(self) -> None:
        """Go offline, with one warning, when an online run's server cannot be reached."""
        if self.is_offline:
            return
        url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
        timeout = float(os.environ.get("ROBUST_TRAIN_WANDB_TIMEOUT", "5"))
        problem = server_unreachable(url, timeout)
        if problem is None:
            return
        rank_zero_warn(
            f"W&B server {url} cannot be reached ({problem}); this run is written offline "
            f"under {self._run_root}/wandb instead (upload it later with `wandb sync`)"
        )
        self.is_offline = self._offline = True
        self._wandb_init["mode"] = "offline"

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        self._guard("log_hyperparams", lambda: super(SafeWandbLogger, self).log_hyperparams(params))

    @rank_zero_only
    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self._guard("log_metrics", lambda: super(SafeWandbLogger, self).log_metrics(metrics, step))

    @rank_zero_only
    def log_image(
        self, key: str, images: list[Any], step: int | None = None, **kwargs: Any
    ) -> None:
        self._guard(
            "log_image", lambda: super(SafeWandbLogger, self).log_image(key, images, step, **kwargs)
        )

    @rank_zero_only
    def log_table(
        self,
        key: str,
        columns: Any = None,
        data: Any = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        self._guard(
            "log_table",
            lambda: super(SafeWandbLogger, self).log_table(key, columns, data, dataframe, step),
        )

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self.checkpoint_saved = True
        self._checkpoint_callback = checkpoint_callback
        self._guard(
            "after_save_checkpoint",
            lambda: super(SafeWandbLogger, self).after_save_checkpoint(checkpoint_callback),
        )

    @rank_zero_only
    def save_file(self, name: str, text: str) -> None:
        """Write `text` as `name` in the run's files (uploaded with the run)."""

        def write() -> None:
            run = self.experiment
            if run is not None and getattr(run, "dir", None):
                write_text(Path(run.dir) / name, text, overwrite=True)

        self._guard("save_file", write)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        new_run = self._id is None  # a run resumed by id (a resumed fit, `test`) is never discarded
        if new_run and not self.checkpoint_saved and (status != "success" or self.empty_fit):
            if self._experiment is not None:
                self._guard("finalize", self._discard_run)
            self._remove_created_dirs()
            return
        self._guard("finalize", lambda: super(SafeWandbLogger, self).finalize(status))
        if status == "success":
            self._guard("summary", self._summarize_checkpoints)
        elif self._experiment is not None:  # stopped by an error or a signal: not a success
            self._guard("finalize", self._finish_failed)

    def _finish_failed(self) -> None:
        run = self._experiment
        if run is not None:
            run.finish(exit_code=1)
        self.failed = "the run was finished as failed"  # nothing is logged to it after

    def _summarize_checkpoints(self) -> None:
        callback, run = self._checkpoint_callback, self._experiment
        if callback is None or run is None:
            return
        summary = {
            "checkpoint/best_path": getattr(callback, "best_model_path", "") or None,
            "checkpoint/last_path": getattr(callback, "last_model_path", "") or None,
            "checkpoint/monitor": getattr(callback, "monitor", None),
        }
        score = getattr(callback, "best_model_score", None)
        if score is not None:
            summary["checkpoint/best_score"] = float(score)
        run.summary.update({k: v for k, v in summary.items() if v is not None})

    def _discard_run(self) -> None:
        """A fit that failed before its first checkpoint: finish its run as failed and, offline,
        delete it (nothing in it can be resumed or compared)."""
        run, self._experiment = self._experiment, None
        if run is None:
            return
        folder = Path(run.dir).parent if getattr(run, "dir", None) else None
        if self.is_offline:
            try:
                run._settings.silent = True  # no "you can sync this run" for a run about to go
            except Exception:  # noqa: BLE001, S110 - cosmetic only
                pass
        run.finish(exit_code=1)
        if self.is_offline and folder is not None and folder.name.startswith("offline-run-"):
            shutil.rmtree(folder, ignore_errors=True)
            for name in ("latest-run", "debug.log", "debug-internal.log"):
                link = folder.parent / name  # W&B's links to the newest run, now dangling
                if link.is_symlink() and not link.exists():
                    link.unlink()

    def _remove_created_dirs(self) -> None:
        """Remove the folders this logger created, if nothing is left in them."""
        for folder in self._created_dirs:
            try:
                os.rmdir(folder)
            except OSError:  # not empty (other runs, other files) or already gone
                pass


def server_unreachable(url: str, timeout: float) -> str | None:
    """Why a TCP connection to the host of `url` fails within `timeout` seconds (None: it
    succeeds).

    Examples:
        >>> server_unreachable("http://127.0.0.1:1", 1.0) is not None  # nothing listens there
        True
    """
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return None
    except OSError as err:
        return f"{type(err).__name__}: {err}"


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}/{key}" if prefix else str(key), item, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)


def _run_folder_exists(run_id: str, save_dir: str, offline: bool) -> bool:
    """Offline: a folder of run `run_id` under `<save_dir>/wandb`; online: `save_dir` exists."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", run_id) or not os.path.isdir(save_dir):
        return False
    if not offline:
        return True
    runs = Path(save_dir) / "wandb"
    return runs.is_dir() and any(p.is_dir() for p in runs.glob(f"*-{run_id}*"))


def record_evaluation(
    wandb_run: Mapping[str, Any] | None, result: Mapping[str, Any], prefix: str = "eval"
) -> str | None:
    """Add the numbers of an evaluation to the summary of the W&B run a checkpoint came from.

    Args:
        wandb_run: `checkpoint["wandb_run"]` ({"id", "project", "save_dir"}), or None (no-op).
        result: nested dict of numbers (non-numbers are skipped), flattened to
            `<prefix>/<key>/<subkey>`.
        prefix: summary key prefix.

    Returns:
        The run id written to, or None when there was no run to write to or W&B failed (a warning
        says why; the evaluation itself is unaffected). The folder a checkpoint records is never
        created: offline, the run's own folder must be found under `<save_dir>/wandb`; online,
        `save_dir` must exist. Otherwise a note says the numbers are in the results only.

    Examples:
        >>> record_evaluation(None, {"accuracy": 0.9}) is None
        True
    """
    if not wandb_run or not wandb_run.get("id"):
        return None
    numbers: dict[str, float] = {}
    _flatten(prefix, result, numbers)
    offline = os.environ.get("WANDB_MODE", "offline").lower() != "online"
    save_dir = str(wandb_run.get("save_dir") or "runs")
    if not _run_folder_exists(str(wandb_run["id"]), save_dir, offline):
        print(
            f"note: W&B run {wandb_run['id']!r} is not under {save_dir!r} here; the numbers are "
            "not added to it (they are in the results)",
            file=sys.stderr,
        )
        return None
    try:
        import wandb

        run = wandb.init(
            id=wandb_run["id"],
            project=wandb_run.get("project"),
            dir=os.path.abspath(save_dir),
            resume="allow",
            mode="offline" if offline else "online",
            reinit="create_new",
            settings=wandb.Settings(silent=True),
        )
        run.summary.update(numbers)
        run.finish()
        return str(wandb_run["id"])
    except Exception as err:  # noqa: BLE001 - a failing record must not lose the evaluation
        print(
            f"robust-train: warning: could not add the evaluation to W&B run {wandb_run['id']}: "
            f"{type(err).__name__}: {err}",
            file=sys.stderr,
        )
        return None
