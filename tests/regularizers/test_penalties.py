"""Penalty functions against closed forms and slow per-sample references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.maps import importance_map
from robust_train.regularizers import (
    Curvature,
    ExplanationSmoothness,
    InputGradientNorm,
    LocalLipschitzPenalty,
    curvature,
    explanation_smoothness,
    get_penalty,
    input_gradient_norm,
)
from robust_train.regularizers._penalty_parts import map_distance, sample_in_ball
from tests.support.helpers import LinearModel, SmoothMLP, TinyCNN


def _batch(b: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 1, 8, 8, generator=g), torch.randint(0, 10, (b,), generator=g)


def test_smoothness_of_linear_saliency_is_zero():
    x, y = _batch()
    value = explanation_smoothness(LinearModel(), x, y, explainer=saliency, radius=0.2, n_samples=3)
    assert torch.allclose(value, torch.zeros_like(value), atol=1e-6)


@pytest.mark.parametrize("distance", ["l1", "cosine", "l2"])
@pytest.mark.parametrize("ball", ["linf", "l2"])
def test_smoothness_matches_reference_on_same_samples(distance, ball):
    model = SmoothMLP()
    x, y = _batch()
    value = explanation_smoothness(
        model,
        x,
        y,
        explainer=saliency,
        radius=0.1,
        n_samples=2,
        ball=ball,
        distance=distance,
        generator=torch.Generator().manual_seed(3),
    )
    delta = sample_in_ball(x, 0.1, 2, ball, torch.Generator().manual_seed(3))
    ref = []
    for i in range(x.shape[0]):
        clean = importance_map(saliency(model, x[i : i + 1], y[i : i + 1]))
        ds = []
        for s in range(2):
            xp = (x[i : i + 1] + delta[s * x.shape[0] + i]).clamp(0, 1)
            ds.append(
                map_distance(clean, importance_map(saliency(model, xp, y[i : i + 1])), distance)
            )
        ref.append(torch.stack(ds).mean())
    assert torch.allclose(value, torch.stack(ref).flatten(), atol=1e-5)


def test_lipschitz_divides_by_perturbation_norm():
    model = SmoothMLP()
    x, y = _batch()
    kwargs = dict(explainer=input_x_gradient, radius=0.05, n_samples=1)
    plain = explanation_smoothness(
        model, x, y, generator=torch.Generator().manual_seed(1), **kwargs
    )
    ratio = explanation_smoothness(
        model, x, y, lipschitz=True, generator=torch.Generator().manual_seed(1), **kwargs
    )
    delta = sample_in_ball(x, 0.05, 1, "linf", torch.Generator().manual_seed(1))
    dist = ((x + delta).clamp(0, 1) - x).flatten(1).norm(dim=1)
    assert torch.allclose(ratio, plain / dist, rtol=1e-5)


def test_sample_in_ball_respects_radius():
    x = torch.rand(50, 3, 4, 4)
    linf = sample_in_ball(x, 0.3, 2, "linf", torch.Generator().manual_seed(0))
    l2 = sample_in_ball(x, 0.3, 2, "l2", torch.Generator().manual_seed(0))
    assert linf.shape == (100, 3, 4, 4) and float(linf.abs().max()) <= 0.3
    assert float(l2.flatten(1).norm(dim=1).max()) <= 0.3 + 1e-6
    assert (
        float(l2.flatten(1).norm(dim=1).min()) > 0.1
    )  # uniform in a 48-d ball sits near its surface


def test_adversarial_search_finds_larger_distance():
    model = SmoothMLP(seed=2)
    x, y = _batch(32)
    random = explanation_smoothness(
        model, x, y, explainer=saliency, radius=0.1, generator=torch.Generator().manual_seed(0)
    )
    ascent = explanation_smoothness(
        model,
        x,
        y,
        explainer=saliency,
        radius=0.1,
        n_ascent_steps=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert float(ascent.detach().mean()) > 1.2 * float(random.detach().mean())


def test_smoothness_gradient_reaches_parameters_through_softplus():
    model = SmoothMLP()
    x, y = _batch()
    explanation_smoothness(model, x, y, explainer=saliency).mean().backward()
    # The output bias does not move the gradient; every weight does.
    assert float(model.net[1].weight.grad.abs().sum()) > 0
    assert float(model.net[3].weight.grad.abs().sum()) > 0


def test_shared_forward_gives_the_same_penalty():
    model = SmoothMLP()
    x, y = _batch()
    xg = x.clone().requires_grad_(True)
    logits = model(xg)
    shared = explanation_smoothness(
        model, xg, y, explainer=saliency, logits=logits, generator=torch.Generator().manual_seed(0)
    )
    fresh = explanation_smoothness(
        model, x, y, explainer=saliency, generator=torch.Generator().manual_seed(0)
    )
    assert torch.allclose(shared, fresh, atol=1e-6)


def _per_sample_ce_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = []
    for i in range(x.shape[0]):
        xi = x[i : i + 1].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(model(xi), y[i : i + 1]), xi)
        out.append(g)
    return torch.cat(out)


def test_gradient_norm_double_backprop_equals_reference():
    model = TinyCNN()
    x, y = _batch()
    value = input_gradient_norm(model, x, y)
    ref = _per_sample_ce_grad(model, x, y).flatten(1).pow(2).sum(1)
    assert torch.allclose(value, ref, rtol=1e-5, atol=1e-9)


def test_gradient_norm_finite_difference_approximates_double_backprop():
    model = SmoothMLP()
    x, y = _batch(16)
    exact = input_gradient_norm(model, x, y)
    approx = input_gradient_norm(model, x, y, method="finite_difference", h=1e-3)
    assert torch.allclose(approx, exact, rtol=0.05)


class Quadratic(nn.Module):
    """logits_k = x^T A_k x: the Hessian of logit k is A_k + A_k^T everywhere."""

    def __init__(self, d: int = 16, k: int = 3) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(k, d, d) / d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.flatten(1)
        return torch.einsum("bi,kij,bj->bk", v, self.a, v)


def test_zero_order_curvature_is_exact_on_a_quadratic():
    model = Quadratic()
    x = torch.rand(5, 1, 4, 4)
    value = curvature(
        model,
        x,
        torch.zeros(5, dtype=torch.long),
        method="zero_order",
        h=0.1,
        generator=torch.Generator().manual_seed(0),
    )
    u = torch.randn((5, 1, 4, 4), generator=torch.Generator().manual_seed(0)).flatten(1)
    u = u / u.norm(dim=1, keepdim=True)
    quad = torch.einsum("bi,kij,bj->bk", u, model.a + model.a.transpose(1, 2), u)  # u^T H_k u
    assert torch.allclose(value, quad.pow(2).sum(1), rtol=1e-3)


def test_zero_order_curvature_of_linear_model_is_zero_and_has_parameter_gradient_otherwise():
    x, y = _batch()
    assert float(curvature(LinearModel(), x, y).detach().abs().max()) < 1e-3
    model = SmoothMLP()
    curvature(model, x, y).mean().backward()
    assert float(model.net[1].weight.grad.abs().sum()) > 0


def test_curvature_needs_the_input_gradient_only_for_gradient_difference():
    assert Curvature().needs_input_grad is False
    assert Curvature(method="gradient_difference").needs_input_grad is True
    term = Curvature()
    term.method = "gradient_difference"  # read per step, so it follows the method
    assert term.needs_input_grad is True


@pytest.mark.parametrize("method", ["zero_order", "gradient_difference"])
def test_curvature_training_step_equals_the_one_with_an_input_gradient(method):
    """The library step with the term as it is, and with a copy forced to the old
    needs_input_grad=True: same loss and parameter gradients; zero_order's clean forward runs on
    inputs that do not require grad (no input gradient built), gradient_difference's on inputs
    that do."""
    import copy
    import warnings

    from robust_train import RobustClassifier

    class Forced(Curvature):
        needs_input_grad = True  # the class attribute before the change

    model, (x, y) = SmoothMLP(), _batch()
    results = []
    for cls in (Curvature, Forced):
        module = RobustClassifier(copy.deepcopy(model), penalties=[cls(method=method, seed=0)])
        module.train()
        seen: list[bool] = []
        module.model.register_forward_pre_hook(lambda _, a, s=seen: s.append(a[0].requires_grad))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*self.log.*")
            loss = module.training_step((x, y), 0)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in module.model.parameters()])
        results.append((loss.detach(), grads, seen[0]))
    (loss, grads, clean_requires_grad), (forced_loss, forced_grads, forced_requires_grad) = results
    assert forced_requires_grad is True
    assert clean_requires_grad is (method == "gradient_difference")
    assert torch.equal(loss, forced_loss)
    assert torch.equal(grads, forced_grads)


def test_gradient_difference_curvature_matches_hessian_vector_product():
    model = SmoothMLP().double()
    x, y = _batch(3)
    x = x.double()
    h = 1e-4
    value = curvature(model, x, y, method="gradient_difference", h=h)
    for i in range(3):
        xi = x[i : i + 1]
        g = _per_sample_ce_grad(model, xi, y[i : i + 1])
        z = g.sign() / g.sign().norm()

        def loss(v, i=i):
            return F.cross_entropy(model(v.view(1, 1, 8, 8)), y[i : i + 1])

        hess = torch.autograd.functional.hessian(loss, xi.flatten())
        hz = hess @ z.flatten()
        assert torch.allclose(value[i], hz.pow(2).sum(), rtol=1e-2)


def test_terms_and_registry():
    assert isinstance(get_penalty("smoothness", radius=0.2), ExplanationSmoothness)
    assert isinstance(get_penalty("lipschitz"), LocalLipschitzPenalty)
    assert isinstance(get_penalty("gradnorm", method="finite_difference"), InputGradientNorm)
    assert get_penalty("curvature", weight=2.0).weight == 2.0
    with pytest.raises(ValueError, match="penalty.*'bogus'"):
        get_penalty("bogus")
    with pytest.raises(ValueError, match="weight.*-1"):
        Curvature(weight=-1.0)
    with pytest.raises(ValueError, match="distance.*'l7'"):
        ExplanationSmoothness(distance="l7")
    with pytest.raises(ValueError, match="radius.*0"):
        explanation_smoothness(SmoothMLP(), *_batch(), explainer=saliency, radius=0.0)
    with pytest.raises(ValueError, match="method.*'fourth_order'"):
        curvature(SmoothMLP(), *_batch(), method="fourth_order")
    with pytest.raises(ValueError, match="n_samples.*0"):
        explanation_smoothness(SmoothMLP(), *_batch(), explainer=saliency, n_samples=0)
