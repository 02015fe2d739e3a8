"""Fragility attacks aimed at Grad-CAM and DeepLIFT maps: every objective runs, the direction is
taken on the model itself (their maps move with x on a ReLU net), and on a natural model the
top-k attack beats random signs of the same budget."""

from __future__ import annotations

import warnings

import pytest
import torch

from robust_train.attacks import OBJECTIVES, fragility_attack
from robust_train.explain import deeplift, explainer_spec, get_explainer, grad_cam, importance_map
from tests.support.helpers import TinyCNN

NEW = ("grad_cam", "deeplift")


@pytest.mark.parametrize("explainer", NEW)
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_runs_on_the_new_maps(explainer, objective):
    model = TinyCNN().eval()
    x = torch.rand(4, 1, 8, 8)
    region = torch.zeros(1, 8, 8, dtype=torch.bool)
    region[:, :, :4] = True
    extra = {"target_region": region} if objective == "targeted" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a sample whose Grad-CAM map is all zero is unmeasured
        result = fragility_attack(
            model, x, model(x).argmax(1), explainer=explainer, objective=objective,
            epsilon=0.1, step_size=0.02, n_steps=3, k=8, seed=0, **extra,
        )  # fmt: skip
    assert result.objective == objective and result.explainer == explainer
    assert float((result.adversarial - x).abs().max()) <= 0.1 + 1e-6
    assert bool(result.label_kept.all())
    measured = result.topk_intersection[result.measured]
    assert bool(result.measured.any()) and bool(((measured >= 0) & (measured <= 1)).all())
    needs_gradient = OBJECTIVES[objective].needs_gradient
    # piecewise_constant=False: the model itself first, its surrogates beside (direction="all")
    assert result.directions[:1] == (("model",) if needs_gradient else ())


@pytest.mark.parametrize("explainer", NEW)
def test_the_map_of_a_relu_net_moves_with_the_input(explainer):
    """Why `piecewise_constant=False`: d(map)/dx of a ReLU net is not zero (unlike saliency)."""
    assert not explainer_spec(explainer).piecewise_constant
    model = TinyCNN().eval()
    x = torch.rand(3, 1, 8, 8, requires_grad=True)
    fn = {"grad_cam": grad_cam, "deeplift": deeplift}[explainer]
    value = importance_map(fn(model, x, torch.tensor([0, 1, 2]), create_graph=True)).pow(2).sum()
    (grad,) = torch.autograd.grad(value, x)
    assert float(grad.abs().sum()) > 0


@pytest.mark.parametrize("explainer", NEW)
def test_top_k_attack_beats_random_signs_on_a_natural_model(trained_digits, explainer):
    model, x, y = trained_digits
    keep = (model(x).argmax(1) == y).nonzero().squeeze(1)[:64]
    x, y = x[keep], y[keep]
    settings = {"epsilon": 0.1, "step_size": 0.01, "n_steps": 20, "k": 8, "seed": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attacked = fragility_attack(model, x, y, explainer=explainer, **settings)
        noise = fragility_attack(
            model, x, y, explainer=explainer, objective="random_sign", **settings
        )
    both = attacked.measured & noise.measured
    assert int(both.sum()) >= 24
    attack_mean = float(attacked.topk_intersection[both].mean())
    noise_mean = float(noise.topk_intersection[both].mean())
    # measured (64 images, eps 0.1, k 8): Grad-CAM 0.50 vs 0.68 (32 measured: half of TinyCNN's
    # maps at the ReLU after its last Conv2d are blank), DeepLIFT 0.78 vs 0.83; noise at the
    # budget (the worst of 10 draws) is a strong baseline on 8x8 digits
    assert attack_mean < noise_mean - 0.03, (attack_mean, noise_mean)


def test_grad_cam_direction_crosses_the_maps_relu_on_the_shipped_natural_model():
    """At the last Conv2d (before its activation) most natural MNIST-5k Grad-CAM maps have fewer
    than k = 100 positive pixels: their whole support lies in the clean top-k set and the exact
    ReLU gives the ascent no way to light up a pixel outside it. The direction through the
    ReLU's softplus surrogate (`smooth_map_clamps`, the "model" direction at `surrogate_beta`)
    moves those maps; `surrogate_beta=None` is the blind attack. Both measure the exact map."""
    from robust_train.data import MNIST5kDataModule
    from robust_train.models import load_classifier

    model = load_classifier("checkpoints/mnist5k_baseline.ckpt")
    dm = MNIST5kDataModule(seed=0)
    dm.setup()
    x, y = dm.test_set.tensors
    x, y = x[:64], y[:64]
    keep = model(x).argmax(1) == y
    cam = grad_cam(model, x[keep], y[keep], layer="features.3")
    positive = (cam.flatten(1) > 0).sum(1)
    sparse = (positive > 0) & (positive < 100)
    assert int(sparse.sum()) >= 16  # the case this is about
    x, y = x[keep][sparse][:24], y[keep][sparse][:24]
    settings = {"epsilon": 0.3, "step_size": 0.01, "n_steps": 20, "k": 100, "seed": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explainer = get_explainer("grad_cam", layer="features.3")
        smooth = fragility_attack(model, x, y, explainer=explainer, direction="model", **settings)
        blind = fragility_attack(model, x, y, explainer=explainer, surrogate_beta=None, **settings)
    assert int(smooth.measured.sum()) >= 20
    both = smooth.measured & blind.measured
    smooth_mean = float(smooth.topk_intersection[both].mean())
    blind_mean = float(blind.topk_intersection[both].mean())
    assert smooth_mean < blind_mean - 0.1, (smooth_mean, blind_mean, int(both.sum()))
    assert torch.equal(smooth.clean_map, blind.clean_map)  # the measured map is the exact one
