"""Monitors score the maps against a datamodule's ground-truth masks: the right mask per image."""

from __future__ import annotations

import math

import pytest
import pytorch_lightning as pl
import torch

from robust_train.callbacks import LocalisationMonitor, RobustnessMonitor
from robust_train.core.runtime import predict
from robust_train.data.base import heldout_rows
from robust_train.explain import importance_map, saliency
from tests.support.monitor_helpers import CHEAP_FRAGILITY, TRAINER, DigitsData

MEASURES = ("relevance_mass", "relevance_rank", "pointing_game")


class MaskedDigits(DigitsData):
    """Digits whose "evidence" of item i is a different block for each item (so a mask given to
    the wrong image scores differently): rows (i % 5) .. (i % 5) + 3, every column."""

    def masks(self, split: str) -> torch.Tensor:
        size = len(getattr(self, split))
        masks = torch.zeros(size, 8, 8, dtype=torch.bool)
        for i in range(size):
            masks[i, i % 5 : i % 5 + 4] = True
        return masks


def fit(module, data, monitor) -> pl.Trainer:
    trainer = pl.Trainer(
        max_epochs=1, logger=False, callbacks=[monitor], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    return trainer


def test_monitor_scores_clean_maps_against_each_images_own_mask(module):
    data = MaskedDigits()
    monitor = RobustnessMonitor(parts=["fragility"], attacks=["topk"], **CHEAP_FRAGILITY)
    trainer = fit(module, data, monitor)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # Reference: the clean saliency maps of the correctly classified held-out images, scored
    # by hand against the masks of their rows of the val split.
    rows = heldout_rows(CHEAP_FRAGILITY["n_samples"], monitor.seed, mode="random", size=256)
    x, y = data.val.tensors[0][rows], data.val.tensors[1][rows]
    masks = data.masks("val")[rows].float()
    model = module.model.eval()
    correct = predict(model, x, 64) == y
    maps = importance_map(saliency(model, x[correct], y[correct])).detach()
    mass = (maps * masks[correct]).flatten(1).sum(1) / maps.flatten(1).sum(1)
    assert metrics["robustness/localisation/saliency/relevance_mass"] == pytest.approx(
        float(mass.mean()), rel=1e-4
    )
    top = maps.flatten(1).argmax(1)
    pointing = masks[correct].flatten(1).gather(1, top[:, None]).squeeze(1)
    assert metrics["robustness/localisation/saliency/pointing_game"] == pytest.approx(
        float(pointing.mean()), abs=1e-6
    )
    for measure in MEASURES:  # the attacked maps too, in [0, 1]
        assert 0.0 <= metrics[f"robustness/attack/saliency/topk/{measure}"] <= 1.0
    assert set(monitor.keys()) <= set(metrics)


def test_no_masks_no_localisation_keys_and_false_turns_it_off(module):
    trainer = fit(module, DigitsData(), RobustnessMonitor(parts=["fragility"], **CHEAP_FRAGILITY))
    assert not [k for k in trainer.callback_metrics if k.endswith("relevance_mass")]
    off = RobustnessMonitor(parts=["fragility"], localisation=False, **CHEAP_FRAGILITY)
    trainer = fit(module, MaskedDigits(), off)
    assert not [k for k in trainer.callback_metrics if "localisation" in k]


def test_localisation_monitor_requires_masks_and_logs_its_keys(module):
    monitor = LocalisationMonitor(attacks=["topk"], **CHEAP_FRAGILITY)
    assert "robustness/localisation/saliency/pointing_game" in monitor.keys()
    with pytest.raises(ValueError, match="localisation=True.*DigitsData has none"):
        fit(module, DigitsData(), monitor)
    monitor = LocalisationMonitor(attacks=["topk"], **CHEAP_FRAGILITY)
    trainer = fit(module, MaskedDigits(), monitor)
    value = float(trainer.callback_metrics["robustness/attack/saliency/topk/relevance_rank"])
    assert not math.isnan(value)


def test_bad_localisation_arguments_are_refused():
    with pytest.raises(ValueError, match="`localisation` must be None, True or False, got 'yes'"):
        RobustnessMonitor(parts=["fragility"], localisation="yes")
    with pytest.raises(ValueError, match="`parts` has neither: \\['lipschitz'\\]"):
        RobustnessMonitor(parts=["lipschitz"], localisation=True)
    with pytest.raises(TypeError, match="sets `parts` itself"):
        LocalisationMonitor(parts=["fragility"])
