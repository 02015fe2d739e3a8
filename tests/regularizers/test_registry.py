"""The penalty registry: every name builds its term, checks arguments at construction, and trains
to a finite loss with a parameter gradient; IGR is the smoothness term on IG with a cosine."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import importance_map, integrated_gradients
from robust_train.regularizers import (
    PENALTIES,
    AdversarialTraining,
    ExplanationSmoothness,
    IGNorm,
    IGRPenalty,
    IGSumNorm,
    PenaltyTerm,
    SmoothedGeometry,
    get_penalty,
    register_penalty,
)
from robust_train.regularizers._penalty_parts import map_distance, sample_in_ball
from tests.support.cheap_options import penalty_options
from tests.support.helpers import SmoothMLP, TinyCNN

# The penalties whose defaults are expensive, at their cheap test settings
# (tests/support/cheap_options.py: a new penalty without an entry fails with a message that says
# what to add).
CHEAP = {name: options for name in PENALTIES if (options := penalty_options(name))}


def test_every_documented_name_is_registered():
    expected = {
        "smoothness",
        "lipschitz",
        "gradnorm",
        "curvature",
        "ig_norm",
        "ig_sum_norm",
        "adversarial",
        "ssr",
        "igr",
    }
    assert expected <= set(PENALTIES)
    for name, cls in PENALTIES.items():
        term = get_penalty(name)
        assert isinstance(term, cls) and term.name == name
    assert {"ig_norm", "ig_sum_norm", "adversarial", "ssr", "igr"} <= set(CHEAP)


def test_task_loss_replacement_flags():
    assert AdversarialTraining.replaces_task_loss and IGSumNorm.replaces_task_loss
    assert not IGNorm.replaces_task_loss and not SmoothedGeometry.replaces_task_loss


@pytest.mark.parametrize("name", sorted(CHEAP))
def test_literature_terms_give_finite_values_and_parameter_gradients(name):
    model = TinyCNN()
    x = torch.rand(4, 1, 8, 8)
    y = torch.tensor([0, 3, 5, 9])
    term = get_penalty(name, seed=0, **CHEAP[name])
    xg = x.clone().requires_grad_(True) if term.needs_input_grad else x
    value = term(model, xg, y, model(xg))
    assert value.shape == (4,) and bool(torch.isfinite(value).all())
    value.mean().backward()
    assert float(model.net[0].weight.grad.abs().sum()) > 0


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (IGNorm, {"n_points": 0}, "n_points.*0"),
        (IGNorm, {"epsilon": -0.1}, "epsilon.*-0.1"),
        (IGSumNorm, {"beta": -1.0}, "beta.*-1"),
        (IGSumNorm, {"n_attack_points": 2.5}, "n_attack_points.*2.5"),
        (AdversarialTraining, {"step_size": 0.0}, "step_size.*0"),
        (AdversarialTraining, {"n_steps": -1}, "n_steps.*-1"),
        (SmoothedGeometry, {"n_iterations": 0}, "n_iterations.*0"),
        (IGRPenalty, {"n_ig_steps": 1}, "n_ig_steps.*1"),
        (IGRPenalty, {"radius": 0.0}, "radius.*0"),
        (ExplanationSmoothness, {"n_ascent_steps": -2}, "n_ascent_steps.*-2"),
        (ExplanationSmoothness, {"explainer": "bogus"}, "bogus"),
        (ExplanationSmoothness, {"explainer": "meaningful_perturbation"}, "not differentiable"),
    ],
)
def test_bad_arguments_fail_at_construction(cls, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cls(**kwargs)


def test_register_penalty_refuses_a_taken_name_and_non_terms():
    with pytest.raises(ValueError, match="'ssr'.*already registered"):
        register_penalty("ssr")(type("Other", (PenaltyTerm,), {"double_backprop": False}))
    with pytest.raises(TypeError, match="must declare `double_backprop"):
        register_penalty("silent")(type("Silent", (PenaltyTerm,), {}))
    with pytest.raises(TypeError, match="PenaltyTerm"):
        register_penalty("thing")(dict)  # type: ignore[arg-type]


def test_igr_is_one_minus_cosine_of_ig_maps_at_a_random_point():
    model = SmoothMLP()
    x, y = torch.rand(5, 1, 8, 8), torch.randint(0, 10, (5,))
    term = IGRPenalty(radius=0.3, n_ascent_steps=0, n_ig_steps=6, seed=3)
    value = term(model, x, y)
    delta = sample_in_ball(x, 0.3, 1, "linf", torch.Generator().manual_seed(3))
    xp = (x + delta).clamp(0, 1)
    for i in range(5):
        a = importance_map(integrated_gradients(model, x[i : i + 1], y[i : i + 1], n_steps=6))
        b = importance_map(integrated_gradients(model, xp[i : i + 1], y[i : i + 1], n_steps=6))
        cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
        torch.testing.assert_close(value[i].detach(), 1 - cos, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(map_distance(a, b, "cosine")[0], 1 - cos, rtol=1e-4, atol=1e-6)


def test_igr_ascent_increases_the_distance():
    model = SmoothMLP(seed=2)
    x, y = torch.rand(16, 1, 8, 8), torch.randint(0, 10, (16,))
    random = IGRPenalty(radius=0.2, n_ascent_steps=0, n_ig_steps=4, seed=0)(model, x, y)
    ascent = IGRPenalty(radius=0.2, n_ascent_steps=3, n_ig_steps=4, seed=0)(model, x, y)
    assert float(ascent.detach().mean()) > float(random.detach().mean())
