"""The overhead cap holds from the first pass: a monitor estimates its first evaluation from one
timed gradient step, and skips or shrinks that pass like any other (a 224 px fit in miniature:
evaluating one image costs more than the cap leaves after a short epoch)."""

from __future__ import annotations

import copy
import logging
import time

import pytest
import pytorch_lightning as pl
import torch

from robust_train import RobustClassifier
from robust_train.callbacks import FragilityMonitor
from robust_train.callbacks._first_pass import step_seconds
from robust_train.evaluation.cost import MAP_PASSES, STEP_PASSES
from tests.support.monitor_helpers import TRAINER, SlowInEval


def fit(net, data, monitor, epochs):
    trainer = pl.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, callbacks=[monitor], **TRAINER
    )
    start = time.perf_counter()
    trainer.fit(RobustClassifier(net), datamodule=data)
    return trainer, time.perf_counter() - start


def monitor(max_overhead):
    return FragilityMonitor(
        n_samples=8, n_steps=3, attacks=("topk",), max_overhead=max_overhead, log_images=False
    )


def test_step_seconds_times_one_step_and_restores_the_model(trained_digits):
    net = SlowInEval(copy.deepcopy(trained_digits[0]).train(), per_image=0.05, per_batch=0.0)
    seconds = step_seconds(net, torch.rand(1, 1, 8, 8))
    assert 0.1 <= seconds < 2.0  # two explained forwards of one image
    assert net.training and all(p.grad is None for p in net.parameters())


def test_a_latency_bound_model_counts_a_step_as_its_map_over_the_maps_share(trained_digits):
    """Each explained forward sleeps the same whatever its passes: a plain map costs 0.05 s, more
    than its share of a step (MAP_PASSES / STEP_PASSES), so a step counts as 0.05 s x 5, not as
    the probe's two forwards (0.1 s)."""
    net = SlowInEval(copy.deepcopy(trained_digits[0]).train(), per_image=0.05, per_batch=0.0)
    seconds = step_seconds(net, torch.rand(1, 1, 8, 8))
    assert 0.05 * STEP_PASSES / MAP_PASSES * 0.95 <= seconds < 2.0


@pytest.mark.slow  # sleeps about 2 s
def test_first_pass_stays_within_the_cap(data, trained_digits, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("pytorch_lightning"), "propagate", True)
    net = SlowInEval(copy.deepcopy(trained_digits[0]).train(), per_image=0.03, per_batch=0.1)
    capped = monitor(0.1)
    with caplog.at_level(logging.INFO):
        _, seconds = fit(net, data, capped, 3)
    # one image costs more than a tenth of an epoch: no epoch before the last fits four images
    # (a quarter), and the last takes what fits, if anything
    assert capped.evaluated_epochs in ([], [2])
    share = capped.budget.spent_seconds / seconds
    # the cap is 0.1 of the fit's time; the slack covers the timing noise of a loaded machine
    # (the uncapped monitor below spends above 0.3)
    assert 0 < share <= 0.1 + 0.05, (share, capped.budget.state_dict())
    notes = " ".join(r.getMessage() for r in caplog.records)
    assert "skipping epoch 0" in notes and "one image estimated at" in notes
    # no cap: every pass on every image, far above the cap's share
    free = monitor(None)
    _, seconds = fit(copy.deepcopy(net), data, free, 3)
    assert free.evaluated_epochs == [0, 1, 2]
    assert free.budget.spent_seconds / seconds > 0.3
