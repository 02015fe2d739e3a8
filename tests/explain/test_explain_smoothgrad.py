"""smoothgrad: reference with the same noise, limiting cases, fixed noise, chunking, errors."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import (
    get_explainer,
    input_x_gradient,
    integrated_gradients,
    saliency,
    smoothgrad,
)
from tests.reference.explain_reference import reference_smoothgrad
from tests.support.helpers import SmoothMLP, TinyCNN


@pytest.fixture
def cnn_case():
    model = TinyCNN(batchnorm=True, dropout=0.5).eval()
    return model, torch.rand(3, 1, 8, 8), torch.tensor([1, 5, 9])


def _same_noise(batch, n, shape, seed):
    """The draws smoothgrad makes for `seed`: one randn call, image-major (B, n, C, H, W)."""
    z = torch.randn((batch * n, *shape), generator=torch.Generator().manual_seed(seed))
    return z.view(batch, n, *shape)


@pytest.mark.parametrize("squared", [False, True])
def test_equals_slow_reference_with_same_noise(cnn_case, squared):
    model, x, t = cnn_case
    x = x * torch.tensor([1.0, 0.5, 0.2]).view(3, 1, 1, 1)  # different ranges -> different sigma
    sigma = 0.15 * (x.amax(dim=(1, 2, 3)) - x.amin(dim=(1, 2, 3)))
    expected = reference_smoothgrad(model, x, t, _same_noise(3, 5, (1, 8, 8), 42), sigma, squared)
    ours = smoothgrad(
        model, x, t, n_samples=5, noise_level=0.15, seed=42, squared=squared, internal_batch_size=4
    )
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("explainer", [saliency, input_x_gradient])
def test_zero_noise_equals_the_plain_explanation(cnn_case, explainer):
    model, x, t = cnn_case
    torch.testing.assert_close(
        smoothgrad(model, x, t, explainer=explainer, noise_level=0.0, n_samples=3),
        explainer(model, x, t).detach(),
    )


def test_noise_changes_the_result_on_a_nonlinear_model(cnn_case):
    model, x, t = cnn_case
    assert not torch.allclose(smoothgrad(model, x, t, n_samples=4, seed=0), saliency(model, x, t))


def test_seed_fixes_the_noise_and_generator_alone_does_not(cnn_case):
    model, x, t = cnn_case
    a = smoothgrad(model, x, t, n_samples=4, seed=7)
    torch.testing.assert_close(smoothgrad(model, x, t, n_samples=4, seed=7), a)
    assert not torch.allclose(smoothgrad(model, x, t, n_samples=4, seed=8), a)
    gen = torch.Generator().manual_seed(7)
    torch.testing.assert_close(smoothgrad(model, x, t, n_samples=4, generator=gen), a)
    assert not torch.allclose(smoothgrad(model, x, t, n_samples=4, generator=gen), a)
    torch.manual_seed(7)  # without seed or generator: torch's global generator
    torch.testing.assert_close(smoothgrad(model, x, t, n_samples=4), a)


@pytest.mark.parametrize("chunk", [1, 4, 9])
def test_chunking_does_not_change_the_result(cnn_case, chunk):
    model, x, t = cnn_case
    full = smoothgrad(model, x, t, n_samples=3, seed=1)
    torch.testing.assert_close(
        smoothgrad(model, x, t, n_samples=3, seed=1, internal_batch_size=chunk), full
    )


def test_wraps_any_explainer_and_passes_create_graph(cnn_case):
    model, x, t = cnn_case
    calls: list[tuple[int, bool]] = []

    def doubled(model, inputs, target, *, create_graph=False):
        calls.append((inputs.shape[0], create_graph))
        return 2 * saliency(model, inputs, target, create_graph=create_graph)

    out = smoothgrad(
        model,
        x,
        t,
        explainer=doubled,
        n_samples=4,
        seed=3,
        internal_batch_size=5,
        create_graph=True,
    )
    torch.testing.assert_close(out.detach(), 2 * smoothgrad(model, x, t, n_samples=4, seed=3))
    assert calls == [(5, True), (5, True), (2, True)]
    ig = get_explainer("integrated_gradients", n_steps=4)
    smooth_ig = smoothgrad(model, x, t, explainer=ig, n_samples=2, noise_level=0.0)
    torch.testing.assert_close(smooth_ig, integrated_gradients(model, x, t, n_steps=4))


def test_fixed_noise_smoothgrad_is_differentiable_in_the_input():
    """With a seed, smoothgrad is a deterministic function of x: its derivative (through the
    noisy copies and through sigma = level * (max - min)) passes a finite-difference check."""
    model = SmoothMLP(in_shape=(1, 3, 3)).double()
    x = torch.rand(2, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1, 7])

    def f(inp):
        return smoothgrad(model, inp, t, n_samples=3, noise_level=0.2, seed=0, create_graph=True)

    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_samples": 0}, ValueError, "n_samples"),
        ({"n_samples": 2.0}, TypeError, "n_samples"),
        ({"noise_level": -0.1}, ValueError, "noise_level"),
        ({"noise_level": float("nan")}, ValueError, "noise_level"),
        ({"noise_scale": "percent"}, ValueError, "noise_scale"),
        ({"explainer": "saliency"}, TypeError, "explainer"),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"generator": 3}, TypeError, "generator"),
        ({"internal_batch_size": -1}, ValueError, "internal_batch_size"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        smoothgrad(SmoothMLP(), torch.rand(2, 1, 8, 8), torch.tensor([0, 1]), **kwargs)
