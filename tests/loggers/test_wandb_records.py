"""What a fit leaves in W&B, read back from the offline run files: the full
resolved config and config.yaml, the best checkpoint in the summary, a resumed fit continuing the
same run (id stored in the checkpoint), checkpoint artifacts offline, and evaluate's numbers added
to the run's summary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import wandb
import yaml

from tests.support.wandb_reader import read_run

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "digits_smoothness.yaml"
TINY = [
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.callbacks=[]",
]
FAST_EVAL = [
    "--n-samples",
    "8",
    "--no-ensemble",
    "--n-steps",
    "2",
    "--lipschitz-samples",
    "2",
    "--fidelity-steps",
    "3",
    "--ig-steps",
    "2",
    "--attacks",
    "topk",
    "--explainers",
    "saliency",
    "--no-progress",
]


def _runs(folder: Path) -> list[Path]:
    return sorted((folder / "runs" / "wandb").glob("offline-run-*"))


@pytest.mark.slow
def test_fit_resume_and_evaluate_share_one_complete_wandb_run(tmp_path: Path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    assert cli("fit", "--config", CONFIG, *TINY, "--trainer.max_epochs=2").returncode == 0
    wandb.finish()
    folder = tmp_path / "checkpoints" / "digits_smoothness" / "latest"
    stored = torch.load(folder / "last.ckpt", map_location="cpu", weights_only=True)["wandb_run"]
    (first_dir,) = _runs(tmp_path)
    first = read_run(first_dir)
    assert stored["id"] in first_dir.name  # offline-run-<time>-<id>[-<n>]

    # The full resolved config, not only the module's descriptive hparams.
    assert first.config["model"]["optimizer"]["class_path"] == "torch.optim.Adam"
    assert first.config["model"]["optimizer"]["init_args"]["lr"] == pytest.approx(0.003)
    assert first.config["model"]["model"]["class_path"] == "robust_train.models.SmallCNN"
    penalty = first.config["model"]["penalties"][0]
    assert (
        penalty["class_path"].endswith("ExplanationSmoothness")
        and penalty["init_args"]["radius"] == 0.1
    )
    assert (
        first.config["trainer"]["max_epochs"] == 2
        and first.config["checkpoint"]["monitor"] == "val/acc"
    )
    assert first.config["model_class"] == "SmallCNN" and first.config["penalty_terms"][
        0
    ].startswith("Explanation")
    saved = yaml.safe_load((first.files_dir / "config.yaml").read_text())
    assert saved["model"]["optimizer"]["init_args"]["lr"] == pytest.approx(0.003)
    assert first.summary["checkpoint/monitor"] == "val/acc"
    assert first.summary["checkpoint/best_path"].endswith("best.ckpt")

    # Resume: the same W&B run continues; checkpoint artifacts work offline.
    resumed = cli(
        "fit", "--config", CONFIG, *TINY, "--trainer.max_epochs=3", "--ckpt_path", "last",
        "--trainer.logger.init_args.log_model=true",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    wandb.finish()
    runs = _runs(tmp_path)
    assert len(runs) == 2 and all(stored["id"] in r.name for r in runs)
    second = read_run(next(r for r in runs if r != first_dir))
    assert "artifact" in second.record_types
    steps = first.column("trainer/global_step"), second.column("trainer/global_step")
    assert min(steps[1]) > max(steps[0]), "the resumed run continues the step axis"

    # evaluate adds its numbers to the summary of the run the checkpoint came from.
    assert cli("evaluate", "--ckpt", folder / "best.ckpt", *FAST_EVAL).returncode == 0
    third = [r for r in _runs(tmp_path) if r not in runs]
    assert len(third) == 1 and stored["id"] in third[0].name
    summary = read_run(third[0]).summary
    assert 0 <= summary["eval/accuracy"] <= 1 and 0 <= summary["eval/n_attacked"] <= 8
    # the same key as results.json and the monitors (under eval/ rather than robustness/)
    assert any(key.startswith("eval/attack/saliency/topk/") for key in summary)
