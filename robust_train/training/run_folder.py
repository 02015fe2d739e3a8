"""The run folder of a fit, from its choice to its release, and the names that lead to it.

Each fit writes to `<checkpoint_root>/<experiment>/version_<N>/` (best.ckpt, last.ckpt,
config.yaml), claimed with an exclusive mkdir (`robust_train.training.checkpointing`), so fits
started at the same moment get a folder each; `--experiment` is a plain run name
(`check_run_name`). `--ckpt_path last` / `best` name the checkpoints of the latest run
(`keyword_checkpoint`); a `--ckpt_path` that is a symlink is read only when it points to a
regular file in its own folder (`check_resume_link`); a fit resumed from a checkpoint inside a
run folder continues in that folder. A fit that saves no checkpoint leaves nothing behind: its
run folder and what Lightning's own loggers (CSV, TensorBoard) wrote into folders it created are
removed (`RunFolder.release`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from robust_train.models.loading import CheckpointError
from robust_train.training.checkpointing import (
    RunCheckpoint,
    claim_run_folder,
    latest_run_folder,
    new_run_folder,
    release_run_folder,
)
from robust_train.training.loggers import SafeWandbLogger

__all__ = [
    "LOGGER_FILES",
    "RunFolder",
    "check_resume_link",
    "check_run_name",
    "child_rank",
    "keyword_checkpoint",
    "logger_folders",
    "remove_logger_folder",
]

LOGGER_FILES = ("hparams.yaml", "metrics.csv")  # what CSVLogger writes (TensorBoard: events.*)


def check_run_name(name: Any, flag: str = "--experiment") -> str:
    """`name` if it is a plain run name: one folder name (no path separator, not "." or "..",
    not absolute, not empty), so the run folder stays under `--checkpoint_root`.

    Examples:
        >>> check_run_name("digits_baseline")
        'digits_baseline'
        >>> check_run_name("../../x")
        Traceback (most recent call last):
        ...
        ValueError: `--experiment` '../../x' must be a plain run name ...
    """
    separators = [sep for sep in (os.sep, os.altsep, "/") if sep]
    if (
        not isinstance(name, str)
        or name.strip() in ("", ".", "..")
        or any(sep in name for sep in separators)
        or "\0" in name
        or Path(name).is_absolute()
    ):
        raise ValueError(
            f"`{flag}` {name!r} must be a plain run name (one folder name under "
            "--checkpoint_root: no '/', not '.' or '..', not an absolute path)"
        )
    return name


class RunFolder:
    """The run folder of one command of `robust-train fit|validate|test|predict`, from its choice
    to its release: a fit claims a new `version_<N>` folder (an exclusive mkdir) or continues
    the folder of the checkpoint it resumes; when the fit saves no checkpoint (it failed or
    trained nothing), `release` removes the claimed folder and what Lightning's own loggers
    wrote into folders this command created.

    Examples:
        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> run = RunFolder()
        >>> folder = run.choose(root, "demo", "fit", resume_path=None)
        >>> folder.name, folder.is_dir()
        ('version_0', True)
        >>> run.release(); folder.exists()
        False
    """

    def __init__(self) -> None:
        self.claim: tuple[Path, list[Path]] | None = None
        self.logger_dirs: list[tuple[Path, list[Path]]] = []

    def choose(
        self,
        checkpoint_root: str | Path,
        experiment: str,
        subcommand: str | None,
        resume_path: str | None,
    ) -> Path:
        """The folder checkpoints go to: for validate/test/predict the latest run (nothing is
        written there); the folder of the checkpoint a fit resumes when it is a run of this
        experiment; a new folder otherwise, claimed by a fit run from the command line (rank 0),
        merely named when built from Python (`subcommand` None) or on a DDP rank > 0 (rank 0's
        folder is broadcast)."""
        experiment_dir = Path(checkpoint_root) / experiment
        if subcommand not in (None, "fit"):
            return latest_run_folder(experiment_dir) or experiment_dir
        if resume_path is not None:
            folder = Path(resume_path).parent
            if folder.parent.resolve() == experiment_dir.resolve():
                return folder  # resuming a run of this experiment: continue in its folder
        if subcommand is None or child_rank():
            return new_run_folder(experiment_dir)
        self.claim = claim_run_folder(experiment_dir)  # exclusive: concurrent fits differ
        return self.claim[0]

    def track(self, trainer: Any) -> None:
        """Note the folders the trainer's own loggers will create, and hand the claim to its
        `RunCheckpoint` (which then knows the folders it may remove)."""
        self.logger_dirs = logger_folders(trainer)
        callback = getattr(trainer, "checkpoint_callback", None)
        if self.claim is not None and isinstance(callback, RunCheckpoint):
            callback.claimed(self.claim[1])

    def release(self) -> None:
        """Remove the run folder this command claimed, and what Lightning's own loggers wrote,
        when no checkpoint was saved (a fit that failed or trained nothing)."""
        if self.claim is not None:
            release_run_folder(*self.claim)
        for folder, created in self.logger_dirs:
            remove_logger_folder(folder, created)


def check_resume_link(path: str, flag: str = "--ckpt_path") -> str:
    """The file to read for `--ckpt_path`: `path` itself, or, when it is a symlink, its target,
    if that is a regular file in the link's own folder (what Lightning's `save_last: link`
    writes in a run folder); a link elsewhere (a `last.ckpt` swapped for a link to another
    run's or any other file) is refused before anything is read.

    Raises:
        CheckpointError: one line naming the link and where it points.

    Examples:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> (run / "best.ckpt").write_bytes(b"x") and (run / "last.ckpt").symlink_to("best.ckpt")
        >>> check_resume_link(str(run / "last.ckpt")) == str(run / "best.ckpt")
        True
        >>> (run / "away.ckpt").symlink_to("/etc/hostname")
        >>> check_resume_link(str(run / "away.ckpt"))
        Traceback (most recent call last):
        ...
        robust_train.models.loading.CheckpointError: `--ckpt_path` '...away.ckpt' is a symlink ...
    """
    link = Path(path)
    if not link.is_symlink():
        return path
    folder = link.parent.resolve()
    target = Path(os.path.realpath(link))
    if target.parent == folder and target.is_file():
        return str(target)
    raise CheckpointError(
        f"`{flag}` {path!r} is a symlink to {os.readlink(link)!r}, which is not a regular file "
        f"in its own folder {str(folder)!r}; a fit resumes only from a checkpoint file in its run "
        "folder: pass that file itself"
    )


def keyword_checkpoint(word: str, checkpoint_root: str | Path, experiment: str) -> str:
    """The `word`.ckpt ("last" or "best") of the latest run folder of an experiment.

    Raises:
        FileNotFoundError: no run folder holds it, naming `--ckpt_path` and the folder looked in.
    """
    experiment_dir = Path(checkpoint_root) / experiment
    folder = latest_run_folder(experiment_dir)
    path = folder / f"{word}.ckpt" if folder is not None else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            f"`--ckpt_path {word}`: no {word}.ckpt in a run folder under "
            f"{str(experiment_dir)!r} (check --experiment and --checkpoint_root)"
        )
    return str(path)


def child_rank() -> bool:
    """A process that a distributed launcher started as rank > 0 (Lightning's DDP launcher sets
    LOCAL_RANK for the processes it starts; torchrun sets RANK and LOCAL_RANK)."""
    return any(os.environ.get(name, "0") not in ("", "0") for name in ("RANK", "LOCAL_RANK"))


def logger_folders(trainer: Any) -> list[tuple[Path, list[Path]]]:
    """(log folder, the folders up to it that do not exist yet) of each logger that writes
    files of its own (Lightning's CSVLogger and TensorBoardLogger; W&B cleans up itself)."""
    found = []
    for logger in getattr(trainer, "loggers", []):
        if isinstance(logger, SafeWandbLogger):
            continue
        try:
            folder = getattr(logger, "log_dir", None)
        except Exception:  # noqa: BLE001 - a logger that cannot say: nothing to clean up
            folder = None
        if isinstance(folder, str) and folder:
            missing = []
            for candidate in (Path(folder), *Path(folder).parents):
                if candidate.exists():
                    break
                missing.append(candidate)
            if missing:
                found.append((Path(folder), missing))
    return found


def remove_logger_folder(folder: Path, created: list[Path]) -> None:
    """Remove the files a Lightning logger wrote into a folder this fit created, then the
    created folders that are left empty (deepest first)."""
    if folder.is_dir():
        for path in folder.iterdir():
            if path.is_file() and (path.name in LOGGER_FILES or path.name.startswith("events.")):
                with contextlib.suppress(OSError):
                    path.unlink()
            elif path.is_dir() and path.name == "checkpoints" and not any(path.iterdir()):
                shutil.rmtree(path, ignore_errors=True)
    for candidate in created:
        if candidate.is_dir() and not any(candidate.iterdir()):
            with contextlib.suppress(OSError):
                candidate.rmdir()
