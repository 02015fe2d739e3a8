"""The overhead cap: evaluations are skipped to keep the monitor's share of the fit's time small."""

from __future__ import annotations

import copy
import logging

import pytest
import pytorch_lightning as pl

import robust_train.callbacks._budget as budget_module
from robust_train import RobustClassifier
from robust_train.callbacks import LipschitzMonitor
from robust_train.callbacks._budget import OverheadBudget
from tests.support.monitor_helpers import CHEAP_LIPSCHITZ, TRAINER, SlowInEval

TINY = {**CHEAP_LIPSCHITZ, "max_overhead": 1e-9, "log_images": False}


def fit(module, data, monitor, epochs, **kwargs) -> pl.Trainer:
    trainer = pl.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, callbacks=[monitor], **TRAINER
    )
    trainer.fit(module, datamodule=data, **kwargs)
    return trainer


def test_budget_arithmetic():
    budget = OverheadBudget(0.1)
    budget.start()
    assert budget.allows(is_last=False)  # first: measures the cost
    budget.record(5.0)
    budget.other_seconds = 100.0
    assert budget.allows(is_last=False)  # 5 + 5 <= 0.1 * 100
    assert budget.allows(is_last=False, progress=0.5)  # room for the last one: 5 + 10 <= 20
    assert not budget.allows(is_last=False, progress=0.9)  # none: 5 + 10 > 11.1
    budget.record(5.0)
    assert not budget.allows(is_last=False)  # 10 + 5 > 10
    assert budget.allows(is_last=True)  # the last epoch always runs
    assert budget.share == pytest.approx(10 / 110, rel=1e-3)
    unlimited = OverheadBudget(None)
    unlimited.record(1e9)
    assert unlimited.allows(is_last=False)
    with pytest.raises(ValueError, match="`max_overhead`"):
        OverheadBudget(0.0)


@pytest.mark.parametrize(
    "max_overhead, expected", [(1e-9, []), (1e9, [0, 1, 2, 3]), (None, [0, 1, 2, 3])]
)
def test_cap_runs_what_fits_from_the_first_epoch(
    module, data, caplog, monkeypatch, max_overhead, expected
):
    # The note goes through Lightning's rank-zero logger; Lightning's "pytorch_lightning" logger
    # stops propagation to the root logger (caplog's) when it is imported before the root logger
    # has a handler, so whether the note reaches caplog would depend on the tests run before.
    monkeypatch.setattr(logging.getLogger("pytorch_lightning"), "propagate", True)
    monkeypatch.setattr(budget_module, "FLOOR_SECONDS", 0.0)  # the cap alone
    monitor = LipschitzMonitor(**{**TINY, "max_overhead": max_overhead})
    with caplog.at_level(logging.INFO):
        trainer = fit(module, data, monitor, 4)
    assert monitor.evaluated_epochs == expected
    notes = {r.getMessage() for r in caplog.records if "to keep its share" in r.getMessage()}
    assert len(notes) == (1 if len(expected) < 4 else 0)  # one note (a record may arrive twice)
    if not expected:  # the first pass's estimate (one timed step) already exceeds the cap
        assert "robustness/share/lipschitz" not in trainer.callback_metrics
        # one timed step, times the work per image in steps (a Lipschitz sample is a map,
        # cheaper than a step)
        spent, work = monitor.budget.spent_seconds, monitor.work_per_image()
        assert spent > 0 and monitor.budget.per_image == pytest.approx(spent * work)
        return
    share = float(trainer.callback_metrics["robustness/share/lipschitz"])
    assert 0 < share < 1
    if len(expected) == 4:  # the last evaluation logged the share the budget ends with
        assert share == pytest.approx(monitor.budget.share)
    else:  # skipped epochs add training time only
        assert monitor.budget.share < share


def test_resumed_run_keeps_its_budget(tmp_path, module, data, trained_digits, monkeypatch):
    monkeypatch.setattr(budget_module, "FLOOR_SECONDS", 0.0)  # the cap alone
    first = LipschitzMonitor(**TINY)
    trainer = fit(module, data, first, 2)
    assert first.evaluated_epochs == []  # one step timed: no image fits, the last epoch neither
    checkpoint = tmp_path / "last.ckpt"
    trainer.save_checkpoint(checkpoint)
    second = LipschitzMonitor(**TINY)
    fit(
        RobustClassifier(type(trained_digits[0])()),
        data,
        second,
        4,
        ckpt_path=checkpoint,
        weights_only=False,
    )
    # The restored cost says no later epoch fits; without the state epoch 2 would time a step.
    assert second.evaluated_epochs == []
    assert second.budget.per_image == first.budget.per_image > 0
    assert second.budget.spent_seconds == first.budget.spent_seconds


def test_budget_shrinks_evaluations_of_a_slow_model(monkeypatch):
    monkeypatch.setattr(budget_module, "FLOOR_SECONDS", 0.0)  # the cap alone
    budget = OverheadBudget(0.1)
    budget.record(seconds=4.0, n_images=8)  # 0.5 s per image
    budget.other_seconds = 60.0  # room: 6 - 4 = 2 s, four images
    assert budget.images(16, is_last=False) == 4
    assert budget.images(16, is_last=False, progress=0.5) == 4  # min(2, (12 - 4) / 2) s
    assert budget.images(16, is_last=False, progress=0.9) == 0  # min(2, 1.33) s: 2 < 16 // 4
    budget.other_seconds = 41.0  # room 0.1 s: not one image
    assert budget.images(16, is_last=False) == 0 and budget.images(16, is_last=True) == 0
    budget.other_seconds = 46.0  # room 0.6 s: one image, enough for the last only
    assert budget.images(16, is_last=False) == 0 and budget.images(16, is_last=True) == 1
    restored = OverheadBudget(0.1)
    restored.load_state_dict(budget.state_dict())
    assert restored.per_image == 0.5


def test_the_last_evaluation_takes_one_cheap_image_past_the_cap(monkeypatch):
    budget = OverheadBudget(0.1)
    budget.record(seconds=0.4, n_images=1)  # 0.4 s per image
    budget.other_seconds = 4.0  # room 0 s
    monkeypatch.setattr(budget_module, "FLOOR_SECONDS", 0.5)
    assert budget.images(16, is_last=False) == 0 and budget.images(16, is_last=True) == 1
    monkeypatch.setattr(budget_module, "FLOOR_SECONDS", 0.3)  # one image costs more: none
    assert budget.images(16, is_last=True) == 0


@pytest.mark.slow
def test_slow_model_keeps_the_monitor_within_its_share(data, trained_digits):
    """Evaluating all 16 images would take about 0.5 s a pass against 0.4 s of training per
    epoch (mostly sleeping: little CPU); under max_overhead=0.1 the monitor estimates the first
    pass from one timed step, then evaluates what fits."""
    net = SlowInEval(copy.deepcopy(trained_digits[0]).train(), per_image=0.01, per_batch=0.1)
    monitor = LipschitzMonitor(
        n_samples=16, lipschitz_samples=2, max_overhead=0.1, log_images=False
    )
    trainer = fit(RobustClassifier(net), data, monitor, 3)
    images = [v for _, v in monitor.history["robustness/images/lipschitz"]]
    assert all(1 <= n < 16 for n in images), (images, monitor.evaluated_epochs)  # what fits
    assert monitor.budget.share <= 0.1 * 1.5
    assert float(trainer.callback_metrics["robustness/share/lipschitz"]) <= 0.15
