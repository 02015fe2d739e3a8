"""RunCheckpoint: `last.ckpt` after every finished epoch, `best.ckpt` by a stated rule, run folders.

The rule `robust-train fit` follows (documented in the README, CLI section):

- Each fit writes into a run folder of its own, `<checkpoint_root>/<experiment>/version_<N>/`
  (N one more than the highest existing), so a re-run never mixes with or overwrites an earlier
  one; `<checkpoint_root>/<experiment>/latest` points to the newest run that saved a checkpoint.
  The folder is claimed with an exclusive `mkdir` (`claim_run_folder`: N, else N+1, ...), so fits
  started at the same moment get a folder each.
- `last.ckpt` holds the end of the latest finished epoch (weights, optimizer, loops and callback
  states: what resuming needs). It is rewritten at the end of every training epoch, after that
  epoch's validation and robustness monitors, so an interrupt (Ctrl+C, SIGTERM, SIGKILL) leaves the
  last finished epoch on disk. Lightning 2.5+ rewrites `last.ckpt` only when the monitored value
  improves; this class restores the every-epoch rule.
- `best.ckpt` is the finished epoch with the best `monitor` value (`mode` max or min; ties keep
  the earlier epoch). It is chosen at the end of the epoch too, so a monitor may name a
  robustness metric logged by a RobustnessMonitor (`robustness/...`) as well as `val/acc`. It
  holds the weights and what rebuilds the model, without the optimizer and loop states
  (`best_weights_only`, default True): it is evaluated, tested, exported and fine-tuned from,
  while resuming reads `last.ckpt`; a run folder holds one full checkpoint, not two (with Adam
  a full checkpoint is about three times the weights).
- A fit that stops before its first checkpoint (a failed start), or ends without a training step
  (`--trainer.max_epochs 0`), removes the run folder it created (which then holds only
  config.yaml) and the experiment and checkpoint-root folders it created, if they are then empty;
  an empty fit also tells the W&B logger to discard its run (`SafeWandbLogger.empty_fit`).

Every checkpoint is written whole or not at all (`AtomicCheckpointIO`, which `RunCheckpoint`
puts in place of Lightning's default writer): to a temporary file in the run folder itself, then
renamed over its name, so a full disk or a kill leaves the previous checkpoint or none, never a
truncated one, and no temporary file (a full disk is one line, exit code 2, from the command
line). A name in the run folder that has become a symlink is replaced by the file, never written
through; a device node or FIFO there is refused.

The W&B run id of the fit (when a W&B logger has started) is stored in each checkpoint as
`checkpoint["wandb_run"]`, so a resumed fit continues the same W&B run. The random number
generators (torch, CUDA, numpy, Python, and every `torch.Generator` held by a submodule of the
LightningModule, such as a penalty term's) are stored as `checkpoint["rng_states"]` and restored
on resume, so a deterministic fit resumed from `last.ckpt` draws the same shuffles and noise as
an uninterrupted one and ends with the same weights.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.plugins.io import TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities import rank_zero_info

from robust_train.core.files import write_stream

__all__ = [
    "AtomicCheckpointIO",
    "RunCheckpoint",
    "claim_run_folder",
    "latest_run_folder",
    "new_run_folder",
    "release_run_folder",
    "rng_states",
    "set_rng_states",
]

VERSION = re.compile(r"^version_(\d+)$")
LATEST = "latest"


def _versions(experiment_dir: Path) -> list[int]:
    if not experiment_dir.is_dir():
        return []
    return sorted(int(m.group(1)) for p in experiment_dir.iterdir() if (m := VERSION.match(p.name)))


def new_run_folder(experiment_dir: str | os.PathLike[str]) -> Path:
    """The next free `version_<N>` folder under `experiment_dir` (not created).

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> new_run_folder(root).name
        'version_0'
        >>> (root / "version_0").mkdir(); (root / "version_4").mkdir()
        >>> new_run_folder(root).name
        'version_5'
    """
    folder = Path(experiment_dir)
    found = _versions(folder)
    return folder / f"version_{found[-1] + 1 if found else 0}"


def claim_run_folder(experiment_dir: str | os.PathLike[str]) -> tuple[Path, list[Path]]:
    """Create the next free `version_<N>` folder under `experiment_dir` and return it with the
    folders this call created (deepest first: the run folder, then the experiment folder and its
    parents if they were missing).

    `os.mkdir` is exclusive: of several processes that try the same N at the same moment exactly
    one succeeds, the others go on to N+1, so each gets a folder of its own.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> folder, created = claim_run_folder(root / "exp")
        >>> folder.name, [p.name for p in created]
        ('version_0', ['version_0', 'exp'])
        >>> claim_run_folder(root / "exp")[0].name
        'version_1'
    """
    experiment = Path(experiment_dir)
    created = _missing_folders(experiment)
    experiment.mkdir(parents=True, exist_ok=True)
    version = new_run_folder(experiment)
    number = int(VERSION.match(version.name).group(1))  # type: ignore[union-attr]
    while True:
        folder = experiment / f"version_{number}"
        try:
            folder.mkdir()
        except FileExistsError:
            number += 1
            continue
        except FileNotFoundError:  # another fit removed the (then empty) experiment folder
            experiment.mkdir(parents=True, exist_ok=True)
            continue
        return folder, [folder, *created]


def release_run_folder(folder: str | os.PathLike[str], created: Sequence[Path]) -> bool:
    """Remove a claimed run folder that holds no checkpoint (nothing, or only config.yaml), then
    the `created` folders above it that are empty; True if the run folder was removed.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> folder, created = claim_run_folder(root / "exp")
        >>> release_run_folder(folder, created), sorted(root.iterdir())
        (True, [])
    """
    return _remove_if_no_checkpoint(Path(folder), created)


def latest_run_folder(experiment_dir: str | os.PathLike[str]) -> Path | None:
    """The run folder `latest` points to (else the highest version holding a checkpoint), or None.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> latest_run_folder(root) is None
        True
        >>> (root / "version_0").mkdir(); (root / "version_0" / "last.ckpt").touch()
        >>> latest_run_folder(root).name
        'version_0'
    """
    folder = Path(experiment_dir)
    link = folder / LATEST
    if link.is_dir():
        return link.resolve()
    for version in reversed(_versions(folder)):
        candidate = folder / f"version_{version}"
        if any(candidate.glob("*.ckpt")):
            return candidate
    return None


def _point_latest(run_dir: Path) -> None:
    """Make `<experiment>/latest` a relative symlink to `run_dir` (a version_<N> folder)."""
    link = run_dir.parent / LATEST
    if link.is_symlink() and os.readlink(link) == run_dir.name:
        return
    tmp = run_dir.parent / f".{LATEST}.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(run_dir.name, tmp)
        os.replace(tmp, link)  # atomic: readers never see a missing link
    except OSError:  # no symlinks (some Windows setups): `latest_run_folder` falls back to versions
        if tmp.is_symlink():
            tmp.unlink()


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, writing each local checkpoint through
    `robust_train.core.files.write_stream`: a temporary file in the checkpoint's own folder (one
    file system), fsynced and renamed over the name. Lightning's default serialises in memory and
    moves a file from the system's temporary folder, which on a full disk of another file system
    leaves a truncated checkpoint. Remote paths (`s3://...`) keep Lightning's own writer.

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "run" / "last.ckpt"
        >>> AtomicCheckpointIO().save_checkpoint({"epoch": 1}, path)
        >>> torch.load(path, weights_only=True), sorted(p.name for p in path.parent.iterdir())
        ({'epoch': 1}, ['last.ckpt'])
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if "://" in str(path) or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        write_stream(path, partial(torch.save, checkpoint), overwrite=True, replace_link=True)


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose `last.ckpt` is always the latest finished epoch (see module doc).

    Takes ModelCheckpoint's arguments and `best_weights_only` (default True: the monitored
    checkpoints hold weights without optimizer and loop states; `last.ckpt` is always full);
    `robust-train fit` sets `monitor="val/acc"`, `mode="max"`,
    `filename="best"`, `save_last=True`, `save_on_train_epoch_end=True` and
    `enable_version_counter=False` (each run has a folder of its own), all configurable as
    `--checkpoint.<name>`.

    Examples:
        >>> callback = RunCheckpoint(monitor="val/acc", mode="max", save_last=True)
        >>> callback.save_last, callback.monitor
        (True, 'val/acc')
    """

    def __init__(self, *args: Any, best_weights_only: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.best_weights_only = best_weights_only
        self._last_step_of_last = -1  # global step of the last `last.ckpt` this run wrote
        self._saved_this_run = False
        self._fresh_folder = False  # the folder held no checkpoint when this fit started
        # the folders up to dirpath that do not exist yet (deepest first): a failed or empty fit
        # removes them again when nothing is left in them
        self._created_dirs = _missing_folders(Path(self.dirpath)) if self.dirpath else []

    def claimed(self, created: Sequence[Path]) -> None:
        """Say that `dirpath` was claimed for this fit (`claim_run_folder`) and which folders
        that created: a failed or empty fit removes them again."""
        self._created_dirs = list(created)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not a user's own
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if stage == "fit" and self.dirpath:
            folder = Path(self.dirpath)
            self._fresh_folder = not (folder.is_dir() and any(folder.glob("*.ckpt")))

    def _fitting(self, trainer: pl.Trainer) -> bool:
        return (
            trainer.state.fn == TrainerFn.FITTING
            and not trainer.sanity_checking
            and not getattr(trainer, "fast_dev_run", False)
        )

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if (
            self.save_last
            and self._fitting(trainer)
            and self._last_step_of_last != trainer.global_step
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(
        self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]
    ) -> None:
        super()._save_last_checkpoint(trainer, monitor_candidates)
        if self.save_last:
            self._last_step_of_last = trainer.global_step

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        if self.best_weights_only and Path(filepath).stem != self.CHECKPOINT_NAME_LAST:
            self._save_weights_only(trainer, filepath)  # a monitored (best) checkpoint
        else:
            super()._save_checkpoint(trainer, filepath)
        self._saved_this_run = True
        folder = Path(filepath).parent
        if trainer.is_global_zero and VERSION.match(folder.name):
            _point_latest(folder)

    def _save_weights_only(self, trainer: pl.Trainer, filepath: str) -> None:
        """Lightning's weights-only checkpoint (no optimizer, loop or callback states), with
        this callback's own records (the W&B run, the generators) added before it is written."""
        strategy, full = trainer.strategy, self.save_weights_only
        write = strategy.save_checkpoint

        def save(checkpoint: dict[str, Any], path: Any, *args: Any, **kwargs: Any) -> None:
            self.on_save_checkpoint(trainer, trainer.lightning_module, checkpoint)
            write(checkpoint, path, *args, **kwargs)

        self.save_weights_only = True
        strategy.save_checkpoint = save  # type: ignore[method-assign,assignment]
        try:
            super()._save_checkpoint(trainer, filepath)
        finally:
            self.save_weights_only = full
            del strategy.save_checkpoint  # the class's method again

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["rng_states"] = rng_states(pl_module)
        for logger in trainer.loggers:
            run = getattr(logger, "_experiment", None) if isinstance(logger, WandbLogger) else None
            if run is not None and getattr(run, "id", None):
                checkpoint["wandb_run"] = {
                    "id": run.id,
                    "project": getattr(run, "project", None),
                    "name": getattr(run, "name", None),
                    "save_dir": getattr(logger, "save_dir", None),
                }
                break

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING and "rng_states" in checkpoint:
            set_rng_states(checkpoint["rng_states"], pl_module)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        super().on_exception(trainer, pl_module, exception)
        self._remove_unused_run(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_end(trainer, pl_module)
        if trainer.global_step == 0 and not self._saved_this_run and self._fresh_folder:
            for logger in trainer.loggers:
                if hasattr(logger, "empty_fit"):
                    logger.empty_fit = True  # finalized after this hook: it discards its run
            if self._remove_unused_run(trainer):
                rank_zero_info(
                    "The fit ran no training step (max_epochs=0, limit_train_batches=0 or an "
                    f"empty train split): nothing was saved; its run folder {self.dirpath} (and "
                    "its W&B run, if any) was removed."
                )

    def _remove_unused_run(self, trainer: pl.Trainer) -> bool:
        """Remove the run folder (and the folders above it) this fit created, if it holds no
        checkpoint; True when something was removed."""
        if not (
            trainer.is_global_zero
            and self._fresh_folder
            and not self._saved_this_run
            and trainer.state.fn == TrainerFn.FITTING
            and self.dirpath
        ):
            return False
        return _remove_if_no_checkpoint(Path(self.dirpath), self._created_dirs)


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and its ancestors that do not exist, deepest first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    return missing


def _remove_if_no_checkpoint(folder: Path, created: Sequence[Path] = ()) -> bool:
    """Remove a run folder a failed or empty fit left holding only config.yaml (nothing else),
    then its experiment folder and the `created` folders (deepest first) if they are empty; True
    if the run folder was removed."""
    if not folder.is_dir() or not VERSION.match(folder.name):
        return False
    if not {p.name for p in folder.iterdir()} <= {"config.yaml"}:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    for parent in dict.fromkeys([folder.parent, *created]):
        if parent != folder and parent.is_dir() and not any(parent.iterdir()):
            with contextlib.suppress(OSError):  # another fit may have just used it
                parent.rmdir()
    return True


def _generators(module: torch.nn.Module) -> dict[str, torch.Generator]:
    found = {}
    for path, sub in module.named_modules():
        for attr, value in vars(sub).items():
            if isinstance(value, torch.Generator) and value.device.type == "cpu":
                found[f"{path}.{attr}" if path else attr] = value
    return found


def rng_states(module: torch.nn.Module | None = None) -> dict[str, Any]:
    """Global RNG states and those of the module's own CPU generators, as tensors and plain
    Python values (so checkpoints still load with `torch.load(weights_only=True)`).

    Examples:
        >>> state = rng_states()
        >>> a = torch.rand(1); set_rng_states(state); bool(torch.equal(a, torch.rand(1)))
        True
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 - the global one
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
        "python": random.getstate(),
        "generators": {k: g.get_state() for k, g in _generators(module).items()}
        if module is not None
        else {},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any], module: torch.nn.Module | None = None) -> None:
    """Restore what `rng_states` returned (generators matched by their attribute path)."""
    torch.set_rng_state(states["torch"])
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))  # noqa: NPY002
    python = states["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if module is not None:
        own = _generators(module)
        for key, state in states.get("generators", {}).items():
            if key in own:
                own[key].set_state(state)
