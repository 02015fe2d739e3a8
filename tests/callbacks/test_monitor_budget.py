"""The overhead cap: evaluations are skipped to keep the monitor's share of the fit's time small."""

from __future__ import annotations

import logging

import pytest
import pytorch_lightning as pl
from callbacks.monitor_helpers import CHEAP_LIPSCHITZ, TRAINER

from robust_train import RobustClassifier
from robust_train.callbacks import LipschitzMonitor
from robust_train.callbacks._budget import OverheadBudget

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
    "max_overhead, expected", [(1e-9, [0, 3]), (1e9, [0, 1, 2, 3]), (None, [0, 1, 2, 3])]
)
def test_cap_skips_middle_epochs_only(module, data, caplog, monkeypatch, max_overhead, expected):
    # The note goes through Lightning's rank-zero logger; Lightning's "pytorch_lightning" logger
    # stops propagation to the root logger (caplog's) when it is imported before the root logger
    # has a handler, so whether the note reaches caplog would depend on the tests run before.
    monkeypatch.setattr(logging.getLogger("pytorch_lightning"), "propagate", True)
    monitor = LipschitzMonitor(**{**TINY, "max_overhead": max_overhead})
    with caplog.at_level(logging.INFO):
        trainer = fit(module, data, monitor, 4)
    assert monitor.evaluated_epochs == expected
    notes = {r.getMessage() for r in caplog.records if "to keep its share" in r.getMessage()}
    assert len(notes) == (1 if len(expected) < 4 else 0)  # one note (a record may arrive twice)
    share = float(trainer.callback_metrics["robustness/share/lipschitz"])
    assert 0 < share < 1
    assert share == pytest.approx(monitor.budget.share)


def test_resumed_run_keeps_its_budget(tmp_path, module, data, trained_digits):
    first = LipschitzMonitor(**TINY)
    trainer = fit(module, data, first, 2)
    assert first.evaluated_epochs == [0, 1]  # first and last of that fit
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
    # The restored cost says epoch 2 would break the cap; without the state it would run there.
    assert second.evaluated_epochs == [0, 1, 3]
    assert second.budget.spent_seconds > first.budget.spent_seconds > 0
