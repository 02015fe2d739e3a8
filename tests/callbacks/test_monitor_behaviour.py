"""Monitors leave training alone: modes restored, no .grad touched; schedule survives a resume;
validation-stage runs and the inference-mode error; the values equal direct metric calls."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import CSVLogger

from robust_train import RobustClassifier
from robust_train.attacks import fragility_attack
from robust_train.callbacks import FidelityMonitor, FragilityMonitor, LipschitzMonitor
from robust_train.explain import importance_map, saliency
from robust_train.metrics.functional import (
    fidelity_curves,
    fidelity_estimate,
    local_lipschitz_estimate,
)
from tests.support.monitor_helpers import CHEAP_FIDELITY, CHEAP_FRAGILITY, CHEAP_LIPSCHITZ, TRAINER


class Snapshot(Callback):
    """Records every module's train flag and every parameter's .grad at on_train_epoch_end;
    with `fill_grads`, first gives every parameter a random .grad (Lightning has cleared them by
    then), so that a monitor that zeroes, sets or accumulates .grad is caught."""

    def __init__(self, fill_grads: bool = False) -> None:
        self.fill_grads = fill_grads
        self.modes: list[dict[str, bool]] = []
        self.grads: list[dict[str, torch.Tensor | None]] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.fill_grads:
            for p in pl_module.parameters():
                p.grad = torch.randn_like(p)
        self.modes.append({n: m.training for n, m in pl_module.named_modules()})
        self.grads.append(
            {n: None if p.grad is None else p.grad.clone() for n, p in pl_module.named_parameters()}
        )


class FreezeBatchNorm(Callback):
    """Keeps the BatchNorm in eval mode while the rest trains (a common fine-tuning setup)."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        pl_module.model.net[1].eval()


class ModeProbe(FragilityMonitor):
    """Records the train flags the evaluation sees."""

    seen: list[bool]

    def evaluate(self, model, inputs, targets, predictions):
        self.seen = [m.training for m in model.modules()]
        return super().evaluate(model, inputs, targets, predictions)


class Spy(LipschitzMonitor):
    """Records when the evaluation runs."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[int, bool]] = []

    def run(self, trainer, pl_module, **kwargs):
        self.calls.append((trainer.current_epoch, trainer.sanity_checking))
        return super().run(trainer, pl_module, **kwargs)


def test_modes_restored_per_module_and_grads_untouched(bn_module, data):
    before, after = Snapshot(fill_grads=True), Snapshot()
    probe = ModeProbe(attacks=["topk"], log_images=False, **CHEAP_FRAGILITY)
    callbacks = [
        FreezeBatchNorm(),
        before,
        probe,
        LipschitzMonitor(**CHEAP_LIPSCHITZ),
        FidelityMonitor(**CHEAP_FIDELITY),
        after,
    ]
    trainer = pl.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, callbacks=callbacks, **TRAINER
    )
    trainer.fit(bn_module, datamodule=data)
    assert probe.evaluated_epochs == [0, 1]
    assert not any(probe.seen)  # evaluated in eval mode
    for modes_before, modes_after in zip(before.modes, after.modes, strict=True):
        assert modes_after == modes_before
        assert modes_before["model.net.1"] is False and modes_before["model.net.0"] is True
    for grads_before, grads_after in zip(before.grads, after.grads, strict=True):
        assert grads_before.keys() == grads_after.keys()
        assert all(g is not None for g in grads_before.values())
        for name, grad in grads_before.items():
            assert torch.equal(grad, grads_after[name]), name


def test_resume_keeps_schedule_and_subset(tmp_path, module, data, trained_digits):
    first = Spy(every_n_epochs=2, seed=None, **CHEAP_LIPSCHITZ)
    trainer = pl.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, callbacks=[first], **TRAINER
    )
    trainer.fit(module, datamodule=data)
    checkpoint = tmp_path / "epoch2.ckpt"
    trainer.save_checkpoint(checkpoint)
    assert first.calls == [(1, False)] and first.evaluated_epochs == [1]

    second = Spy(every_n_epochs=2, seed=None, **CHEAP_LIPSCHITZ)
    assert second.seed != first.seed  # a fresh draw: only the checkpoint can bring it back
    logger = CSVLogger(tmp_path)
    resumed = pl.Trainer(
        max_epochs=4, logger=logger, enable_checkpointing=False, callbacks=[second], **TRAINER
    )
    resumed.fit(
        RobustClassifier(type(trained_digits[0])()),
        datamodule=data,
        ckpt_path=checkpoint,
        weights_only=False,
    )  # RobustClassifier hparams hold a function
    assert second.calls == [(3, False)]
    assert second.evaluated_epochs == [1, 3]
    assert second.seed == first.seed
    assert torch.equal(second.held_out(resumed)[0], first.held_out(trainer)[0])
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        logged = [
            int(r["epoch"])
            for r in csv.DictReader(f)
            if r.get("robustness/lipschitz/saliency/lipschitz")
        ]
    assert logged == [3]


def test_validation_stage_runs_in_fit_validation_but_not_in_sanity_check(module, data):
    spy = Spy(stage="validation", **CHEAP_LIPSCHITZ)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        callbacks=[spy],
        **{**TRAINER, "num_sanity_val_steps": 1},
    )
    trainer.fit(module, datamodule=data)
    assert spy.calls == [(0, False), (1, False)]
    assert math.isfinite(float(trainer.callback_metrics["robustness/lipschitz/saliency/lipschitz"]))


def test_validation_stage_under_inference_mode_is_refused_in_setup(module, data):
    monitor = LipschitzMonitor(stage="validation", **CHEAP_LIPSCHITZ)
    refused = pl.Trainer(logger=False, inference_mode=True, callbacks=[monitor], **TRAINER)
    with pytest.raises(
        RuntimeError, match=r"LipschitzMonitor.*Trainer with `inference_mode=False`"
    ):
        refused.validate(module, datamodule=data, verbose=False)
    ok = pl.Trainer(logger=False, inference_mode=False, callbacks=[monitor], **TRAINER)
    (metrics,) = ok.validate(module, datamodule=data, verbose=False)
    assert metrics["robustness/lipschitz/saliency/lipschitz"] > 0
    assert monitor.evaluated_epochs == []  # trainer.validate() runs are not part of the schedule


def test_values_equal_direct_metric_calls_on_correct_images(module, data):
    fragility = FragilityMonitor(
        attacks=["topk", "mass_center"], log_images=False, **CHEAP_FRAGILITY
    )
    lipschitz = LipschitzMonitor(**CHEAP_LIPSCHITZ)
    fidelity = FidelityMonitor(log_images=False, **CHEAP_FIDELITY)
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        callbacks=[fragility, lipschitz, fidelity],
        **TRAINER,
    )
    trainer.fit(module, datamodule=data)  # evaluated after the last step: the final weights
    logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
    model = module.model.eval()
    x, y = fragility.held_out(trainer)
    assert torch.equal(x, lipschitz.held_out(trainer)[0])  # same seed, same subset
    assert all(any(torch.equal(x[i], v[0]) for v in data.val) for i in range(len(x)))  # val split
    pred = model(x).argmax(1)
    correct = pred == y
    assert int(correct.sum()) > 0
    assert logged["robustness/n_attacked"] == int(correct.sum())
    for attack in ("topk", "mass_center"):
        ref = fragility_attack(
            model,
            x[correct],
            y[correct],
            objective=attack,
            epsilon=0.1,
            n_steps=2,
            step_size=0.1,
            k=8,
            seed=0,
        )  # 2 * epsilon / n_steps
        for name in ("topk_intersection", "center_shift"):
            expected = getattr(ref, name)
            assert logged[f"robustness/attack/saliency/{attack}/{name}"] == pytest.approx(
                float(expected.mean()), abs=1e-5
            )
    lip = local_lipschitz_estimate(
        model, x, pred, explainer="saliency", radius=0.1, n_samples=2, seed=0, normalize_maps="max"
    )
    assert logged["robustness/lipschitz/saliency/lipschitz"] == pytest.approx(
        float(lip.mean()), rel=1e-5
    )
    curves = fidelity_curves(
        model, x, pred, importance_map(saliency(model, x, pred)), n_steps=4, seed=0
    )
    assert logged["robustness/fidelity/saliency/fidelity"] == pytest.approx(
        float(fidelity_estimate(curves).mean()), abs=1e-5
    )
    auc_mif = torch.trapezoid(curves.mif, curves.fractions, dim=1).mean()
    assert logged["robustness/fidelity/saliency/mif_auc"] == pytest.approx(float(auc_mif), abs=1e-5)
