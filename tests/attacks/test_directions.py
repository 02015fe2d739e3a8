"""The strongest direction, per image: a gradient attack runs every candidate direction (the model
with the map's final ReLU smoothed, its softplus surrogate, the exact map) and each image keeps
its worst result, which is the per-image minimum of the single-direction attacks (reference:
the three attacks run one by one). None of the directions is the strongest on every image."""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.evaluation import PROTOCOLS, EvaluationSettings
from tests.support.helpers import TinyCNN
from tests.support.paths import DATA

SOFTPLUS_FINETUNE = DATA / "mnist5k_ixg_softplus.ckpt"
SETTINGS = {"epsilon": 0.3, "step_size": 0.03, "n_steps": 10, "k": 100, "seed": 0}


@pytest.fixture(scope="module")
def shipped():
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import load_classifier

    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.test_set.tensors
    models = {
        "baseline": load_classifier("checkpoints/mnist5k_baseline.ckpt"),
        # a Softplus(2) fine-tune of the baseline (an input x gradient recipe): no ReLU call
        "softplus": load_classifier(SOFTPLUS_FINETUNE),
    }
    return models, x[:40], y[:40]


def _correct(model, x, y, n):
    keep = (model(x).argmax(1) == y).nonzero().squeeze(1)[:n]
    return x[keep], y[keep]


def _attack(model, x, y, explainer, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a blank Grad-CAM map is unmeasured
        return fragility_attack(model, x, y, explainer=explainer, **{**SETTINGS, **kwargs})


@pytest.mark.slow
def test_all_is_the_per_image_worst_of_the_single_directions(shipped) -> None:
    models, x, y = shipped
    model = models["baseline"]
    x, y = _correct(model, x, y, 16)
    every = _attack(model, x, y, "grad_cam")
    assert every.directions == ("model", "surrogate", "exact")
    single = {d: _attack(model, x, y, "grad_cam", direction=d) for d in every.directions}
    stack = torch.stack([single[d].topk_intersection for d in every.directions])
    expected = torch.where(stack.isnan(), torch.inf, stack).amin(0)
    measured = every.measured
    torch.testing.assert_close(every.topk_intersection[measured], expected[measured])
    # the declared direction (the model itself) is not the strongest on every image
    assert bool(
        (every.topk_intersection[measured] < single["model"].topk_intersection[measured]).any()
    )
    for d in every.directions:
        assert bool(single[d].directions == (d,))
    assert torch.equal(every.clean_map, single["model"].clean_map)


def test_candidates_that_cannot_differ_are_not_run(shipped) -> None:
    models, x, y = shipped
    x, y = x[:4], y[:4]
    natural, softplus = models["baseline"], models["softplus"]
    one = {"n_steps": 1}
    # the gradient family: its own gradient is zero almost everywhere on a ReLU net
    assert _attack(natural, x, y, "saliency", **one).directions == ("surrogate",)
    # a Softplus network makes no ReLU call: its surrogate is the model itself
    assert _attack(softplus, x, y, "grad_cam", **one).directions == ("model", "exact")
    # LRP has no final clamp: "exact" is "model"
    assert _attack(natural, x, y, "lrp", **one).directions == ("model", "surrogate")
    assert _attack(natural, x, y, "grad_cam", direction="declared", **one).directions == ("model",)
    assert _attack(natural, x, y, "grad_cam", surrogate_beta=None, **one).directions == ("exact",)


def test_direction_is_checked_and_on_by_default() -> None:
    x, t = torch.rand(2, 1, 8, 8), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="Unknown `direction` 'best'; expected one of \\['all'"):
        fragility_attack(TinyCNN(), x, t, direction="best")
    with pytest.raises(ValueError, match="`direction` 'surrogate' needs `surrogate_beta`"):
        fragility_attack(TinyCNN(), x, t, direction="surrogate", surrogate_beta=None)
    assert EvaluationSettings().direction == "all"
    assert all(p.direction == "all" for p in PROTOCOLS.values())
