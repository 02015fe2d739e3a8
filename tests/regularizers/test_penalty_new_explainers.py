"""The smoothness-family penalties on Grad-CAM and DeepLIFT maps: double backprop through the map
gives finite, non-zero parameter gradients, also with an ascent, and a real Trainer fit runs."""

from __future__ import annotations

import warnings

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.models import MNISTConvNet
from robust_train.regularizers import ExplanationSmoothness, get_penalty
from tests.support.helpers import TinyCNN, digits_tensors

NEW = ("grad_cam", "deeplift")


@pytest.mark.parametrize("explainer", NEW)
@pytest.mark.parametrize("ascent", [0, 1])
def test_penalty_backpropagates_through_the_map(explainer, ascent):
    model = TinyCNN(batchnorm=True).train()
    x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4, 5])
    term = get_penalty(
        "smoothness", explainer=explainer, radius=0.3, distance="cosine", seed=0,
        n_ascent_steps=ascent,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no zero-direction warning: the ascent moves
        value = term(model, x.requires_grad_(True), y)
    assert value.shape == (6,) and bool(torch.isfinite(value).all())
    value.mean().backward()
    grads = [p.grad for p in model.parameters() if p.dim() > 1]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert all(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("explainer", NEW)
def test_trainer_fit_of_a_few_steps(explainer):
    x, y = digits_tensors()
    x = torch.nn.functional.interpolate(x, size=28)  # 28x28: MNISTConvNet's two max-pools
    train = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=32)
    penalty = ExplanationSmoothness(
        weight=10.0, explainer=explainer, radius=0.3, distance="cosine", seed=0
    )
    model = MNISTConvNet(channels=(4, 8), hidden=16)
    module = RobustClassifier(model, [penalty])
    before = [p.detach().clone() for p in model.parameters()]
    trainer = pl.Trainer(
        max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(module, train)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["train/loss"]) and float(metrics["train/penalty/smoothness"]) > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
