"""integrated_gradients: reference implementation, limiting cases, completeness, chunking,
errors."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import (
    INTEGRATION_METHODS,
    input_x_gradient,
    integrated_gradients,
    integration_rule,
)
from tests.reference.explain_reference import reference_integrated_gradients, reference_trapezoid
from tests.support.helpers import LinearModel, SmoothMLP, TinyCNN


def _curved_mlp():
    """SmoothMLP with weights scaled up: logit gaps of order 1 and a strongly curved path."""
    model = SmoothMLP()
    with torch.no_grad():
        model.net[1].weight.mul_(4)
        model.net[3].weight.mul_(4)
    return model


def _gap(model, x, baseline, t):
    return (model(x) - model(baseline)).gather(1, t[:, None]).squeeze(1)


def test_equals_slow_reference_on_cnn():
    model = TinyCNN(batchnorm=True).eval()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([1, 4, 7])
    baseline = torch.rand(3, 1, 8, 8) * 0.2
    alphas, weights = reference_trapezoid(9)
    expected = reference_integrated_gradients(model, x, t, baseline, alphas, weights)
    ours = integrated_gradients(model, x, t, baseline=baseline, n_steps=9, internal_batch_size=4)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("method", INTEGRATION_METHODS)
def test_linear_model_zero_baseline_equals_input_x_gradient(method):
    model = LinearModel()
    x, t = torch.rand(4, 1, 8, 8), torch.tensor([0, 5, 9, 2])
    ig = integrated_gradients(model, x, t, n_steps=5, method=method)
    torch.testing.assert_close(ig, input_x_gradient(model, x, t).detach())


@pytest.mark.parametrize(
    ("method", "n_steps", "tol"),
    [("riemann_trapezoid", 64, 2e-4), ("gausslegendre", 16, 1e-5), ("riemann_middle", 64, 2e-4)],
)
def test_completeness_on_smooth_mlp(method, n_steps, tol):
    model = _curved_mlp()
    x, t = torch.rand(5, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4])
    baseline = torch.rand(1, 8, 8) * 0.5  # one (C, H, W) baseline for the batch
    ig = integrated_gradients(model, x, t, baseline=baseline, n_steps=n_steps, method=method)
    gap = _gap(model, x, baseline.expand_as(x), t)
    assert gap.abs().max() > 0.5  # the check below is not trivially satisfied
    torch.testing.assert_close(ig.sum(dim=(1, 2, 3)), gap, rtol=0, atol=tol)


def test_coarse_rule_is_measurably_incomplete():
    """The completeness check can fail: 2 trapezoid points on a curved path miss the gap."""
    model = _curved_mlp()
    x, t = torch.rand(5, 1, 8, 8), torch.tensor([0, 1, 2, 3, 4])
    ig = integrated_gradients(model, x, t, n_steps=2)
    gap = _gap(model, x, torch.zeros_like(x), t)
    assert (ig.sum(dim=(1, 2, 3)) - gap).abs().max() > 0.05


@pytest.mark.parametrize("chunk", [1, 5, 12, 1000])
def test_chunking_does_not_change_the_result(chunk):
    model = TinyCNN(batchnorm=True, dropout=0.5).eval()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([2, 2, 8])
    full = integrated_gradients(model, x, t, n_steps=8)
    torch.testing.assert_close(
        integrated_gradients(model, x, t, n_steps=8, internal_batch_size=chunk), full
    )


def test_chunks_bound_the_forward_batch():
    seen: list[int] = []
    model = LinearModel()
    model.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    integrated_gradients(
        model, torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2]), n_steps=10, internal_batch_size=7
    )
    assert max(seen) == 7 and sum(seen) == 30


def test_baseline_forms_agree():
    model = SmoothMLP()
    x, t = torch.rand(2, 1, 8, 8), torch.tensor([3, 6])
    results = [
        integrated_gradients(model, x, t, baseline=b, n_steps=6)
        for b in (
            0.25,
            torch.full((1, 8, 8), 0.25),
            torch.full((1, 1, 8, 8), 0.25),
            torch.full((2, 1, 8, 8), 0.25),
        )
    ]
    for other in results[1:]:
        torch.testing.assert_close(other, results[0])
    assert not torch.allclose(results[0], integrated_gradients(model, x, t, n_steps=6))


@pytest.mark.parametrize("method", INTEGRATION_METHODS)
def test_integration_rules_integrate_polynomials(method):
    alphas, weights = integration_rule(method, 4)
    assert weights.sum() == pytest.approx(1.0)
    assert ((alphas >= 0) & (alphas <= 1)).all()
    # trapezoid, midpoint and Gauss-Legendre are exact for affine functions (integral 2.5);
    # left / right Riemann sums are off by -/+ slope / (2 n) = 3 / 8
    expected = {"riemann_left": 2.5 - 3 / 8, "riemann_right": 2.5 + 3 / 8}.get(method, 2.5)
    assert (weights * (3 * alphas + 1)).sum() == pytest.approx(expected)
    if method == "gausslegendre":
        assert (weights * alphas**7).sum() == pytest.approx(1 / 8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_steps": 0}, "n_steps"),
        ({"n_steps": -3}, "n_steps"),
        ({"n_steps": 2.5}, "n_steps"),
        ({"n_steps": 1}, "n_steps"),
        ({"method": "simpson"}, "method"),
        ({"internal_batch_size": 0}, "internal_batch_size"),
        ({"baseline": torch.zeros(2, 8, 8)}, "baseline"),
        ({"baseline": torch.zeros(1, 8, 8).long()}, "baseline"),
        ({"baseline": torch.full((1, 8, 8), float("nan"))}, "baseline"),
        ({"baseline": float("inf")}, "baseline"),
        ({"baseline": "zeros"}, "baseline"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        integrated_gradients(LinearModel(), torch.rand(2, 1, 8, 8), torch.tensor([0, 1]), **kwargs)


def test_inference_mode_is_refused_with_a_clear_message():
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inference_mode"):
        integrated_gradients(LinearModel(), torch.rand(1, 1, 8, 8), torch.tensor([0]))
