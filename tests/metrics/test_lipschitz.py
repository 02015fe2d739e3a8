"""Local Lipschitz estimate: closed forms on linear models, searches, options, bad input."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import input_x_gradient, saliency
from robust_train.metrics.functional import (
    lipschitz_ratios,
    local_lipschitz_estimate,
    sample_perturbations,
)
from tests.support.helpers import LinearModel, SmoothMLP, TinyCNN


def _data(batch: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 1, 8, 8, generator=g), torch.arange(batch) % 10


@pytest.mark.parametrize("search", ["random", "gradient"])
def test_linear_saliency_is_constant_so_estimate_is_zero(search):
    x, t = _data()
    est = local_lipschitz_estimate(
        LinearModel().eval(),
        x,
        t,
        explainer=saliency,
        search=search,
        n_samples=8,
        n_steps=4,
        seed=0,
    )
    assert torch.equal(est, torch.zeros(6))


@pytest.mark.parametrize(
    ("norm", "sampling", "clamp"),
    [("linf", "uniform", True), ("l2", "uniform", False), ("linf", "gaussian", False)],
)
def test_linear_input_x_gradient_matches_closed_form(norm, sampling, clamp):
    """E(x) = x * w_t on a linear model, so E(x') - E(x) = (x' - x) * w_t elementwise and the ratio
    of one perturbation d = x' - x is ||d * w_t||_2 / ||d||_2
    = sqrt(sum_i w_i^2 d_i^2 / sum_i d_i^2):
    a weighted RMS of |w_t| that never exceeds max_i |w_t,i|."""
    model = LinearModel().eval()
    x, t = _data()
    kw = {"radius": 0.1, "norm": norm, "sampling": sampling, "clamp": clamp}
    est = local_lipschitz_estimate(
        model, x, t, explainer=input_x_gradient, n_samples=12, seed=4, **kw
    )
    d = (sample_perturbations(x, 12, seed=4, **kw) - x).double().flatten(2)  # (N, B, D)
    w = model.linear.weight.detach().double()[t]  # (B, D)
    closed = ((d * w).norm(dim=2) / d.norm(dim=2)).amax(0)
    torch.testing.assert_close(est.double(), closed, rtol=1e-5, atol=1e-7)
    assert bool((est <= w.abs().amax(1).float() * (1 + 1e-5)).all())


def test_gradient_search_reaches_the_supremum_max_abs_weight_in_the_l2_ball():
    """The sup over the ball of sqrt(sum w_i^2 d_i^2 / sum d_i^2) is max_i |w_i| (d along the
    largest weight). Projected ascent finds it; random points only reach a weighted RMS of |w|."""
    model = LinearModel().eval()
    x, t = _data()
    bound = model.linear.weight.detach()[t].abs().amax(1)
    kw = {"explainer": input_x_gradient, "norm": "l2", "clamp": False, "n_samples": 32, "seed": 0}
    grad = local_lipschitz_estimate(model, x, t, search="gradient", **kw)
    rand = local_lipschitz_estimate(model, x, t, search="random", **kw)
    assert bool((grad >= 0.95 * bound).all()) and bool((grad <= bound * (1 + 1e-5)).all())
    assert bool((rand < 0.85 * bound).all())


def test_gradient_search_beats_random_search_at_equal_calls_on_a_smooth_model():
    model = SmoothMLP().eval()
    wins, ratios = 0, []
    for seed in range(3):
        x, t = _data(8, seed)
        kw = {"explainer": saliency, "n_samples": 16, "n_steps": 8, "seed": seed}
        grad = local_lipschitz_estimate(model, x, t, search="gradient", **kw)
        rand = local_lipschitz_estimate(model, x, t, search="random", **kw)
        wins += int((grad >= rand).sum())
        ratios.append(float(grad.mean() / rand.mean()))
    assert wins >= 22  # of 24 images
    assert min(ratios) > 1.3


def test_explainer_calls_are_counted_equally_for_both_searches():
    model = SmoothMLP().eval()
    x, t = _data(3)
    rows = {"random": 0, "gradient": 0}

    for search in rows:

        def counting(m, inputs, target, *, create_graph=False, _s=search):
            rows[_s] += inputs.shape[0]
            return saliency(m, inputs, target, create_graph=create_graph)

        local_lipschitz_estimate(
            model,
            x,
            t,
            explainer=counting,
            search=search,
            n_samples=10,
            n_steps=4,
            seed=0,
            internal_batch_size=4,
        )
    assert rows == {"random": 3 * 11, "gradient": 3 * 11}  # 10 perturbed + 1 clean per image


def test_random_search_is_the_max_over_sample_perturbations_and_chunk_invariant():
    model = SmoothMLP().eval()
    x, t = _data(5)
    for kw in (
        {"norm": "linf"},
        {"norm": "l2", "sampling": "uniform"},
        {"sampling": "gaussian", "clamp": False},
    ):
        est = local_lipschitz_estimate(model, x, t, explainer=saliency, n_samples=7, seed=2, **kw)
        chunked = local_lipschitz_estimate(
            model, x, t, explainer=saliency, n_samples=7, seed=2, internal_batch_size=3, **kw
        )
        ratios = lipschitz_ratios(
            model, x, t, sample_perturbations(x, 7, seed=2, **kw), explainer=saliency
        )
        torch.testing.assert_close(est, ratios.amax(0))
        torch.testing.assert_close(chunked, est)


def test_samples_stay_in_the_ball_and_in_range():
    x, _ = _data(4)
    linf = sample_perturbations(x, 20, radius=0.05, seed=0)
    assert bool(((linf - x).abs() <= 0.05 + 1e-7).all()) and bool(((linf >= 0) & (linf <= 1)).all())
    l2 = sample_perturbations(x, 20, radius=0.3, norm="l2", clamp=False, seed=0)
    norms = (l2 - x).flatten(2).norm(dim=2)
    assert (
        bool((norms <= 0.3 + 1e-6).all()) and float(norms.mean()) > 0.25
    )  # uniform in a 64-d ball
    gauss = sample_perturbations(x, 50, radius=0.1, sampling="gaussian", clamp=False, seed=0)
    assert abs(float((gauss - x).std()) - 0.1) < 0.005


@pytest.mark.parametrize(
    ("options", "vector", "order", "divide"),
    [
        ({"map": "importance"}, lambda e: e.abs().sum(1).flatten(1), 2, True),
        (
            {"normalize_maps": "max"},
            lambda e: e.flatten(1) / e.flatten(1).abs().amax(1, keepdim=True),
            2,
            True,
        ),
        (
            {"normalize_maps": "sum", "map_norm": "l1"},
            lambda e: e.flatten(1) / e.flatten(1).abs().sum(1, keepdim=True),
            1,
            True,
        ),
        (
            {"map_norm": "linf", "divide_by_distance": False},
            lambda e: e.flatten(1),
            float("inf"),
            False,
        ),
    ],
)
def test_comparison_options_match_a_direct_computation(options, vector, order, divide):
    model = TinyCNN(in_channels=3).eval()
    g = torch.Generator().manual_seed(1)
    x, t = torch.rand(3, 3, 8, 8, generator=g), torch.tensor([1, 4, 6])
    perturbed = sample_perturbations(x, 4, seed=1)
    got = lipschitz_ratios(model, x, t, perturbed, explainer=saliency, **options)
    v0 = vector(saliency(model, x, t))
    for n in range(4):
        diff = torch.linalg.vector_norm(
            vector(saliency(model, perturbed[n], t)) - v0, ord=order, dim=1
        )
        expected = diff / (perturbed[n] - x).flatten(1).norm(dim=1) if divide else diff
        torch.testing.assert_close(got[n], expected, rtol=1e-5, atol=1e-7)


def test_explainer_by_name_equals_the_function():
    model = SmoothMLP().eval()
    x, t = _data(3)
    a = local_lipschitz_estimate(model, x, t, explainer="input_x_gradient", n_samples=4, seed=0)
    b = local_lipschitz_estimate(model, x, t, explainer=input_x_gradient, n_samples=4, seed=0)
    torch.testing.assert_close(a, b)


def test_model_mode_and_parameter_gradients_untouched():
    model = TinyCNN(dropout=0.0, batchnorm=True).train()
    x, t = _data(4)
    local_lipschitz_estimate(
        model, x, t, explainer=saliency, search="gradient", n_samples=4, n_steps=2, seed=0
    )
    assert model.training
    assert all(p.grad is None for p in model.parameters())


def test_inference_mode_is_refused_with_a_clear_error():
    x, t = _data(2)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inference_mode"):
        local_lipschitz_estimate(SmoothMLP().eval(), x, t, explainer=saliency, n_samples=2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"radius": 0.0}, ValueError, "radius"),
        ({"radius": -0.1}, ValueError, "radius"),
        ({"n_samples": 0}, ValueError, "n_samples"),
        ({"n_steps": 0}, ValueError, "n_steps"),
        ({"step_size": -1.0}, ValueError, "step_size"),
        ({"search": "bayes"}, ValueError, "search"),
        ({"norm": "l1"}, ValueError, "norm"),
        ({"sampling": "laplace"}, ValueError, "sampling"),
        ({"normalize_maps": "l2"}, ValueError, "normalize_maps"),
        ({"map": "mask"}, ValueError, "map"),
        ({"map_norm": "l3"}, ValueError, "map_norm"),
        ({"divide_by_distance": "yes"}, TypeError, "divide_by_distance"),
        ({"internal_batch_size": 0}, ValueError, "internal_batch_size"),
        ({"explainer": 5}, TypeError, "explainer"),
        ({"target": torch.tensor([0])}, ValueError, "target"),
        ({"inputs": torch.rand(0, 1, 8, 8)}, ValueError, "empty"),
        ({"inputs": torch.full((2, 1, 8, 8), float("nan"))}, ValueError, "non-finite"),
        ({"inputs": torch.rand(2, 64)}, ValueError, "shape"),
        ({"seed": 0, "generator": torch.Generator()}, ValueError, "seed"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = {
        "inputs": torch.rand(2, 1, 8, 8),
        "target": torch.tensor([0, 1]),
        "explainer": saliency,
        **kwargs,
    }
    with pytest.raises(error, match=match):
        local_lipschitz_estimate(SmoothMLP().eval(), **args)


def test_bad_perturbed_shape():
    x, t = _data(2)
    with pytest.raises(ValueError, match="perturbed"):
        lipschitz_ratios(SmoothMLP().eval(), x, t, x, explainer=saliency)
