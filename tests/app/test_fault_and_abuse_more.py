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

import builtins
import contextlib
import errno
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from robust_train.core import files
from tests.support.paths import CONFIGS
from tests.support.reliability import (
    TINY_EVAL,
    error_line,
    image_folder,
    save_fit_checkpoint,
)

DIGITS = ["--config", str(CONFIGS / "digits_baseline.yaml")]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
ONE_BATCH = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1"]
ONE_BATCH += ["--trainer.limit_val_batches=1", "--trainer.callbacks=[]", *QUIET]
ONE_BATCH += ["--trainer.logger=false"]


class _FullDisk:
    """`open` for robust_train.core.files whose write streams fail with ENOSPC once a file passes
    `limit` bytes: a full disk, simulated where no small file system can be mounted."""

    def __init__(self, limit: int):
        self.limit = limit

    def open(self, file, mode="r", *args, **kwargs):
        handle = builtins.open(file, mode, *args, **kwargs)
        return _Filling(handle, self.limit) if "w" in mode else handle


class _Filling:
    def __init__(self, handle, limit: int):
        self._handle, self._left = handle, limit

    def write(self, data) -> int:
        self._left -= memoryview(data).nbytes
        if self._left < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._handle.write(data)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()


@pytest.fixture
def small_disk(tmp_path: Path):
    """A folder on a 128 KiB tmpfs (skipped where this machine does not let the test mount one),
    unmounted afterwards."""
    folder = tmp_path / f"small_{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    mount = shutil.which("mount")
    command = [mount or "mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(folder)]
    if mount is None or subprocess.run(command, capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (the ENOSPC variant covers it)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder: Path, leave: int) -> None:
    """Fill the file system of `folder` up to `leave` bytes."""
    info = os.statvfs(folder)
    (folder / "filler").write_bytes(b"\0" * max(0, info.f_bavail * info.f_frsize - leave))


def _no_partials(folder: Path) -> None:
    assert not [p for p in folder.rglob("*") if ".partial" in p.name], sorted(folder.rglob("*"))


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


@pytest.mark.slow
def test_a_fit_on_a_full_disk_leaves_no_checkpoint_and_no_temporary_file(small_disk, cli):
    """checkpoint_root on a 128 KiB tmpfs: config.yaml fits, a 160 KB best.ckpt does not."""
    result = cli("fit", *DIGITS, *ONE_BATCH, "--checkpoint_root", str(small_disk),
                 cwd=small_disk.parent)  # fmt: skip
    error_line(result, ".ckpt'", "no space left")  # best.ckpt or last.ckpt, whichever fills it
    assert not list(small_disk.rglob("*.ckpt"))  # no truncated checkpoint
    _no_partials(small_disk)
    assert not list(small_disk.iterdir())  # the run folder (and its config.yaml) is released


@pytest.mark.slow
def test_a_fit_whose_checkpoint_write_fails_with_enospc_leaves_nothing(
    tmp_path: Path, cli, monkeypatch
):
    """The same full disk, simulated (runs everywhere): writes past 64 KB fail with ENOSPC."""
    monkeypatch.setattr(files, "open", _FullDisk(64_000).open, raising=False)
    root = tmp_path / "ckpts"
    result = cli("fit", *DIGITS, *ONE_BATCH, "--checkpoint_root", str(root), cwd=tmp_path)
    error_line(result, "best.ckpt", "no space left")
    assert not list(tmp_path.rglob("*.ckpt")) and not root.exists()
    _no_partials(tmp_path)


def test_a_recorded_class_path_never_imports_a_main_module_or_another_package(
    tmp_path: Path, cli, monkeypatch
):
    """`PIL.__main__` prints Pillow's report at import, `certifi.__main__` parses the command
    line: neither is imported from a handed checkpoint; the error names the path and the flag."""
    cases = {
        "pil.ckpt": "PIL.__main__.Image",
        "certifi.ckpt": "certifi.__main__.where",
        "other.ckpt": "certifi.core.where",  # installed, but not on the allow-list
    }
    for module in ("PIL.__main__", "certifi", "certifi.__main__", "certifi.core"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    for name, class_path in cases.items():
        save_fit_checkpoint(tmp_path / name, model_spec={"class_path": class_path})
        result = cli("evaluate", "--ckpt", name, *TINY_EVAL, cwd=tmp_path)
        error_line(result, repr(class_path), "--trust-class-path")
        assert "Pillow" not in result.stdout and "usage:" not in result.stderr, name
    assert not {"PIL.__main__", "certifi", "certifi.__main__"} & set(sys.modules)
    assert not (tmp_path / "runs").exists()


def test_a_recorded_third_party_data_module_is_never_built(tmp_path: Path, cli, monkeypatch):
    """Lightning's demo MNIST module would download into ./data: refused before its import."""
    class_path = "pytorch_lightning.demos.mnist_datamodule.MNISTDataModule"
    monkeypatch.delitem(sys.modules, class_path.rpartition(".")[0], raising=False)
    (tmp_path / "mnist").mkdir()
    data = {"class_path": class_path, "init_args": {"data_dir": str(tmp_path / "mnist")}}
    save_fit_checkpoint(tmp_path / "demo.ckpt", datamodule=data)
    result = cli("evaluate", "--ckpt", "demo.ckpt", *TINY_EVAL, cwd=tmp_path)
    error_line(result, repr(class_path), "--trust-class-path")
    exported = cli("export", "demo.ckpt", "copy.ckpt", cwd=tmp_path)  # copied as text only
    assert exported.returncode == 0 and class_path in exported.stderr, exported.stderr
    assert class_path.rpartition(".")[0] not in sys.modules
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.ckpt", "demo.ckpt", "mnist"]
    assert not list((tmp_path / "mnist").iterdir())


def _billion_laughs(levels: int = 9) -> str:
    """`levels` levels of ten aliases each: 10**levels strings once expanded, ~700 bytes here."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _memory_cap(extra: int = 2 << 30):
    """At most `extra` more bytes of address space meanwhile: a bomb that gets through ends as a
    MemoryError here instead of exhausting the machine."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (used + extra, hard))
    except (ImportError, OSError, ValueError):  # no address-space limit here: run uncapped
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.timeout(60)
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path, cli):
    (tmp_path / "lol.yaml").write_text(_billion_laughs())
    (tmp_path / "data.yaml").write_text(
        "data:\n  class_path: robust_train.data.DigitsDataModule\n" + _billion_laughs()
    )
    ckpt = save_fit_checkpoint(tmp_path / "model.ckpt")
    flow = "{" + _billion_laughs().strip().replace("\n", ", ") + "}"  # one flag's value
    cases = {
        "fit": (["fit", "--config", "lol.yaml"], "`--config` 'lol.yaml'"),
        "flag": (["fit", *DIGITS, "--data.init_args", flow], "a YAML value"),
        "check-data": (["check-data", "-c", "lol.yaml"], "`-c` 'lol.yaml'"),
        "evaluate": (
            ["evaluate", "--ckpt", str(ckpt), "--data-config", "data.yaml", *TINY_EVAL],
            "`--data-config`",
        ),
    }
    with _memory_cap():
        results = {name: cli(*args, cwd=tmp_path) for name, (args, _) in cases.items()}
    for name, (_, fragment) in cases.items():
        error_line(results[name], fragment, "aliases", "100000 nodes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.yaml", "lol.yaml", "model.ckpt"]


@pytest.mark.timeout(60)
def test_a_config_that_is_a_fifo_or_a_device_is_refused_before_it_is_opened(tmp_path: Path, cli):
    """A FIFO with no writer would block `open` forever (the timeout fails the test then)."""
    for special in _special_files(tmp_path).values():
        for command in ("fit", "check-data"):
            result = cli(command, "--config", str(special), cwd=tmp_path)
            error_line(result, f"`--config` {str(special)!r}", "not a regular file")
        result = cli("fit", *DIGITS, "--ckpt_path", str(special), cwd=tmp_path)
        error_line(result, "`--ckpt_path`", "not a regular file")
    assert not (tmp_path / "checkpoints").exists()


IMAGES_CONFIG = (
    "model:\n  model:\n    class_path: robust_train.models.SmallCNN\n"
    "    init_args: {in_channels: 1, num_classes: 2, input_size: 8}\n"
    "data:\n  class_path: robust_train.data.ImageFolderDataModule\n"
    "  init_args: {root: ROOT, image_size: 8, grayscale: true, batch_size: 4}\n"
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_links_to_folders_in_an_image_folder_are_refused_not_followed(tmp_path: Path, cli):
    """Two self-links made check-data walk forever; `a/up -> ..` turned 12 images into 492 and
    put class b's images under a."""
    from robust_train.data import ImageFolderDataModule

    links = {"loop": {"l1": ".", "l2": "."}, "up": {"up": ".."}}
    for name, made in links.items():
        root = image_folder(tmp_path / name, {"a": 6, "b": 6})
        for link, target in made.items():
            (root / "train" / "a" / link).symlink_to(target, target_is_directory=True)
        (tmp_path / f"{name}.yaml").write_text(IMAGES_CONFIG.replace("ROOT", name))
        check = cli("check-data", "--config", f"{name}.yaml", cwd=tmp_path)
        error_line(check, f"{name}/train/a/", "link to a folder", "not followed")
        if name == "up":  # the fit reads the classes as check-data does
            error_line(cli("fit", "--config", f"{name}.yaml", *ONE_BATCH, cwd=tmp_path), "link")
        with pytest.raises(ValueError, match="link to a folder"):
            ImageFolderDataModule(root, image_size=8).setup()
    assert not (tmp_path / "checkpoints").exists()


def test_evaluate_checks_k_against_the_image_size_before_loading_data(
    tmp_path: Path, cli, monkeypatch
):
    from robust_train.data import DigitsDataModule

    def never(*args, **kwargs):
        raise AssertionError("the data was loaded before --k was checked")

    monkeypatch.setattr(DigitsDataModule, "setup", never)
    monkeypatch.setattr(DigitsDataModule, "prepare_data", never)
    ckpt = save_fit_checkpoint(tmp_path / "model.ckpt")
    result = cli("evaluate", "--ckpt", str(ckpt), *TINY_EVAL, "--k", "100", cwd=tmp_path)
    error_line(result, "`k`", "8x8", "got 100")
    assert "evaluating" not in result.stderr and not (tmp_path / "runs").exists()


def _full_disk_cases(tmp_path: Path, out: Path, cli) -> None:
    """export and evaluate writing to `out` on a full disk: one line, exit 2, nothing left."""
    ckpt = save_fit_checkpoint(tmp_path / "model.ckpt", optimizer_states=[{"m": torch.ones(9)}])
    export = cli("export", str(ckpt), str(out / "copy.ckpt"), cwd=tmp_path)
    error_line(export, "`dst`", "copy.ckpt", "no space left")
    evaluate = cli("evaluate", "--ckpt", str(ckpt), "--out", str(out / "eval"), *TINY_EVAL,
                   cwd=tmp_path)  # fmt: skip
    error_line(evaluate, "`--out`", "results.json", "no space left")
    assert not (out / "copy.ckpt").exists() and not (out / "eval").exists()  # no empty --out
    _no_partials(out)
    assert "optimizer_states" in _loads(ckpt)  # the source is untouched


def test_export_and_evaluate_on_a_full_disk_leave_nothing(small_disk, cli):
    _fill(small_disk, leave=0)
    _full_disk_cases(small_disk.parent, small_disk, cli)
    assert [p.name for p in small_disk.iterdir()] == ["filler"]


def test_export_and_evaluate_whose_writes_fail_with_enospc_leave_nothing(
    tmp_path: Path, cli, monkeypatch
):
    """The same, simulated (runs everywhere): every write fails with ENOSPC."""
    monkeypatch.setattr(files, "open", _FullDisk(0).open, raising=False)
    _full_disk_cases(tmp_path, tmp_path / "out", cli)


@pytest.mark.slow
def test_resuming_from_a_last_ckpt_swapped_for_a_symlink(tmp_path: Path, cli):
    """A link out of the run folder (to another file, or another run's checkpoint) is refused
    before anything is read; a link to a checkpoint in the same folder (Lightning's
    `save_last: link`) resumes from its target, and the fit replaces the link by a file."""
    args = [*DIGITS, *QUIET, "--trainer.callbacks=[]", "--trainer.logger=false"]
    args += ["--trainer.limit_train_batches=1", "--trainer.limit_val_batches=1"]
    assert cli("fit", *args, "--trainer.max_epochs=1", cwd=tmp_path).returncode == 0
    run = tmp_path / "checkpoints" / "digits_baseline" / "version_0"
    elsewhere = tmp_path / "elsewhere.ckpt"
    shutil.copyfile(run / "last.ckpt", elsewhere)  # a whole checkpoint, outside the run
    before = elsewhere.read_bytes()
    (run / "last.ckpt").unlink()
    (run / "last.ckpt").symlink_to(elsewhere)
    for ckpt_path in ("last", str(run / "last.ckpt")):
        result = cli("fit", *args, "--trainer.max_epochs=2", "--ckpt_path", ckpt_path,
                     cwd=tmp_path)  # fmt: skip
        error_line(result, "last.ckpt", "is a symlink to", "not a regular file in its own folder")
    assert sorted(p.name for p in run.parent.iterdir()) == ["latest", "version_0"]
    assert elsewhere.read_bytes() == before  # read nowhere, written never
    (run / "last.ckpt").unlink()
    shutil.copyfile(elsewhere, run / "whole.ckpt")  # a whole checkpoint (best.ckpt is weights)
    (run / "last.ckpt").symlink_to("whole.ckpt")  # inside the run folder
    resumed = cli("fit", *args, "--trainer.max_epochs=2", "--ckpt_path", "last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not (run / "last.ckpt").is_symlink() and _loads(run / "last.ckpt")["epoch"] == 1
    assert sorted(p.name for p in run.parent.iterdir()) == ["latest", "version_0"]
    assert elsewhere.read_bytes() == before
