"""The shipped digits checkpoints load, match the accuracy the README states, and fine-tune."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from robust_train.app.checkpoint_io import export_checkpoint, heldout_tensors, load_checkpoint
from robust_train.app.lightning_cli import lightning_main
from robust_train.core.resources import shipped_checkpoint, shipped_config
from robust_train.evaluation import EvaluationSettings, evaluate_classifier
from robust_train.models import SmallCNN, load_classifier
from robust_train.models.loading import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("digits_baseline", "digits_robust")


def readme_accuracy(name: str) -> float:
    """The accuracy in the README's table row `| checkpoints/<name>.ckpt | <accuracy> | ...`."""
    text = (ROOT / "README.md").read_text()
    match = re.search(rf"\| `checkpoints/{name}\.ckpt` \| ([0-9.]+) \|", text)
    assert match, f"README has no accuracy row for checkpoints/{name}.ckpt"
    return float(match.group(1))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checkpoint_loads_with_the_stated_accuracy(name):
    path = shipped_checkpoint(name)
    assert path.stat().st_size < 1_000_000
    model = load_classifier(path)
    assert isinstance(model, SmallCNN) and not model.training
    model, data = load_checkpoint(path)
    _, _, accuracy = heldout_tensors(data, 1, model=model)
    assert accuracy == pytest.approx(readme_accuracy(name), abs=5e-4)


def test_export_keeps_what_loading_needs(tmp_path):
    src = shipped_checkpoint("digits_robust")
    dst = export_checkpoint(src, tmp_path / "copy.ckpt")
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(load_classifier(src)(x), load_classifier(dst)(x))
    with pytest.raises(CheckpointError, match="src"):
        torch.save({"weights": 1}, tmp_path / "bad.ckpt")
        export_checkpoint(tmp_path / "bad.ckpt", tmp_path / "out.ckpt")


@pytest.mark.heavy  # a fine-tune of the shipped baseline and two evaluations on 200 images
def test_finetuning_the_baseline_with_the_penalty_makes_maps_robust(tmp_path):
    torch.set_num_threads(1)
    # a 10-step top-k attack (the default takes 50): the same attack before and after, and the
    # same means to 0.01 on the baseline
    settings = EvaluationSettings(
        n_samples=200, n_steps=10, attacks=("topk",), parts=("fragility",), ensemble=False
    )
    topk = "attack/saliency/topk/topk_intersection"
    base, data = load_checkpoint(shipped_checkpoint("digits_baseline"))
    x, y, acc_before = heldout_tensors(data, 200, model=base)
    before = evaluate_classifier(base, x, y, settings, progress=False)["measures"][topk]
    cli = lightning_main(
        [
            "--config",
            str(shipped_config("finetune_digits_checkpoint")),
            "--model.init_checkpoint",
            str(shipped_checkpoint("digits_baseline")),
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--checkpoint_root",
            str(tmp_path),
        ],
        run=False,
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    tuned = cli.model.model.eval()
    _, _, acc_after = heldout_tensors(data, 1, model=tuned)
    after = evaluate_classifier(tuned, x, y, settings, progress=False)["measures"][topk]
    # Measured: 0.558 -> 0.689 top-k intersection, accuracy 0.964 -> 0.961 (6 epochs).
    assert after > before + 0.08
    assert acc_after >= acc_before - 0.01
