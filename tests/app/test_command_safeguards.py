"""What `evaluate`, `compare`, `certify` and `export` refuse, and when: in-process through the
`cli` fixture (the console script's entry point; the subprocess runs are in
test_fault_and_abuse.py). Every refusal is one line naming the flag, exit code 2, before any work,
and leaves what was there as it was."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

import robust_train.app.certify_command as certify_command
import robust_train.evaluation.split as evaluation_split
from robust_train.models import SmallCNN
from tests.support.reliability import (
    EVIL_WEIGHTS,
    TINY_CERTIFY,
    TINY_EVAL,
    error_line,
    evil_module,
    image_folder,
    save_fit_checkpoint,
)


def _no_work(*args, **kwargs):
    raise AssertionError("the work started before the outputs were checked")


def _err(done, *fragments: str) -> str:
    return error_line(done.stderr, *fragments)


@pytest.fixture
def ckpt(isolated: Path) -> Path:
    return save_fit_checkpoint(isolated / "model.ckpt")


# -- outputs: checked before any work, never written through a symlink ---------------------------


def test_an_out_that_is_a_file_is_refused_before_any_work(ckpt, isolated, monkeypatch, cli):
    monkeypatch.setattr(evaluation_split, "evaluate_classifier", _no_work)
    monkeypatch.setattr(certify_command, "certify_model", _no_work)
    (isolated / "taken").write_text("a file")
    commands = {
        "evaluate": ["evaluate", "--ckpt", str(ckpt), *TINY_EVAL],
        "compare": ["compare", str(ckpt), str(ckpt), "--names", "a", "b", *TINY_EVAL],
        "certify": ["certify", "--ckpt", str(ckpt), *TINY_CERTIFY],
    }
    for name, args in commands.items():
        for out in ("taken", "taken/below"):
            done = cli(*args, "--out", out)
            assert done.returncode == 2, name
            line = _err(done, "`--out`", "taken")
            assert "not a folder" in line, (name, line)
    assert (isolated / "taken").read_text() == "a file"


@pytest.mark.parametrize("command", ["evaluate", "certify"])
def test_a_symlink_in_out_is_never_followed(ckpt, isolated, monkeypatch, cli, command):
    monkeypatch.setattr(evaluation_split, "evaluate_classifier", _no_work)
    monkeypatch.setattr(certify_command, "certify_model", _no_work)
    precious = isolated / "precious.txt"
    precious.write_text("keep me")
    out = isolated / "out"
    out.mkdir()
    (out / "summary.md").symlink_to(precious)
    args = [command, "--ckpt", str(ckpt), "--out", str(out)]
    args += TINY_EVAL if command == "evaluate" else TINY_CERTIFY
    done = cli(*args)
    assert done.returncode == 2  # no results.json: summary.md is not an evaluation's
    _err(done, "`--out`", "summary.md")
    (out / "results.json").symlink_to(precious)
    done = cli(*args, "--overwrite")
    assert done.returncode == 2
    _err(done, "`--out`", "is a symlink", "precious.txt")
    assert precious.read_text() == "keep me" and sorted(p.name for p in out.iterdir()) == [
        "results.json",
        "summary.md",
    ]


def test_stray_files_in_out_need_overwrite_and_a_rerun_replaces_its_own(ckpt, isolated, cli):
    out = isolated / "out"
    out.mkdir()
    (out / "summary.md").write_text("my notes")
    args = ["evaluate", "--ckpt", str(ckpt), "--out", str(out), *TINY_EVAL]
    done = cli(*args)
    assert done.returncode == 2
    _err(done, "summary.md' exists", "--overwrite")
    assert (out / "summary.md").read_text() == "my notes"
    done = cli(*args, "--overwrite")
    assert done.returncode == 0
    first = json.loads((out / "results.json").read_text())
    done = cli(*args)
    assert done.returncode == 0  # the same checkpoint and settings: its own results, replaced
    assert json.loads((out / "results.json").read_text()).keys() == first.keys()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no partial files left


# -- export ----------------------------------------------------------------------------------------


def test_export_refuses_its_own_source_and_existing_files(ckpt, isolated, cli):
    save_fit_checkpoint(ckpt, optimizer_states=[{"state": {}, "param_groups": []}])
    original = ckpt.read_bytes()
    done = cli("export", str(ckpt), str(ckpt))
    assert done.returncode == 2
    _err(done, "`dst`", "is `src`")
    os.link(ckpt, isolated / "hard.ckpt")
    (isolated / "soft.ckpt").symlink_to(ckpt)
    for dst in ("hard.ckpt", "soft.ckpt", "./model.ckpt"):
        done = cli("export", str(ckpt), dst, "--overwrite")
        assert done.returncode == 2, dst
        _err(done, "`dst`")
    assert ckpt.read_bytes() == original
    other = isolated / "other.ckpt"
    other.write_bytes(b"someone's file")
    done = cli("export", str(ckpt), str(other))
    assert done.returncode == 2
    _err(done, "other.ckpt' exists", "--overwrite")
    assert other.read_bytes() == b"someone's file"
    done = cli("export", str(ckpt), str(other), "--overwrite")
    assert done.returncode == 0
    small = torch.load(other, map_location="cpu", weights_only=True)
    assert "optimizer_states" not in small and small["robust_train"]["model"]["class_path"]
    (isolated / "a_folder").mkdir()
    done = cli("export", str(ckpt), "a_folder")
    assert done.returncode == 2
    _err(done, "is a folder")


# -- recorded class paths and data ---------------------------------------------------------------


def test_a_recorded_class_of_the_working_folder_never_runs_without_the_opt_in(isolated, cli):
    name, marker = evil_module(isolated)
    spec = {"class_path": f"{name}.Net", "init_args": {"num_classes": 10}}
    ckpt = save_fit_checkpoint(isolated / "evil.ckpt", model_spec=spec)
    sys.path.append(str(isolated))  # even when the working folder is on the import path
    done = cli("evaluate", "--ckpt", str(ckpt), "--out", "e", *TINY_EVAL)
    assert done.returncode == 2
    _err(done, f"'{name}.Net'", "evil.ckpt", "--trust-class-path", "in the working folder")
    done = cli("certify", "--ckpt", str(ckpt), "--out", "c", *TINY_CERTIFY)
    assert done.returncode == 2
    _err(done, f"'{name}.Net'", "--trust-class-path")
    done = cli("export", str(ckpt), "small.ckpt")
    assert done.returncode == 0  # copied as text, never imported
    assert "copied as text, not imported" in done.stderr
    assert not marker.exists() and name not in sys.modules
    copied = torch.load(isolated / "small.ckpt", map_location="cpu", weights_only=True)
    assert copied["robust_train"]["model"] == spec
    assert not (isolated / "e").exists() and not (isolated / "c").exists()


def test_the_opt_in_imports_the_recorded_class(isolated, cli):
    name, marker = evil_module(isolated)
    spec = {"class_path": f"{name}.Net", "init_args": {"num_classes": 10}}
    ckpt = save_fit_checkpoint(isolated / "own.ckpt", model_spec=spec)
    content = torch.load(ckpt, map_location="cpu", weights_only=True)
    content["state_dict"] = {f"model.{k}": torch.randn(s) for k, s in EVIL_WEIGHTS.items()}
    torch.save(content, ckpt)
    sys.path.append(str(isolated))
    args = ["evaluate", "--ckpt", str(ckpt), "--out", "e", *TINY_EVAL, "--trust-class-path"]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert marker.exists() and (isolated / "e" / "results.json").is_file()


def test_recorded_data_never_downloads_or_creates_folders(isolated, monkeypatch, cli):
    import urllib.request

    def offline(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    nowhere = isolated / "nowhere" / "cifar"
    data = {
        "class_path": "robust_train.data.CIFAR10DataModule",
        "init_args": {"data_dir": str(nowhere), "download": True},
    }
    rgb = SmallCNN(in_channels=3, num_classes=10, input_size=32)
    ckpt = save_fit_checkpoint(isolated / "cifar.ckpt", model=rgb, datamodule=data)
    done = cli("evaluate", "--ckpt", str(ckpt), "--out", "e", *TINY_EVAL)
    assert done.returncode == 2
    _err(done, "cifar.ckpt", "data_dir=", "does not exist here", "--data-config")
    done = cli("certify", "--ckpt", str(ckpt), "--out", "c", *TINY_CERTIFY)
    assert done.returncode == 2
    _err(done, "--data-config")
    assert not (isolated / "nowhere").exists()
    empty = isolated / "empty_data"
    empty.mkdir()
    data["init_args"]["data_dir"] = str(empty)  # the folder exists, the files do not
    save_fit_checkpoint(ckpt, model=rgb, datamodule=data)
    done = cli("evaluate", "--ckpt", str(ckpt), "--out", "e", *TINY_EVAL)
    assert done.returncode == 2
    _err(done, "CIFAR10DataModule", "--data-config")
    assert list(empty.iterdir()) == [] and not (isolated / "e").exists()


def test_a_python_tag_in_data_config_is_a_user_error(ckpt, isolated, cli):
    marker = isolated / "MARKER_yaml"
    (isolated / "data.yaml").write_text(
        f"data: !!python/object/apply:os.system ['touch {marker}']\n"
    )
    args = ["evaluate", "--ckpt", str(ckpt), "--data-config", "data.yaml", *TINY_EVAL]
    done = cli(*args)
    assert done.returncode == 2
    _err(done, "`--data-config`", "data.yaml", "not a plain YAML config")
    assert not marker.exists()


# -- held-out subsets ----------------------------------------------------------------------------


def test_n_samples_takes_a_stratified_subset_and_says_so(isolated, cli):
    root = image_folder(isolated / "images", {"a": 15, "b": 15, "c": 15})
    data = {
        "class_path": "robust_train.data.ImageFolderDataModule",
        "init_args": {"root": str(root), "image_size": 8, "grayscale": True, "batch_size": 8},
    }
    net = SmallCNN(in_channels=1, num_classes=3, input_size=8)
    ckpt = save_fit_checkpoint(isolated / "folder.ckpt", model=net, datamodule=data)
    args = ["evaluate", "--ckpt", str(ckpt), "--out", "e", *TINY_EVAL, "--n-samples", "12"]
    done = cli(*args)
    assert done.returncode == 0
    assert "12 of the 45 test images: a seeded class-stratified subset (seed 0)" in done.stderr
    (result,) = json.loads((isolated / "e" / "results.json").read_text()).values()
    assert result["subset"]["per_class"] == {"0": 4, "1": 4, "2": 4}
    assert result["subset"]["selection"] == "seeded class-stratified subset"
    assert "seeded class-stratified subset (seed 0" in (isolated / "e" / "summary.md").read_text()


# -- one-line errors naming flags ----------------------------------------------------------------


def test_errors_name_flags_and_folders_are_called_folders(ckpt, isolated, cli):
    done = cli("evaluate", "--ckpt", str(ckpt), "--n-samples", "0", "--out", "e")
    assert done.returncode == 2
    _err(done, "`--n-samples` must be > 0")
    done = cli("certify", "--ckpt", str(ckpt), "--sigma", "0")
    assert done.returncode == 2
    _err(done, "`--sigma` must be > 0")
    (isolated / "folder").mkdir()
    done = cli("evaluate", "--ckpt", "folder", "--out", "e")
    assert done.returncode == 2
    _err(done, "`--ckpt` 'folder' is a directory")
    done = cli("certify", "--ckpt", "folder")
    assert done.returncode == 2
    _err(done, "`--ckpt` 'folder' is a directory")
    (isolated / "data.yaml").write_text("data: {class_path: robust_train.data.DigitsDataModule}\n")
    weights = ["--model", "torch.nn.Linear", "--data-config", "data.yaml", "--out", "e"]
    done = cli("evaluate", *weights, "--weights", "folder")
    assert done.returncode == 2
    _err(done, "`--weights` 'folder' is a directory")
    assert not (isolated / "e").exists()


def test_random_bytes_as_weights_never_suggest_unsafe_loading(isolated, cli):
    (isolated / "data.yaml").write_text("data: {class_path: robust_train.data.DigitsDataModule}\n")
    generator = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (4096,), generator=generator, dtype=torch.uint8).numpy()
    for name, head in (("noise.pt", b""), ("pickle_like.pt", b"\x80\x02"), ("zip_like.pt", b"PK")):
        (isolated / name).write_bytes(head + noise.tobytes())
        args = ["evaluate", "--model", "robust_train.models.SmallCNN", "--weights", name]
        done = cli(*args, "--data-config", "data.yaml", "--out", "e")
        assert done.returncode == 2
        line = _err(done, "`--weights`", name, "tensors-only")
        assert "weights_only" not in line and "False" not in line, line


def test_certify_counts_noise_draws_with_noise_samples(ckpt, cli):
    done = cli("certify", "--ckpt", str(ckpt), "--n-samples", "10")
    assert done.returncode == 2
    _err(done, "`--noise-samples`", "`--n-images`")
    done = cli("certify", "--ckpt", str(ckpt), "--noise-samples", "0")
    assert done.returncode == 2
    _err(done, "`--noise-samples` must be > 0")
