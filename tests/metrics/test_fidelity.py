"""MIF/LIF curves against a slow per-pixel reference, limiting cases, and the digits model."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.integrate
import torch

from robust_train.explain import saliency
from robust_train.metrics.functional import (
    FidelityCurves,
    fidelity_curves,
    fidelity_estimate,
    mean_confidence_interval,
)
from robust_train.metrics.functional._fidelity_fill import gaussian_blur
from tests.reference.metrics_fidelity_reference import reference_curves
from tests.support.helpers import SmoothMLP, TinyCNN


def _setup(channels: int = 1, batch: int = 3, size: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    model = TinyCNN(in_channels=channels, seed=seed).eval()
    x = torch.rand(batch, channels, size, size, generator=g)
    return model, x, torch.rand(batch, size, size, generator=g)


def _assert_same(curves: FidelityCurves, ref: tuple, atol: float = 1e-5) -> None:
    fractions, mif, lif = ref
    torch.testing.assert_close(curves.fractions, fractions)
    torch.testing.assert_close(curves.mif, mif, atol=atol, rtol=1e-4)
    torch.testing.assert_close(curves.lif, lif, atol=atol, rtol=1e-4)


@pytest.mark.parametrize(
    ("channels", "n_steps", "include_end", "patch_size", "fill", "score"),
    [
        (1, 8, True, 1, "mean", "normalized_probability"),
        (1, 5, False, 1, "zero", "probability"),
        (3, 7, True, 3, "mean", "logit"),  # ragged edge patches: 8 = 3 + 3 + 2
        (3, 4, True, 2, "zero", "accuracy"),
        (1, 20, True, 1, "mean", "normalized_probability"),
    ],
)
def test_curves_equal_reference(channels, n_steps, include_end, patch_size, fill, score):
    model, x, imp = _setup(channels)
    target = None if score == "normalized_probability" else torch.tensor([3, 1, 7])
    curves = fidelity_curves(
        model,
        x,
        target,
        imp,
        n_steps=n_steps,
        include_end=include_end,
        patch_size=patch_size,
        perturbation=fill,
        score=score,
        internal_batch_size=5,
    )
    ref = reference_curves(
        model,
        x,
        target,
        imp,
        n_steps=n_steps,
        include_end=include_end,
        patch_size=patch_size,
        fill=fill,
        score=score,
    )
    _assert_same(curves, ref)


def test_ties_follow_row_major_order_like_reference():
    model, x, _ = _setup()
    imp = torch.randint(0, 3, (3, 8, 8)).float()  # many ties
    curves = fidelity_curves(model, x, None, imp, n_steps=16)
    _assert_same(curves, reference_curves(model, x, None, imp, n_steps=16))


def test_constant_map_gives_identical_orders_and_zero_estimate():
    model, x, _ = _setup()
    curves = fidelity_curves(model, x, None, torch.ones(3, 8, 8), n_steps=10)
    assert torch.equal(curves.mif, curves.lif)
    assert torch.equal(fidelity_estimate(curves), torch.zeros(3))


def test_blur_fill_equals_reference_with_blurred_values_and_scipy_blur():
    from scipy.ndimage import gaussian_filter

    model, x, imp = _setup(channels=3)
    blurred = gaussian_blur(x, 1.5)
    expected = np.stack(
        [
            [
                gaussian_filter(img[c].double().numpy(), 1.5, mode="nearest", truncate=3.0)
                for c in range(3)
            ]
            for img in x
        ]
    )
    np.testing.assert_allclose(blurred.numpy(), expected, atol=1e-5)
    curves = fidelity_curves(model, x, None, imp, n_steps=6, perturbation="blur", blur_sigma=1.5)
    _assert_same(curves, reference_curves(model, x, None, imp, n_steps=6, fill=blurred))


def test_given_dataset_mean_is_the_fill():
    model, x, imp = _setup(channels=3)
    mean = torch.tensor([0.2, 0.5, 0.7])
    curves = fidelity_curves(model, x, None, imp, n_steps=5, perturbation="mean", mean=mean)
    fill = mean.view(1, 3, 1, 1).expand_as(x)
    _assert_same(curves, reference_curves(model, x, None, imp, n_steps=5, fill=fill))


def test_noise_fill_is_seeded_shared_by_orders_and_chunk_invariant():
    model, x, imp = _setup()
    a = fidelity_curves(model, x, None, imp, n_steps=8, perturbation="noise", seed=3)
    b = fidelity_curves(
        model, x, None, imp, n_steps=8, perturbation="noise", seed=3, internal_batch_size=7
    )
    c = fidelity_curves(model, x, None, imp, n_steps=8, perturbation="noise", seed=4)
    torch.testing.assert_close(a.mif, b.mif)
    torch.testing.assert_close(a.lif, b.lif)
    assert not torch.allclose(a.mif, c.mif)
    torch.testing.assert_close(a.mif[:, -1], a.lif[:, -1])  # same noise image when all is removed


def test_explanation_is_reduced_with_importance_map():
    model, x, _ = _setup(channels=3)
    explanation = torch.randn(3, 3, 8, 8)
    a = fidelity_curves(model, x, None, explanation, n_steps=6)
    b = fidelity_curves(model, x, None, explanation.abs().sum(1), n_steps=6)
    torch.testing.assert_close(a.mif, b.mif)
    torch.testing.assert_close(a.lif, b.lif)


def test_signed_map_orders_by_value_not_magnitude():
    model, x, _ = _setup()
    imp = torch.randn(3, 8, 8)
    curves = fidelity_curves(model, x, None, imp, n_steps=8)
    _assert_same(curves, reference_curves(model, x, None, imp, n_steps=8))
    assert not torch.allclose(curves.mif, fidelity_curves(model, x, None, imp.abs(), n_steps=8).mif)


def test_estimate_is_the_trapezoid_rule():
    g = torch.Generator().manual_seed(1)
    fractions = torch.linspace(0, 1, 11)
    mif, lif = torch.rand(4, 11, generator=g), torch.rand(4, 11, generator=g)
    got = fidelity_estimate(FidelityCurves(fractions, mif, lif))
    expected = scipy.integrate.trapezoid((lif - mif).numpy(), fractions.numpy(), axis=1)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
    rough = (lif - mif).mean(1)  # a rectangle rule differs: the test can tell them apart
    assert not torch.allclose(got, rough, atol=1e-3)


def test_model_mode_and_gradients_untouched():
    model = TinyCNN(dropout=0.5).train()
    x, imp = torch.rand(2, 1, 8, 8), torch.rand(2, 8, 8)
    fidelity_curves(model.eval(), x, None, imp, n_steps=4)
    model.train()
    fidelity_curves(model, x, torch.tensor([0, 1]), imp, n_steps=4, score="logit")
    assert model.training
    assert all(p.grad is None for p in model.parameters())


def test_runs_under_inference_mode():
    model, x, imp = _setup()
    with torch.inference_mode():
        curves = fidelity_curves(model, x, None, imp, n_steps=4)
    assert curves.mif.shape == (3, 5)


def test_saliency_beats_random_map_on_trained_digits(trained_digits):
    model, x, _ = trained_digits
    pred = model(x).argmax(1)
    grad_map = saliency(model, x, pred).abs().sum(1)
    random_map = torch.rand(x.shape[0], 8, 8, generator=torch.Generator().manual_seed(0))
    kw = {"n_steps": 16, "internal_batch_size": 4096}
    good = mean_confidence_interval(
        fidelity_estimate(fidelity_curves(model, x, None, grad_map, **kw))
    )
    rand = mean_confidence_interval(
        fidelity_estimate(fidelity_curves(model, x, None, random_map, **kw))
    )
    assert rand.low < 0 < rand.high  # a random map has no fidelity
    assert abs(float(rand.mean)) < 0.05
    assert float(good.low) > float(rand.high) + 0.1  # clearly above the random baseline


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"importance": torch.rand(2, 7, 8)}, ValueError, "importance"),
        ({"importance": torch.rand(3, 8, 8)}, ValueError, "importance"),
        ({"importance": torch.rand(2, 2, 7, 8)}, ValueError, "importance"),
        ({"importance": None}, ValueError, "importance"),
        ({"importance": torch.full((2, 8, 8), float("nan"))}, ValueError, "non-finite"),
        ({"n_steps": 0}, ValueError, "n_steps"),
        ({"n_steps": -3}, ValueError, "n_steps"),
        ({"patch_size": 0}, ValueError, "patch_size"),
        ({"perturbation": "gray"}, ValueError, "perturbation"),
        ({"score": "loss"}, ValueError, "score"),
        ({"mean": torch.ones(3)}, ValueError, "mean"),
        ({"perturbation": "zero", "mean": 0.5}, ValueError, "mean"),
        ({"internal_batch_size": 0}, ValueError, "internal_batch_size"),
        ({"target": torch.tensor([0, 10])}, ValueError, "target"),
        ({"target": torch.tensor([0])}, ValueError, "target"),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, "seed"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    model = SmoothMLP().eval()
    args = {"target": None, "importance": torch.rand(2, 8, 8), **kwargs}
    with pytest.raises(error, match=match):
        fidelity_curves(model, torch.rand(2, 1, 8, 8), **args)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (torch.rand(0, 1, 8, 8), "empty"),
        (torch.full((2, 1, 8, 8), float("nan")), "non-finite"),
        (torch.rand(2, 8, 8), "shape"),
    ],
)
def test_bad_inputs(inputs, match):
    with pytest.raises(ValueError, match=match):
        fidelity_curves(SmoothMLP().eval(), inputs, None, torch.rand(2, 8, 8))


def test_bad_curves_for_estimate():
    with pytest.raises(ValueError, match="curves"):
        fidelity_estimate(
            FidelityCurves(torch.linspace(0, 1, 5), torch.rand(2, 5), torch.rand(2, 4))
        )
    with pytest.raises(TypeError, match="curves"):
        fidelity_estimate(torch.rand(2, 5))
