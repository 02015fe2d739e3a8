"""Our explainers against Captum on the same models, inputs, targets (and the same noise)."""

from __future__ import annotations

import pytest
import torch
from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel, Saliency

from robust_train.explain import (
    input_x_gradient,
    integrated_gradients,
    saliency,
    smoothgrad,
)
from tests.support.helpers import SmoothMLP, TinyCNN

pytestmark = pytest.mark.filterwarnings("ignore:Input Tensor 0 did not already require gradients")


@pytest.fixture(params=["tinycnn", "smoothmlp", "trained"])
def case(request, trained_digits):
    if request.param == "trained":
        model, x_test, y_test = trained_digits
        return model, x_test[:6], y_test[:6]
    model = TinyCNN(batchnorm=True, dropout=0.5) if request.param == "tinycnn" else SmoothMLP()
    model.eval()
    x = torch.rand(5, 1, 8, 8)
    return model, x, torch.tensor([0, 3, 9, 1, 3])


def test_saliency_equals_captum(case):
    model, x, t = case
    ours = saliency(model, x, t)
    theirs = Saliency(model).attribute(x, target=t, abs=False)
    torch.testing.assert_close(ours, theirs)
    assert ours.abs().sum() > 0


def test_input_x_gradient_equals_captum(case):
    model, x, t = case
    torch.testing.assert_close(
        input_x_gradient(model, x, t).detach(), InputXGradient(model).attribute(x, target=t)
    )


@pytest.mark.parametrize(
    "method", ["riemann_left", "riemann_right", "riemann_middle", "gausslegendre"]
)
def test_integrated_gradients_equals_captum(case, method):
    model, x, t = case
    baseline = torch.full_like(x[:1], 0.3).expand_as(x).contiguous()
    ours = integrated_gradients(
        model, x, t, baseline=baseline, n_steps=12, method=method, internal_batch_size=17
    )
    theirs = IntegratedGradients(model).attribute(
        x, baselines=baseline, target=t, n_steps=12, method=method
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_trapezoid_equals_captum_up_to_its_weight_sum(case):
    """Captum's riemann_trapezoid weights are 1/n (ends halved): they sum to (n-1)/n, not 1.

    Ours is the composite trapezoid rule (weights sum to 1, exact for affine integrands), so
    Captum's attributions are ours times (n - 1) / n, and otherwise identical.
    """
    model, x, t = case
    n = 10
    ours = integrated_gradients(model, x, t, n_steps=n, method="riemann_trapezoid")
    theirs = IntegratedGradients(model).attribute(
        x, target=t, n_steps=n, method="riemann_trapezoid"
    )
    torch.testing.assert_close(ours * (n - 1) / n, theirs, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(ours, theirs, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize(("nt_type", "squared"), [("smoothgrad", False), ("smoothgrad_sq", True)])
def test_smoothgrad_equals_captum_noise_tunnel_with_same_noise(case, nt_type, squared):
    """Same noise: Captum draws torch.normal(0, stdev) from the global generator, image-major
    (x.repeat_interleave(n)); we draw randn * sigma in that layout from a generator seeded alike.
    torch.normal(0, std) and randn * std give identical numbers for the same seed on CPU."""
    model, x, t = case
    torch.manual_seed(123)
    theirs = NoiseTunnel(Saliency(model)).attribute(
        x, nt_type=nt_type, nt_samples=7, stdevs=0.15, target=t, abs=False
    )
    ours = smoothgrad(
        model,
        x,
        t,
        n_samples=7,
        noise_level=0.15,
        noise_scale="absolute",
        seed=123,
        squared=squared,
        internal_batch_size=5,
    )
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(
        smoothgrad(
            model,
            x,
            t,
            n_samples=7,
            noise_level=0.15,
            noise_scale="absolute",
            squared=squared,
            generator=torch.Generator().manual_seed(123),
        ),
        ours,
    )


def test_smoothgrad_relative_noise_equals_captum_per_image(trained_digits):
    """Relative noise: sigma_i = level * (max - min) of image i; Captum gets that as `stdevs`."""
    model, x_test, y_test = trained_digits
    x, t = x_test[:1] * 0.5, y_test[:1]
    sigma = 0.2 * float(x.max() - x.min())
    torch.manual_seed(5)
    theirs = NoiseTunnel(InputXGradient(model)).attribute(
        x, nt_type="smoothgrad", nt_samples=6, stdevs=sigma, target=t
    )
    ours = smoothgrad(model, x, t, explainer=input_x_gradient, n_samples=6, noise_level=0.2, seed=5)
    torch.testing.assert_close(ours, theirs)
