"""Fault and abuse, continued (test_fault_and_abuse.py holds the kills and concurrent runs):
special files where a file goes, a full disk, class paths that run a module's code, recorded
data modules of other packages, YAML alias bombs, FIFOs as configs, looping folder links in an
image folder, and a resume from a checkpoint swapped for a symlink. Most cases run the console
script's entry point in-process (`cli`); a full disk is a small tmpfs where this machine lets
the test mount one, and otherwise (and always, in a second variant) a write that raises ENOSPC.
What must hold: nothing is written over a non-regular file or through a link, nothing is left
half-written, no module outside the allow-list runs, and every refusal is one line, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import pytest
import torch
from reliability import CONFIGS, error_line, save_fit_checkpoint

from robust_train.core import files

DIGITS = ["--config", str(CONFIGS / "digits_baseline.yaml")]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ONE_BATCH = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1"]
ONE_BATCH += ["--trainer.limit_val_batches=1", "--trainer.callbacks=[]", *QUIET]
ONE_BATCH += ["--trainer.logger=false"]


def _loads(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _special_files(folder: Path) -> dict[str, Path]:
    """A FIFO, and (where this process may create one) a character device like /dev/null."""
    found = {"fifo": folder / "pipe"}
    os.mkfifo(found["fifo"])
    with contextlib.suppress(OSError):
        os.mknod(folder / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        found["device"] = folder / "null"
    return found


def test_export_never_replaces_a_device_node_or_a_fifo(tmp_path: Path, cli):
    ckpt = save_fit_checkpoint(tmp_path / "model.ckpt")
    for name, special in _special_files(tmp_path).items():
        kind = stat.S_IFMT(os.lstat(special).st_mode)
        result = cli("export", str(ckpt), str(special), "--overwrite", cwd=tmp_path)
        error_line(result, repr(str(special)), "not a regular file")
        assert stat.S_IFMT(os.lstat(special).st_mode) == kind, name  # still what it was
        with pytest.raises(files.OutputError, match="not a regular file"):
            files.write_text(special, "x", overwrite=True)
    assert not files.partial_files(tmp_path / "pipe")


def test_assets_copy_never_writes_through_a_link_or_into_a_fifo(tmp_path: Path, cli):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "link.yaml").symlink_to(precious)
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "created.txt")
    fifo = _special_files(tmp_path)["fifo"]
    name = "configs/digits_baseline.yaml"
    cases = {
        "link.yaml": (["--overwrite"], "is a symlink"),
        "dangling.yaml": ([], "is a symlink"),
        fifo.name: (["--overwrite"], "not a regular file"),
    }
    for dest, (flags, fragment) in cases.items():
        error_line(cli("assets", "copy", name, dest, *flags, cwd=tmp_path), dest, fragment)
    assert precious.read_text() == "keep me" and not (tmp_path / "created.txt").exists()
    assert (tmp_path / "link.yaml").is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert cli("assets", "copy", name, "mine.yaml", cwd=tmp_path).returncode == 0
    assert (tmp_path / "mine.yaml").read_bytes() == (CONFIGS.parent / name).read_bytes()
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]
