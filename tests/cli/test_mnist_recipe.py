"""The shipped MNIST recipe, as a user runs it: `robust-train fit --config
configs/mnist5k_finetune_every_map.yaml` fine-tunes the shipped natural model into one that
behaves like the shipped robust checkpoint (accuracy, predictions, robustness under attack). The
command runs in a process of the warm console (tests/support/warm_console.py): its own process,
without the console script's seconds of imports."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.core.resources import shipped_checkpoint
from robust_train.core.runtime import predict
from robust_train.data import MNIST5kDataModule
from robust_train.models import load_classifier

ROOT = Path(__file__).resolve().parents[2]


def _topk_under_attack(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean saliency top-100 intersection under a short RAR-style top-k attack (eps 0.3)."""
    result = fragility_attack(
        model,
        x,
        y,
        explainer="saliency",
        objective="topk",
        epsilon=0.3,
        step_size=0.075,
        n_steps=10,
        k=200,
        measure_k=100,
        seed=0,
    )
    values = result.topk_intersection
    return float(values[torch.isfinite(values)].mean())


@pytest.mark.heavy  # the shipped recipe's whole fit, compared with the shipped model
def test_finetune_config_reproduces_the_shipped_robust_model(console, tmp_path):
    torch.set_num_threads(1)
    done = console(
        "fit",
        "--config",
        str(ROOT / "configs" / "mnist5k_finetune_every_map.yaml"),
        "--model.init_checkpoint",
        str(shipped_checkpoint("mnist5k_baseline")),
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--checkpoint_root",
        str(tmp_path / "runs"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "T_max" not in done.stderr  # the config's cosine period is the fit's length
    (last,) = (tmp_path / "runs").glob("mnist5k_finetune_every_map/latest/last.ckpt")
    tuned = load_classifier(last)
    shipped = load_classifier(shipped_checkpoint("mnist5k_robust"))
    natural = load_classifier(shipped_checkpoint("mnist5k_baseline"))
    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.test_set.tensors
    with torch.no_grad():
        p_tuned, p_shipped = predict(tuned, x, 256), predict(shipped, x, 256)
    acc_tuned = float((p_tuned == y).float().mean())
    acc_shipped = float((p_shipped == y).float().mean())
    # Another BLAS or CPU takes another path through 110 steps: close, not equal.
    assert acc_tuned == pytest.approx(acc_shipped, abs=0.015)
    assert float((p_tuned == p_shipped).float().mean()) >= 0.95
    xs, ys = x[:32], y[:32]
    keep = predict(natural, xs, 256) == ys
    robust = _topk_under_attack(tuned, xs[keep], ys[keep])
    baseline = _topk_under_attack(natural, xs[keep], ys[keep])
    assert robust > baseline + 0.25, (robust, baseline)
