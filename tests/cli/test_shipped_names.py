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

from robust_train.app.cli import main
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


def test_assets_lists_locates_and_copies(empty, capsys):
    assert main(["assets", "list"]) == 0
    listing = capsys.readouterr().out
    assert (
        "checkpoints/mnist5k_robust.ckpt" in listing and "configs/digits_baseline.yaml" in listing
    )
    assert str(assets_dir()) in listing
    assert main(["assets", "path", "mnist5k_robust.ckpt"]) == 0
    assert capsys.readouterr().out.strip() == str(shipped_checkpoint("mnist5k_robust"))
    assert main(["assets", "copy", "configs/digits_baseline.yaml", "mine.yaml"]) == 0
    assert (empty / "mine.yaml").read_bytes() == shipped_config("digits_baseline").read_bytes()
    capsys.readouterr()
    assert main(["assets", "copy", "configs/digits_baseline.yaml", "mine.yaml"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["assets", "copy", "digits_baseline.yaml", "mine.yaml", "--overwrite"]) == 0
    for bad in (["assets", "path", "mnist5k_baseline"], ["assets", "path", "nope"], ["assets"]):
        assert main(bad) == 2
        err = capsys.readouterr().err
        assert err.startswith("robust-train: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("given", ["configs/digits_baseline.yaml", "digits_baseline"])
def test_fit_config_by_name_from_an_empty_folder(empty, capsys, given):
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", given, "--print_config"])
    assert stop.value.code in (0, None)
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["experiment"] == "digits_baseline"
    notes = [line for line in captured.err.splitlines() if line.startswith("robust-train: ")]
    assert notes == [
        f"robust-train: `--config` {given!r}: using the shipped config "
        f"{shipped_config('digits_baseline')} (no such file here)"
    ]


def _finetune(config: str | Path, folder: Path) -> torch.nn.Module:
    cli = lightning_main(
        ["--config", str(config), *QUIET, "--checkpoint_root", str(folder)], run=False
    )
    return cli.model.model


def test_a_shipped_finetune_starts_from_the_shipped_checkpoint_not_a_local_file(empty):
    """A file at the config's relative path in the working folder is not what the shipped
    config means; the user's own copy of the config does mean it."""
    decoy = empty / "checkpoints" / "digits_baseline.ckpt"
    decoy.parent.mkdir()
    decoy.write_bytes(b"not a checkpoint")
    shipped = torch.load(shipped_checkpoint("digits_baseline"), weights_only=True)["state_dict"]
    net = _finetune("configs/finetune_digits_checkpoint.yaml", empty / "runs")
    assert all(torch.equal(v, shipped[f"model.{k}"]) for k, v in net.state_dict().items())
    main(["assets", "copy", "finetune_digits_checkpoint.yaml", "mine.yaml"])
    with pytest.raises(CheckpointError, match="checkpoints/digits_baseline.ckpt"):
        _finetune("mine.yaml", empty / "runs")
    decoy.unlink()  # no local file: the copy's relative path names the shipped checkpoint
    net = _finetune("mine.yaml", empty / "runs")
    assert all(torch.equal(v, shipped[f"model.{k}"]) for k, v in net.state_dict().items())


def test_evaluate_and_export_take_a_shipped_checkpoint_by_name(empty, capsys):
    for _ in range(2):  # the same name twice: the same results folder, not "other checkpoints"
        assert main(["evaluate", "--ckpt", "digits_baseline", *TINY_EVAL]) == 0
    err = capsys.readouterr().err
    assert err.count("`--ckpt` 'digits_baseline': using the shipped checkpoint") == 2
    (results,) = (empty / "runs" / "eval" / "digits_baseline").glob("*/results.json")
    stored = json.loads(results.read_text())["digits_baseline"]
    assert stored["checkpoint_path"] == str(shipped_checkpoint("digits_baseline").resolve())
    assert main(["evaluate", "--ckpt", "digits_robust", "--data-config", "digits_baseline",
                 "--out", "eval", *TINY_EVAL]) == 0  # fmt: skip
    assert "`--data-config` 'digits_baseline': using the shipped config" in capsys.readouterr().err
    assert main(["export", "checkpoints/digits_robust.ckpt", "small.ckpt"]) == 0
    assert (empty / "small.ckpt").is_file()
