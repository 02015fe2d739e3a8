"""Each job of the application layer has one home, and the names the app layer re-exports are
the same objects: held-out selection and evaluation on a split (`evaluation/`), the run-folder
lifecycle (`training/`), the trust policy for class paths (`core/`), check-data (`app/`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import robust_train.app.checkpoint_io as checkpoint_io
import robust_train.app.lightning_cli as lightning_cli
import robust_train.core.trust as trust
import robust_train.evaluation.heldout as heldout
import robust_train.evaluation.split as split
import robust_train.models.config as model_config
import robust_train.training.run_folder as run_folder
from robust_train.app.cli import COMMANDS


def test_reexports_are_the_moved_objects() -> None:
    for name in (
        "DataSettingsError",
        "HeldOut",
        "heldout_subset",
        "heldout_tensors",
        "instantiate",
    ):
        assert getattr(checkpoint_io, name) is getattr(heldout, name)
    assert checkpoint_io.evaluate_on_split is split.evaluate_on_split
    for name in ("check_recorded_import", "UntrustedClassPathError", "RECORDED_PACKAGES"):
        assert hasattr(trust, name) and not hasattr(model_config, name)  # one home, no re-export
    for name in ("check_run_name", "check_resume_link"):
        assert getattr(lightning_cli, name) is getattr(run_folder, name)


def test_each_module_keeps_its_own_job() -> None:
    assert not hasattr(checkpoint_io, "checkpoint_meta")  # it had no caller
    assert not hasattr(lightning_cli, "check_data_main")
    assert COMMANDS["check-data"][1] == "robust_train.app.check_data:check_data_main"
    assert trust.UntrustedClassPathError.__module__ == "robust_train.core.trust"


def test_one_resolution_of_the_data_for_ckpt_and_model(tmp_path: Path) -> None:
    """`--ckpt` and `--model` resolve their data in one place: the user's `--data-config`, else
    what the checkpoint records, else one error naming the flag to pass."""
    config = tmp_path / "data.yaml"
    config.write_text("data:\n  class_path: robust_train.data.DigitsDataModule\n")
    data, where = checkpoint_io.evaluation_data(str(config))
    assert data == {"class_path": "robust_train.data.DigitsDataModule"}
    assert where == f"`--data-config` {str(config)!r}"
    with pytest.raises(ValueError, match="records no datamodule; pass --data-config"):
        checkpoint_io.evaluation_data(None)
