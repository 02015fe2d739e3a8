"""RobustClassifier under a real Lightning Trainer."""

from __future__ import annotations

import math
import warnings

import pytest
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.regularizers import (
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    PenaltyTerm,
)
from tests.support.helpers import TinyCNN, digits_tensors


def _loaders(n_train: int = 256, n_val: int = 128):
    x, y = digits_tensors()
    train = DataLoader(TensorDataset(x[:n_train], y[:n_train]), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x[1400 : 1400 + n_val], y[1400 : 1400 + n_val]), batch_size=64)
    return train, val


def _trainer(**kwargs) -> pl.Trainer:
    defaults = dict(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return pl.Trainer(**{**defaults, **kwargs})


@pytest.mark.parametrize(
    "penalty",
    [
        ExplanationSmoothness(explainer="saliency", seed=0),
        InputGradientNorm(),
        InputGradientNorm(method="finite_difference"),
        Curvature(weight=0.01, seed=0),
        Curvature(method="gradient_difference", weight=0.01),
    ],
    ids=lambda p: f"{p.name}-{getattr(p, 'method', '')}",
)
def test_fit_logs_every_loss_part(penalty):
    train, val = _loaders()
    module = RobustClassifier(TinyCNN(), penalties=[penalty])
    trainer = _trainer()
    trainer.fit(module, train, val)
    logged = trainer.callback_metrics
    for key in (
        "train/ce_epoch",
        "train/loss_epoch",
        f"train/penalty/{penalty.name}_epoch",
        "train/acc",
        "val/acc",
        "val/loss",
    ):
        assert key in logged, key
        assert math.isfinite(float(logged[key]))
    # loss = ce + w * penalty, on the epoch means
    expected = (
        logged["train/ce_epoch"] + penalty.weight * logged[f"train/penalty/{penalty.name}_epoch"]
    )
    assert torch.allclose(logged["train/loss_epoch"], expected, rtol=1e-4)


def test_training_reduces_loss_and_restores_nothing_unexpected():
    train, val = _loaders(n_train=256)
    module = RobustClassifier(
        TinyCNN(),
        penalties=[ExplanationSmoothness(explainer="saliency", seed=0)],
        optimizer=lambda p: torch.optim.Adam(p, lr=3e-3),
    )
    first = _trainer(max_epochs=1)
    first.fit(module, train, val)
    loss_1 = float(first.callback_metrics["train/ce_epoch"])
    more = _trainer(max_epochs=3)
    more.fit(module, train, val)
    assert float(more.callback_metrics["train/ce_epoch"]) < loss_1


class ExplodingPenalty(PenaltyTerm):
    double_backprop = False
    default_name = "boom"

    def penalty(self, model, inputs, target, logits):
        return torch.full((inputs.shape[0],), float("nan")) + 0 * logits.sum()


def test_nonfinite_penalty_raises_with_its_name():
    train, val = _loaders()
    module = RobustClassifier(TinyCNN(), penalties=[ExplodingPenalty()])
    with pytest.raises(FloatingPointError, match="penalty/boom"):
        _trainer().fit(module, train, val)


def test_nonfinite_penalty_skip_keeps_weights():
    train, val = _loaders()
    model = TinyCNN()
    before = [p.detach().clone() for p in model.parameters()]
    module = RobustClassifier(model, penalties=[ExplodingPenalty()], on_nonfinite="skip")
    with pytest.warns(UserWarning, match="step skipped"):
        _trainer(limit_train_batches=2, limit_val_batches=0).fit(module, train)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_penalty_warmup_is_linear():
    train, val = _loaders()
    module = RobustClassifier(
        TinyCNN(), penalties=[Curvature(weight=0.01)], penalty_warmup_epochs=2
    )
    trainer = _trainer(max_epochs=1, limit_train_batches=4, limit_val_batches=0)
    trainer.fit(module, train)
    module.trainer.fit_loop.epoch_progress.current.completed = 1  # as if in epoch 1
    assert module.penalty_scale(0) == pytest.approx(module.current_epoch / 2)
    assert module.penalty_scale(2) == pytest.approx((module.current_epoch + 0.5) / 2)


def test_freeze_backbone_trains_only_the_head_first():
    train, _ = _loaders()
    model = TinyCNN()
    conv_before = model.net[0].weight.detach().clone()
    head_before = model.net[-1].weight.detach().clone()
    module = RobustClassifier(model, freeze_backbone_epochs=1)
    _trainer(max_epochs=1, limit_val_batches=0).fit(module, train)
    assert torch.equal(model.net[0].weight, conv_before)
    assert not torch.equal(model.net[-1].weight, head_before)
    _trainer(max_epochs=2, limit_val_batches=0).fit(module, train)
    assert not torch.equal(model.net[0].weight, conv_before)


def test_softplus_option_swaps_relus():
    module = RobustClassifier(TinyCNN(), softplus_beta=10.0)
    assert not any(isinstance(m, nn.ReLU) for m in module.modules())
    assert sum(isinstance(m, nn.Softplus) for m in module.modules()) == 2


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="model"):
        RobustClassifier("resnet")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"penalties\[0\]"):
        RobustClassifier(TinyCNN(), penalties=["smoothness"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="distinct names"):
        RobustClassifier(TinyCNN(), penalties=[Curvature(), Curvature()])
    with pytest.raises(ValueError, match="on_nonfinite.*'ignore'"):
        RobustClassifier(TinyCNN(), on_nonfinite="ignore")
    with pytest.raises(ValueError, match="softplus_beta.*-1"):
        RobustClassifier(TinyCNN(), softplus_beta=-1.0)


def test_images_outside_unit_range_are_refused_in_training():
    x, y = digits_tensors()
    loader = DataLoader(TensorDataset(x[:64] * 16, y[:64]), batch_size=32)
    with pytest.raises(ValueError, match=r"batch images.*\[0, 1\]"):
        _trainer(limit_val_batches=0).fit(RobustClassifier(TinyCNN()), loader)


@pytest.mark.parametrize("interval, expected_steps", [("step", 8), ("epoch", 2)])
def test_lr_scheduler_interval_steps_the_scheduler_per_step_or_epoch(interval, expected_steps):
    train, _ = _loaders(n_train=256)  # 4 batches of 64
    module = RobustClassifier(
        TinyCNN(),
        optimizer=lambda p: torch.optim.SGD(p, lr=1.0),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
        lr_scheduler_interval=interval,
    )
    trainer = _trainer(max_epochs=2, limit_val_batches=0)
    trainer.fit(module, train)
    (optimizer,) = trainer.optimizers
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5**expected_steps)


@pytest.mark.parametrize("t_max, warns", [(8, False), (4, True), (20, True)])
def test_cosine_period_other_than_the_fit_warns(t_max, warns):
    train, _ = _loaders(n_train=256)  # 4 batches of 64, 2 epochs: 8 optimisation steps
    module = RobustClassifier(
        TinyCNN(),
        optimizer=lambda p: torch.optim.SGD(p, lr=1.0),
        lr_scheduler=lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=t_max),
        lr_scheduler_interval="step",
    )
    trainer = _trainer(max_epochs=2, limit_val_batches=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, train)
    messages = [str(w.message) for w in caught if "T_max" in str(w.message)]
    assert bool(messages) is warns
    if warns:
        assert f"T_max={t_max}" in messages[0] and "8 optimisation steps" in messages[0]
        assert "set T_max: 8" in messages[0]
    (optimizer,) = trainer.optimizers
    if not warns:  # decayed to eta_min = 0 exactly at the end of the fit
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_lr_scheduler_interval_is_checked():
    with pytest.raises(ValueError, match="lr_scheduler_interval.*'batch'"):
        RobustClassifier(TinyCNN(), lr_scheduler_interval="batch")
