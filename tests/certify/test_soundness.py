"""Soundness on a small trained model: inside the certified radius, neither the project's L2
fragility attack (on the differentiable stand-in of the same smoothed explainer) nor random points
of the sphere ever bring the measured overlap below the certified one; and the stand-in and the
attack behave (differentiable, fixed noise, budget and label kept)."""

from __future__ import annotations

import pytest
import torch

from robust_train.certify import (
    SoftSmoothedExplainer,
    attack_certificate,
    certify_explanations,
    random_search,
)
from robust_train.explain import saliency
from robust_train.models.softplus import smooth_relus
from tests.support.helpers import TinyCNN

RADII = (0.05, 0.1, 0.2)


@pytest.fixture(scope="module")
def certified(trained_digits):
    model, x, y = trained_digits
    correct = model(x).argmax(1) == y
    xs, ys = x[correct][:6], y[correct][:6]
    cert = certify_explanations(
        model, xs, ys, sigma=0.15, n_samples=3000, k=8, alpha=0.05, seed=0, radii=RADII
    )
    return model, xs, cert


@pytest.mark.slow
def test_no_attack_inside_the_radius_goes_below_the_certificate(certified) -> None:
    model, xs, cert = certified
    assert cert.certified_overlap[:, 0].mean() > 0.4  # something is certified at all
    for j, radius in enumerate(RADII):
        bound = cert.certified_overlap[:, j]
        found = [
            attack_certificate(
                model, xs, cert, radius=radius, n_steps=10, attack_samples=8, measure_samples=1500
            ),
            random_search(model, xs, cert, radius=radius, n_points=2, measure_samples=1500),
        ]
        for empirical in found:
            assert (empirical.distance <= radius + 1e-5).all()
            # the upper confidence bound of the true overlap at x' (probability >= 1 - alpha)
            assert (empirical.overlap_upper >= bound).all(), (
                radius,
                empirical.overlap_upper,
                bound,
            )
            assert (empirical.overlap >= bound).all(), (radius, empirical.overlap, bound)
        assert found[0].label_kept.all()


def test_attack_moves_the_smoothed_map_more_than_random_points(certified) -> None:
    model, xs, cert = certified
    radius = 2.0  # far outside the certified radius: the attack has room to work
    attacked = attack_certificate(model, xs, cert, radius=radius, n_steps=10, attack_samples=4)
    noise = random_search(model, xs, cert, radius=radius, n_points=2, measure_samples=1000)
    assert attacked.overlap.mean() < noise.overlap.mean() - 0.05, (attacked.overlap, noise.overlap)
    assert attacked.attack is not None and attacked.attack.norm == "l2"
    assert attacked.label_kept.all() and (attacked.distance <= radius + 1e-5).all()


def test_soft_stand_in_is_differentiable_fixed_noise_and_in_unit_range() -> None:
    model = TinyCNN().eval()
    x = torch.rand(3, 1, 8, 8, requires_grad=True)
    t = model(x).argmax(1)
    soft = SoftSmoothedExplainer(saliency, sigma=0.1, n_samples=5, kappa=8)
    with smooth_relus(10.0):
        m = soft(model, x, t, create_graph=True)
        (grad,) = torch.autograd.grad(m[:, 0, :4].sum(), x)
    assert grad.abs().sum() > 0 and m.min() >= 0 and m.max() <= 1
    again = soft(model, x.detach(), t)
    torch.testing.assert_close(again, soft(model, x.detach(), t))  # the same noise every call
    rows = torch.cat([soft(model, x.detach()[i : i + 1], t[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(rows, again, atol=1e-6, rtol=1e-5)  # a function of each image
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        SoftSmoothedExplainer(saliency, sigma=0.1, kappa=8, temperature=0.0)


def test_attack_and_search_check_their_arguments(certified) -> None:
    model, xs, cert = certified
    with pytest.raises(TypeError, match="`certificate` must be an ExplanationCertificate"):
        attack_certificate(model, xs, "cert", radius=0.1)
    with pytest.raises(ValueError, match="`certificate` covers 6 images but `inputs` has 2"):
        random_search(model, xs[:2], cert, radius=0.1)
    with pytest.raises(ValueError, match="`radius` must be > 0, got 0.0"):
        attack_certificate(model, xs, cert, radius=0.0)
    with pytest.raises(ValueError, match=r"`radius` 9.0 exceeds sqrt\(64\) = 8"):
        random_search(model, xs, cert, radius=9.0)
    with pytest.raises(ValueError, match="`measure_samples` must be > 0"):
        random_search(model, xs, cert, radius=0.1, measure_samples=0)
    with pytest.raises(ValueError, match="`attack_samples` must be > 0"):
        attack_certificate(model, xs, cert, radius=0.1, attack_samples=0)
