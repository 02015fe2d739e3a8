"""Fragility attacks aimed at the LRP map: every objective runs, and the top-k attack on a
trained model moves the map more than random signs of the same budget."""

from __future__ import annotations

import pytest
import torch

from robust_train.attacks import OBJECTIVES, fragility_attack
from robust_train.explain import explainer_spec
from tests.support.helpers import TinyCNN


@pytest.mark.parametrize("objective", ["topk", "mass_center", "targeted", "random_sign"])
def test_every_objective_runs_on_lrp(objective):
    assert objective in OBJECTIVES
    model = TinyCNN(batchnorm=True).eval()
    x = torch.rand(4, 1, 8, 8)
    region = torch.zeros(1, 8, 8, dtype=torch.bool)
    region[:, :3, :3] = True
    res = fragility_attack(
        model,
        x,
        model(x).argmax(1),
        explainer="lrp",
        objective=objective,
        epsilon=0.1,
        n_steps=3,
        k=8,
        target_region=region if objective == "targeted" else None,
        seed=0,
    )
    assert res.objective == objective and res.topk_intersection.shape == (4,)
    assert bool((res.adversarial - x).abs().max() <= 0.1 + 1e-6)
    assert bool(res.measured.all())


def test_topk_attack_beats_random_signs_on_a_trained_model(trained_digits):
    """TinyCNN trained on digits (the session fixture): the map's gradient, on the model itself
    (lrp declares `piecewise_constant=False`), lowers the top-8 intersection more than random
    signs of the same budget and steps."""
    assert explainer_spec("lrp").piecewise_constant is False
    model, x, y = trained_digits
    keep = model(x).argmax(1) == y
    x, y = x[keep][:24], y[keep][:24]
    common = {"explainer": "lrp", "epsilon": 0.1, "step_size": 0.02, "n_steps": 10, "k": 8}
    attack = fragility_attack(model, x, y, objective="topk", seed=0, **common)
    noise = fragility_attack(model, x, y, objective="random_sign", seed=0, **common)
    assert attack.measured.all() and noise.measured.all()
    gap = float(noise.topk_intersection.mean() - attack.topk_intersection.mean())
    assert gap > 0.1, (attack.topk_intersection.mean(), noise.topk_intersection.mean())
