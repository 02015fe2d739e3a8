"""`detach_clean`: the smoothness penalty without double backprop through the clean map."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.maps import importance_map
from robust_train.regularizers import ExplanationSmoothness, explanation_smoothness
from robust_train.regularizers._penalty_parts import map_distance, sample_in_ball
from tests.support.helpers import SmoothMLP


def _batch(b: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 1, 8, 8, generator=g), torch.randint(0, 10, (b,), generator=g)


def _param_grad(model, value):
    model.zero_grad()
    value.sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _penalty(model, x, y, explainer, **kwargs):
    return explanation_smoothness(
        model, x, y, explainer=explainer, generator=torch.Generator().manual_seed(3), **kwargs
    )


@pytest.mark.parametrize("explainer", [saliency, input_x_gradient])
def test_detached_value_and_gradient_match_a_hand_detached_reference(explainer):
    torch.manual_seed(0)
    model = SmoothMLP()
    x, y = _batch()
    default = _penalty(model, x, y, explainer)
    detached = _penalty(model, x, y, explainer, detach_clean=True)
    assert torch.allclose(default, detached, atol=1e-6)

    delta = sample_in_ball(x, 0.1, 1, "linf", torch.Generator().manual_seed(3))
    clean = importance_map(explainer(model, x, y, create_graph=False)).detach()
    pert = importance_map(explainer(model, (x + delta).clamp(0, 1), y, create_graph=True))
    reference = map_distance(clean, pert, "l1")
    assert torch.allclose(detached, reference, atol=1e-6)

    g_detached = _param_grad(model, detached)
    g_reference = _param_grad(model, reference)
    g_default = _param_grad(model, _penalty(model, x, y, explainer))
    assert torch.allclose(g_detached, g_reference, atol=1e-6)
    assert not torch.allclose(g_detached, g_default, atol=1e-6)


def test_detached_shared_forward_keeps_the_task_loss_graph():
    torch.manual_seed(0)
    model = SmoothMLP()
    x, y = _batch()
    xg = x.clone().requires_grad_(True)
    logits = model(xg)
    shared = _penalty(model, xg, y, saliency, logits=logits, detach_clean=True)
    fresh = _penalty(model, x, y, saliency, detach_clean=True)
    assert torch.allclose(shared, fresh, atol=1e-6)
    (F.cross_entropy(logits, y) + shared.mean()).backward()  # the logits graph is still there
    assert all(p.grad is not None for p in model.parameters())


def test_term_passes_detach_clean_and_checks_it():
    assert ExplanationSmoothness(detach_clean=True).options.detach_clean is True
    assert ExplanationSmoothness().options.detach_clean is False
    with pytest.raises(TypeError, match="detach_clean"):
        ExplanationSmoothness(detach_clean="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="detach_clean"):
        explanation_smoothness(SmoothMLP(), *_batch(), detach_clean=1)  # type: ignore[arg-type]


def test_presets_pass_detach_clean_and_keep_their_defaults():
    from robust_train.regularizers import get_penalty

    for name in ("lipschitz", "igr"):
        assert get_penalty(name).options.detach_clean is False
        assert get_penalty(name, detach_clean=True).options.detach_clean is True
