"""ExplanationFragility: accumulation equals one big batch, fixed-size state, both update forms."""

from __future__ import annotations

import math

import pytest
import torch

from robust_train.attacks import FragilityResult, fragility_attack
from robust_train.metrics.fragility import ExplanationFragility
from tests.support.helpers import TinyCNN

SETTINGS = {"epsilon": 0.1, "n_steps": 3, "k": 6}


def _states(metric: ExplanationFragility) -> dict[str, torch.Tensor]:
    return {name: getattr(metric, name).clone() for name in metric._defaults}


def test_two_batch_update_equals_one_big_update_and_state_is_fixed() -> None:
    model = TinyCNN().eval()
    xa, xb = torch.rand(5, 1, 8, 8), torch.rand(7, 1, 8, 8)
    ra = fragility_attack(model, xa, model(xa).argmax(1), seed=0, **SETTINGS)
    rb = fragility_attack(model, xb, model(xb).argmax(1), seed=1, **SETTINGS)
    ra.spearman[0] = float("nan")  # a constant-map NaN must be left out, not poison the mean
    split, joined = ExplanationFragility(**SETTINGS), ExplanationFragility(**SETTINGS)
    shapes = {name: value.shape for name, value in _states(split).items()}
    split.update(ra)
    split.update(rb)
    joined.update(FragilityResult.concatenate([ra, rb]))
    assert {name: value.shape for name, value in _states(split).items()} == shapes
    for name, value in _states(split).items():
        assert torch.allclose(value, getattr(joined, name)), name
    out = split.compute()
    assert int(out["n_samples"]) == 12
    for name in ("topk_intersection", "kendall", "center_shift"):
        expected = torch.cat([getattr(ra, name), getattr(rb, name)]).mean()
        assert out[name].item() == pytest.approx(expected.item(), abs=1e-6)
    assert out["spearman"].item() == pytest.approx(
        torch.cat([ra.spearman[1:], rb.spearman]).mean().item(), abs=1e-6
    )
    improved = torch.cat([ra.improved, rb.improved]).float().mean()
    assert out["improved_rate"].item() == pytest.approx(improved.item())


def test_update_with_model_runs_the_held_attack() -> None:
    model = TinyCNN().eval()
    x = torch.rand(6, 1, 8, 8)
    target = model(x).argmax(1)
    metric = ExplanationFragility(seed=0, **SETTINGS)
    metric.update(model, x, target)  # torchmetrics runs update with grad disabled: must still work
    expected = fragility_attack(model, x, target, seed=0, **SETTINGS)
    assert metric.compute()["topk_intersection"].item() == pytest.approx(
        expected.topk_intersection.mean().item()
    )
    metric.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert int(metric.n_samples) == 0 and math.isnan(metric.compute()["kendall"].item())


def test_only_correct_counts_correctly_classified_samples() -> None:
    model = TinyCNN().eval()
    x = torch.rand(6, 1, 8, 8)
    pred = model(x).argmax(1)
    target = pred.clone()
    target[:2] = (pred[:2] + 1) % 10  # two "misclassified" samples
    result = fragility_attack(model, x, target, **SETTINGS)
    metric = ExplanationFragility(only_correct=True, **SETTINGS)
    metric.update(result)
    assert int(metric.n_samples) == 4
    assert metric.compute()["center_shift"].item() == pytest.approx(
        result.center_shift[2:].mean().item(), abs=1e-6
    )


def test_bad_metric_arguments() -> None:
    with pytest.raises(ValueError, match="`epsilon` must be > 0"):
        ExplanationFragility(epsilon=0.0)
    with pytest.raises(ValueError, match="Unknown `objective`"):
        ExplanationFragility(epsilon=0.1, objective="top")
    with pytest.raises(ValueError, match="targeted"):
        ExplanationFragility(epsilon=0.1, objective="targeted")
    metric = ExplanationFragility(**SETTINGS)
    with pytest.raises(ValueError, match="needs `inputs` and `target`"):
        metric.update(TinyCNN())
    with pytest.raises(TypeError, match="FragilityResult or"):
        metric.update(torch.rand(2, 1, 8, 8))
