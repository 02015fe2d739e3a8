"""Shipped configs and checkpoints given by name on the command line, from a folder that holds
none of them: `robust-train assets`, `fit --config`, `evaluate --ckpt`, `--data-config`,
`export`; a shipped fine-tune reads its `init_checkpoint` from the package, a local copy from the
working folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from robust_train.app.lightning_cli import lightning_main
from robust_train.core.resources import assets_dir, shipped_checkpoint, shipped_config
from robust_train.models.loading import CheckpointError

QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false"]
TINY_EVAL = ["--n-samples", "4", "--n-steps", "1", "--ig-steps", "2", "--explainers",
             "saliency", "--attacks", "topk", "--parts", "fragility", "--no-progress",
             "--no-wandb", "--no-ensemble"]  # fmt: skip


@pytest.fixture
def empty(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_assets_lists_locates_and_copies(empty, cli):
    done = cli("assets", "list")
    assert done.returncode == 0
    listing = done.stdout
    assert (
        "checkpoints/mnist5k_robust.ckpt" in listing and "configs/digits_baseline.yaml" in listing
    )
    assert str(assets_dir()) in listing
    done = cli("assets", "path", "mnist5k_robust.ckpt")
    assert done.returncode == 0
    assert done.stdout.strip() == str(shipped_checkpoint("mnist5k_robust"))
    assert cli("assets", "copy", "configs/digits_baseline.yaml", "mine.yaml").returncode == 0
    assert (empty / "mine.yaml").read_bytes() == shipped_config("digits_baseline").read_bytes()
    done = cli("assets", "copy", "configs/digits_baseline.yaml", "mine.yaml")
    assert done.returncode == 2 and "exists" in done.stderr
    done = cli("assets", "copy", "digits_baseline.yaml", "mine.yaml", "--overwrite")
    assert done.returncode == 0
    for bad in (["assets", "path", "mnist5k_baseline"], ["assets", "path", "nope"], ["assets"]):
        done = cli(*bad)
        assert done.returncode == 2
        err = done.stderr
        assert err.startswith("robust-train: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("given", ["configs/digits_baseline.yaml", "digits_baseline"])
def test_fit_config_by_name_from_an_empty_folder(empty, cli, given):
    captured = cli("fit", "--config", given, "--print_config")  # argparse's exit: code 0
    assert captured.returncode == 0
    assert yaml.safe_load(captured.stdout)["experiment"] == "digits_baseline"
    notes = [line for line in captured.stderr.splitlines() if line.startswith("robust-train: ")]
    assert notes == [
        f"robust-train: `--config` {given!r}: using the shipped config "
        f"{shipped_config('digits_baseline')} (no such file here)"
    ]


def _finetune(config: str | Path, folder: Path) -> torch.nn.Module:
    built = lightning_main(
        ["--config", str(config), *QUIET, "--checkpoint_root", str(folder)], run=False
    )
    return built.model.model


def test_a_shipped_finetune_starts_from_the_shipped_checkpoint_not_a_local_file(empty, cli):
    """A file at the config's relative path in the working folder is not what the shipped
    config means; the user's own copy of the config does mean it."""
    decoy = empty / "checkpoints" / "digits_baseline.ckpt"
    decoy.parent.mkdir()
    decoy.write_bytes(b"not a checkpoint")
    shipped = torch.load(shipped_checkpoint("digits_baseline"), weights_only=True)["state_dict"]
    net = _finetune("configs/finetune_digits_checkpoint.yaml", empty / "runs")
    assert all(torch.equal(v, shipped[f"model.{k}"]) for k, v in net.state_dict().items())
    assert cli("assets", "copy", "finetune_digits_checkpoint.yaml", "mine.yaml").returncode == 0
    with pytest.raises(CheckpointError, match="checkpoints/digits_baseline.ckpt"):
        _finetune("mine.yaml", empty / "runs")
    decoy.unlink()  # no local file: the copy's relative path names the shipped checkpoint
    net = _finetune("mine.yaml", empty / "runs")
    assert all(torch.equal(v, shipped[f"model.{k}"]) for k, v in net.state_dict().items())


def test_evaluate_and_export_take_a_shipped_checkpoint_by_name(empty, cli):
    err = ""
    for _ in range(2):  # the same name twice: the same results folder, not "other checkpoints"
        done = cli("evaluate", "--ckpt", "digits_baseline", *TINY_EVAL)
        assert done.returncode == 0, done.stderr[-2000:]
        err += done.stderr
    assert err.count("`--ckpt` 'digits_baseline': using the shipped checkpoint") == 2
    (results,) = (empty / "runs" / "eval" / "digits_baseline").glob("*/results.json")
    stored = json.loads(results.read_text())["digits_baseline"]
    assert stored["checkpoint_path"] == str(shipped_checkpoint("digits_baseline").resolve())
    done = cli("evaluate", "--ckpt", "digits_robust", "--data-config", "digits_baseline",
               "--out", "eval", *TINY_EVAL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "`--data-config` 'digits_baseline': using the shipped config" in done.stderr
    assert cli("export", "checkpoints/digits_robust.ckpt", "small.ckpt").returncode == 0
    assert (empty / "small.ckpt").is_file()
