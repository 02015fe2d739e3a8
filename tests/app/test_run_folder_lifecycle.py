"""The run-folder lifecycle (`robust_train.training.run_folder.RunFolder`) on its own, without a
fit: a fit claims a new folder, a resumed fit continues in its checkpoint's folder, the other
subcommands read the latest run, and a release removes only what this command created."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from robust_train.training.run_folder import RunFolder, keyword_checkpoint


def test_a_fit_claims_a_folder_of_its_own_and_releases_it(tmp_path: Path) -> None:
    first, second = RunFolder(), RunFolder()
    a = first.choose(tmp_path, "exp", "fit", resume_path=None)
    b = second.choose(tmp_path, "exp", "fit", resume_path=None)
    assert (a.name, b.name) == ("version_0", "version_1") and a.is_dir() and b.is_dir()
    (b / "last.ckpt").write_bytes(b"saved")
    first.release()
    second.release()  # holds a checkpoint: kept
    assert not a.exists() and (b / "last.ckpt").is_file()


def test_a_resumed_fit_continues_in_its_folder(tmp_path: Path) -> None:
    run = tmp_path / "exp" / "version_3"
    run.mkdir(parents=True)
    folder = RunFolder()
    assert folder.choose(tmp_path, "exp", "fit", resume_path=str(run / "last.ckpt")) == run
    folder.release()  # nothing was claimed: nothing removed
    assert run.is_dir() and folder.claim is None
    elsewhere = tmp_path / "other" / "version_0" / "last.ckpt"
    assert folder.choose(tmp_path, "exp", "fit", resume_path=str(elsewhere)).name == "version_4"


def test_other_subcommands_and_python_builds_claim_nothing(tmp_path: Path) -> None:
    folder = RunFolder()
    assert folder.choose(tmp_path, "exp", "test", resume_path=None) == tmp_path / "exp"
    named = folder.choose(tmp_path, "exp", None, resume_path=None)
    assert named.name == "version_0" and not named.exists() and folder.claim is None


def test_logger_folders_it_created_are_cleaned_up(tmp_path: Path) -> None:
    log_dir = tmp_path / "lightning_logs" / "version_0"
    logger = SimpleNamespace(log_dir=str(log_dir))
    folder = RunFolder()
    folder.track(SimpleNamespace(loggers=[logger], checkpoint_callback=None))
    log_dir.mkdir(parents=True)
    (log_dir / "metrics.csv").write_text("step\n")
    (log_dir / "notes.txt").write_text("the user's")
    folder.release()
    assert not (log_dir / "metrics.csv").exists() and (log_dir / "notes.txt").is_file()


def test_keyword_checkpoints_name_the_latest_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"`--ckpt_path last`: no last.ckpt .*'"):
        keyword_checkpoint("last", tmp_path, "exp")
    run = tmp_path / "exp" / "version_2"
    run.mkdir(parents=True)
    (run / "last.ckpt").write_bytes(b"x")
    assert keyword_checkpoint("last", tmp_path, "exp") == str(run / "last.ckpt")
