"""Small things a new user meets first: a copied config found by its name, a file of weights
given as a checkpoint."""

from __future__ import annotations

import torch

from robust_train.app.shipped_files import lightning_arguments
from robust_train.core.resources import copy_shipped, resolve_file, shipped_config


def test_a_local_copy_of_a_shipped_config_wins_by_its_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert resolve_file("mnist5k_baseline", "configs", announce=None) == str(
        shipped_config("mnist5k_baseline")
    )  # no copy yet: the shipped file
    copy = copy_shipped("configs/mnist5k_baseline.yaml", ".")  # `robust-train assets copy`
    assert copy.resolve() == (tmp_path / "mnist5k_baseline.yaml").resolve()
    capsys.readouterr()
    assert resolve_file("mnist5k_baseline", "configs") == "mnist5k_baseline.yaml"
    assert lightning_arguments(["fit", "--config", "mnist5k_baseline"]) == [
        "fit",
        "--config",
        "mnist5k_baseline.yaml",
    ]
    assert "shipped" not in capsys.readouterr().err  # nothing says the copy is not there
    assert resolve_file("mnist5k_baseline", "checkpoints", announce=None).endswith(".ckpt")


def test_a_weights_file_given_as_checkpoint_points_to_model_and_weights(tmp_path, cli):
    torch.save(torch.nn.Linear(3, 2).state_dict(), tmp_path / "weights.pth")
    done = cli("evaluate", "--ckpt", tmp_path / "weights.pth", "--out", tmp_path / "o")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "is a state dict (weights only) not written by `robust-train fit`" in line
    assert "--model MODEL --weights weights.pth --data-config DATA.yaml" in line
    done = cli("compare", tmp_path / "weights.pth", tmp_path / "weights.pth", "--names", "a", "b",
               "--out", tmp_path / "c")  # fmt: skip
    assert done.returncode == 2
    assert "--model MODEL with the weights files as positionals" in done.stderr
    assert not (tmp_path / "o").exists()
