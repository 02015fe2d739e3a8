"""Shipped configs and checkpoints by name (robust_train.core.resources): listing, lookup, the
local-file-wins rule, copies, and the relative paths inside shipped configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from robust_train.core.resources import (
    UnknownShippedFile,
    assets_dir,
    copy_shipped,
    list_shipped,
    resolve_file,
    shipped_checkpoint,
    shipped_config,
    shipped_name,
    shipped_overrides,
    shipped_path,
)

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = (
    "cluttered_mnist5k_baseline",
    "cluttered_mnist5k_robust",
    "digits_baseline",
    "digits_robust",
    "mnist5k_baseline",
    "mnist5k_certified",
    "mnist5k_robust",
)


def test_the_listing_is_the_files_in_the_package():
    configs = sorted(p.name for p in (ROOT / "robust_train/assets/configs").glob("*.yaml"))
    assert [Path(n).name for n in list_shipped("configs")] == configs and len(configs) >= 20
    assert list_shipped("checkpoints") == [f"checkpoints/{n}.ckpt" for n in CHECKPOINTS]
    assert list_shipped() == list_shipped("checkpoints") + list_shipped("configs")
    assert all((assets_dir() / name).is_file() for name in list_shipped())
    with pytest.raises(ValueError, match="`kind`.*'models'"):
        list_shipped("models")


@pytest.mark.parametrize(
    "name", ["mnist5k_robust", "mnist5k_robust.ckpt", "checkpoints/mnist5k_robust.ckpt"]
)
def test_every_form_of_a_name_gives_the_same_file(name):
    path = assets_dir() / "checkpoints" / "mnist5k_robust.ckpt"
    assert shipped_checkpoint(name) == path
    assert shipped_path(name, "checkpoints") == path
    if name != "mnist5k_robust":
        assert shipped_path(name) == path  # the suffix tells the kind
    assert shipped_name(path) == "checkpoints/mnist5k_robust.ckpt"


def test_names_that_name_nothing_or_two_files_are_refused_with_the_candidates():
    with pytest.raises(UnknownShippedFile, match="names both configs/mnist5k_baseline.yaml and"):
        shipped_path("mnist5k_baseline")
    assert shipped_config("mnist5k_baseline").suffix == ".yaml"
    with pytest.raises(UnknownShippedFile, match="did you mean mnist5k_robust"):
        shipped_checkpoint("mnist5k_robst")
    for other in ("configs/mnist5k_robust.ckpt", "models/mnist5k_robust.ckpt", "/abs/x.ckpt"):
        with pytest.raises(UnknownShippedFile):
            shipped_path(other)


def test_a_local_file_wins_and_a_missing_one_falls_back_with_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    shipped = str(shipped_config("mnist5k_baseline"))
    given = "configs/mnist5k_baseline.yaml"
    assert resolve_file(given, "configs", what="`--config`", announce=said.append) == shipped
    assert resolve_file("mnist5k_baseline", "configs", announce=said.append) == shipped
    assert len(said) == 2 and said[0].startswith("`--config` 'configs/mnist5k_baseline.yaml'")
    assert shipped in said[0] and "\n" not in said[0]
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mnist5k_baseline.yaml").write_text("mine: true\n")
    assert resolve_file(given, "configs", announce=said.append) == given  # the local file
    # Not a shipped name: left for the command's own error.
    for other in ("elsewhere/mnist5k_baseline.yaml", str(tmp_path / "no.yaml"), "nope"):
        assert resolve_file(other, "configs", announce=said.append) == other
    assert len(said) == 2


def test_the_default_note_goes_to_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    resolve_file("checkpoints/digits_robust.ckpt", "checkpoints", what="`--ckpt`")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("robust-train: `--ckpt` 'checkpoints/digits_robust.ckpt': ")
    assert captured.err.count("\n") == 1


def test_copies_are_written_once_unless_overwrite(tmp_path):
    copy = copy_shipped("configs/digits_baseline.yaml", tmp_path)
    assert copy == tmp_path / "digits_baseline.yaml"
    assert copy.read_bytes() == shipped_config("digits_baseline").read_bytes()
    with pytest.raises(FileExistsError, match="digits_baseline.yaml"):
        copy_shipped("digits_baseline.yaml", tmp_path)
    copy.write_text("edited\n")
    copy_shipped("digits_baseline.yaml", tmp_path, overwrite=True)
    assert copy.read_bytes() == shipped_config("digits_baseline").read_bytes()
    renamed = copy_shipped("digits_robust.ckpt", tmp_path / "sub" / "mine.ckpt")
    assert renamed.read_bytes() == shipped_checkpoint("digits_robust").read_bytes()


def _init_checkpoint(config):
    return (yaml.safe_load(config.read_text()).get("model") or {}).get("init_checkpoint")


def test_relative_paths_in_shipped_configs_name_shipped_files(tmp_path):
    finetunes = [
        n for n in list_shipped("configs") if isinstance(_init_checkpoint(assets_dir() / n), str)
    ]
    assert len(finetunes) >= 5
    # a fine-tune whose checkpoint the user must name (`init_checkpoint: null`) has no override
    for name in set(list_shipped("configs")) - set(finetunes):
        assert "model.init_checkpoint" not in shipped_overrides(assets_dir() / name), name
    for name in finetunes:
        config = assets_dir() / name
        stored = yaml.safe_load(config.read_text())["model"]["init_checkpoint"]
        overrides = shipped_overrides(config)
        assert overrides == {"model.init_checkpoint": str(assets_dir() / stored)}, name
    assert shipped_overrides(shipped_config("digits_baseline")) == {}
    # A copy is the user's own config: its relative paths stay relative to the working folder.
    assert shipped_overrides(copy_shipped(finetunes[0], tmp_path)) == {}


def test_the_checkout_keeps_configs_at_the_top_level():
    """configs/ of a checkout is a link to the shipped folder (not part of the wheel)."""
    link = ROOT / "configs"
    assert link.is_symlink() and link.resolve() == (assets_dir() / "configs").resolve()
    assert shipped_name(link / "digits_baseline.yaml") == "configs/digits_baseline.yaml"
