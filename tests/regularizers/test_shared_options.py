"""What the penalties share: the ascent option set, the explainer resolved once when a term is
built (never per step), the public functions built by `penalty_function` (signature, checks
before any work), and the terms' options that follow a changed `method`."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

import robust_train.regularizers.multi_map as multi_map_module
import robust_train.regularizers.options as options_module
from robust_train.regularizers import (
    Curvature,
    ExplanationSmoothness,
    MultiMapSmoothness,
    TopKMassPenalty,
    explanation_smoothness,
    topk_mass,
)
from robust_train.regularizers.multi_map import MultiMapOptions
from robust_train.regularizers.options import AscentOptions, PenaltyCall
from robust_train.regularizers.smoothness import SmoothnessOptions
from robust_train.regularizers.topk_mass import TopKMassOptions


def _net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1), nn.Softplus(), nn.Flatten(), nn.Linear(2 * 36, 3)
    )


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(2, 1, 6, 6), torch.tensor([0, 2])


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize(
    "build",
    [
        lambda: ExplanationSmoothness(n_ascent_steps=1, seed=0),
        lambda: TopKMassPenalty(k=4, explainer="grad_cam", seed=0),
        lambda: MultiMapSmoothness(
            explainers=["saliency", "integrated_gradients"], n_ascent_steps=1, seed=0
        ),
    ],
    ids=["smoothness", "topk_mass", "multi_map"],
)
def test_a_term_resolves_its_explainers_when_built_and_never_in_a_step(monkeypatch, build):
    lookups = [
        _counting(monkeypatch, options_module, "resolve_explainer"),
        _counting(monkeypatch, options_module, "explainer_spec"),
        _counting(monkeypatch, multi_map_module, "resolve_explainer"),
        _counting(monkeypatch, multi_map_module, "explainer_spec"),
    ]
    term = build()
    assert sum(c[0] for c in lookups) > 0  # resolved (and checked) at construction
    for c in lookups:
        c[0] = 0
    x, y = _batch()
    net = _net()
    for _ in range(2):
        value = term(net, x, y)
        assert value.shape == (2,) and bool(torch.isfinite(value).all())
    assert [c[0] for c in lookups] == [0, 0, 0, 0]


@pytest.mark.parametrize("options_cls", [SmoothnessOptions, TopKMassOptions, MultiMapOptions])
def test_the_ascent_settings_are_checked_once_for_every_penalty(options_cls):
    assert issubclass(options_cls, AscentOptions)
    with pytest.raises(ValueError, match="n_ascent_steps.*-1"):
        options_cls(n_ascent_steps=-1)
    with pytest.raises(ValueError, match="ascent_beta"):
        options_cls(ascent_beta=math.inf)
    with pytest.raises(ValueError, match="ascent_step_size"):
        options_cls(ascent_step_size=0.0)
    with pytest.raises(ValueError, match="radius"):
        options_cls(radius=1.5)  # an L_inf budget above the image range


def test_each_penalty_keeps_its_own_defaults_over_the_shared_ones():
    assert AscentOptions().radius == 0.1 and AscentOptions().step == 0.05
    assert (
        SmoothnessOptions().radius == 0.1 and SmoothnessOptions(ball="l2", radius=3.0).step == 1.5
    )
    topk = TopKMassOptions()
    assert (topk.radius, topk.n_ascent_steps) == (0.3, 1)
    assert topk.step == pytest.approx(2.5 * 0.3)  # its own rule: 2.5 * radius / steps
    assert MultiMapOptions().radius == 0.3 and MultiMapOptions().step == 0.15


def test_a_public_function_lists_its_options_and_checks_them_before_any_work():
    signature = inspect.signature(explanation_smoothness)
    assert list(signature.parameters)[:5] == ["model", "inputs", "target", "logits", "generator"]
    assert signature.parameters["n_ascent_steps"].default == 0
    assert "logits" not in inspect.signature(topk_mass).parameters
    assert "Args:" in (explanation_smoothness.__doc__ or "")

    class Refuses(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise AssertionError("no work before the options are checked")

    x, y = _batch()
    with pytest.raises(TypeError, match="explanation_smoothness.*'radiuss'.*'radius'"):
        explanation_smoothness(Refuses(), x, y, radiuss=0.1)
    with pytest.raises(ValueError, match="n_samples"):
        explanation_smoothness(Refuses(), x, y, n_samples=0)


def test_the_function_and_its_checked_form_compute_the_same_value():
    x, y = _batch()
    net = _net()
    given = topk_mass(net, x, y, k=4, generator=torch.Generator().manual_seed(3))
    call = PenaltyCall(net, x, y, TopKMassOptions(k=4), torch.Generator().manual_seed(3))
    assert torch.equal(given, topk_mass.checked(call))


def test_a_changed_method_is_checked_and_followed_by_the_options():
    term = Curvature(0.5, "zero_order", 0.1, 2)  # the positional arguments still work
    assert (term.weight, term.options.h, term.options.n_directions) == (0.5, 0.1, 2)
    term.method = "gradient_difference"
    assert term.options.method == "gradient_difference" and term.needs_input_grad
    with pytest.raises(ValueError, match="method"):
        term.method = "third_order"
