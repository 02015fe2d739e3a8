"""Every part of the ensemble that the members and restarts combine can give an image its worst
result, so none can be dropped: on a tiny ReLU network each of Grad-CAM's three attack directions
(the model with the map's clamp smoothed, the softplus surrogate, the exact gradient) and each
start (the image, a random point of the ball) is, alone, strictly the strongest on some image.
(The attacked sets, the surrogate betas and the random search: tests/attacks/test_ensemble.py.)"""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import AttackOptions, fragility_attack
from robust_train.attacks.objectives.base import OBJECTIVES, register_objective
from robust_train.attacks.objectives.topk import TopK
from robust_train.core.balls import random_in_ball
from tests.support.helpers import relu_conv_net

OPTIONS = AttackOptions(epsilon=0.1, n_steps=3, k=8, measure_k=8, n_restarts=1)
FROM_RANDOM = "topk_every_start_random"


@pytest.fixture(scope="module")
def images():
    net = relu_conv_net()
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    return net, x, net(x).argmax(1)


@pytest.fixture()
def from_random():
    """The top-k objective with every restart, the first too, at a random point of the ball."""

    @register_objective(FROM_RANDOM)
    class TopKFromRandom(TopK):
        def start_point(self, x0, epsilon, restart, generator, norm="linf"):
            return random_in_ball(x0, epsilon, norm, generator)

    yield FROM_RANDOM
    OBJECTIVES.pop(FROM_RANDOM)


def _attack(net, x, y, explainer, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a blank Grad-CAM map is unmeasured
        return fragility_attack(net, x, y, explainer=explainer, options=OPTIONS, seed=0, **kwargs)


def _strictly_worst(results) -> list[int]:
    """For each result: on how many images its (top-k intersection, Spearman) is strictly below
    every other result's (unmeasured images count as +inf)."""
    top = torch.stack([torch.where(r.measured, r.topk_intersection, torch.inf) for r in results])
    rho = torch.stack([torch.where(r.measured, r.spearman, torch.inf) for r in results])
    counts = []
    for i in range(len(results)):
        strict = torch.ones(top.shape[1], dtype=torch.bool)
        for j in range(len(results)):
            if j != i:
                strict &= (top[i] < top[j]) | ((top[i] == top[j]) & (rho[i] < rho[j]))
        counts.append(int(strict.sum()))
    return counts


def test_each_direction_of_grad_cam_is_the_worst_on_some_image(images):
    net, x, y = images
    every = _attack(net, x, y, "grad_cam")
    assert every.directions == ("model", "surrogate", "exact")
    single = [_attack(net, x, y, "grad_cam", direction=d) for d in every.directions]
    assert all(count > 0 for count in _strictly_worst(single)), _strictly_worst(single)


@pytest.mark.parametrize("explainer", ["saliency", "grad_cam"])
def test_the_image_start_and_a_random_start_are_each_the_worst_on_some_image(
    images, from_random, explainer
):
    net, x, y = images
    image_start = _attack(net, x, y, explainer)
    random_start = _attack(net, x, y, explainer, objective=from_random)
    assert not torch.equal(image_start.adversarial, random_start.adversarial)
    counts = _strictly_worst([image_start, random_start])
    assert all(count > 0 for count in counts), counts
