"""A fit shorter than the monitor's schedule says that nothing was evaluated, and why."""

from __future__ import annotations

import logging

import pytest
import pytorch_lightning as pl

from robust_train.callbacks import LipschitzMonitor
from tests.support.monitor_helpers import CHEAP_LIPSCHITZ, TRAINER

NOTE = "no epoch of this fit was due"


@pytest.mark.parametrize(("every", "noted"), [(2, True), (1, False)])
def test_a_fit_shorter_than_the_schedule_is_noted(module, data, caplog, monkeypatch, every, noted):
    # Lightning's logger may not propagate to caplog's root logger (see test_monitor_budget.py)
    monkeypatch.setattr(logging.getLogger("pytorch_lightning"), "propagate", True)
    monitor = LipschitzMonitor(**{**CHEAP_LIPSCHITZ, "every_n_epochs": every, "log_images": False})
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, callbacks=[monitor], **TRAINER
    )
    with caplog.at_level(logging.INFO):
        trainer.fit(module, datamodule=data)
    notes = {r.getMessage() for r in caplog.records if NOTE in r.getMessage()}
    assert monitor.evaluated_epochs == ([] if noted else [0])
    assert len(notes) == int(noted)
    if noted:
        (note,) = notes
        assert "every_n_epochs=2, 1 epoch(s) run" in note and "robust-train evaluate" in note
