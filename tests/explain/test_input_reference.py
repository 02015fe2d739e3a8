"""`input_reference`: the explanation "map = input", and what the top-k attack does to it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.attacks import fragility_attack
from robust_train.explain import explainer_spec, get_explainer, importance_map
from robust_train.explain.input_reference import input_reference
from robust_train.metrics.functional import topk_intersection


class Refuses(nn.Module):
    """Counts its calls; refuses one that could depend on gradients."""

    calls = 0

    def forward(self, x):
        assert not torch.is_grad_enabled() and len(x) == 1, "the map must not use the model"
        Refuses.calls += 1
        return torch.zeros(1, 3)


def test_the_map_is_the_input_and_its_gradient_the_identity():
    x = torch.rand(3, 2, 5, 5, requires_grad=True)
    out = input_reference(Refuses(), x, torch.tensor([0, 1, 2]), create_graph=True)
    assert torch.equal(out, x) and out is not x
    weights = torch.rand_like(x)
    (grad,) = torch.autograd.grad((out * weights).sum(), x)
    torch.testing.assert_close(grad, weights)
    assert not input_reference(Refuses(), x, torch.tensor([0, 1, 2])).requires_grad
    spec = explainer_spec("input_reference")
    assert spec.differentiable and not spec.piecewise_constant and not spec.reported
    assert get_explainer("input_reference") is input_reference


def test_bad_targets_are_refused():
    with pytest.raises(ValueError, match="target"):
        input_reference(Refuses(), torch.rand(2, 1, 4, 4), torch.tensor([0]))
    with pytest.raises(ValueError, match="class index 3 but the model returns 3 classes"):
        input_reference(Refuses(), torch.rand(2, 1, 4, 4), torch.tensor([0, 3]))


class Constant(nn.Module):
    """Predicts class 0 whatever the input: the label constraint never binds."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 2)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.copy_(torch.tensor([1.0, 0.0]))

    def forward(self, x):
        return self.linear(x.flatten(1))


def test_the_topk_attack_lowers_the_top_pixels_and_raises_the_rest():
    """With a label that never changes the attack reaches the analytic corner of the ball:
    the clean top-k pixels at x - eps, every other pixel at x + eps, clipped to [0, 1]."""
    torch.manual_seed(0)
    x, eps, k = torch.rand(4, 1, 4, 4) * 0.6 + 0.2, 0.1, 5
    result = fragility_attack(
        Constant(), x, torch.zeros(4, dtype=torch.long), explainer="input_reference",
        epsilon=eps, n_steps=4, step_size=0.05, k=k, measure_k=k, surrogate_beta=None,
    )  # fmt: skip
    top = torch.zeros(4, 16, dtype=torch.bool)
    top.scatter_(1, x.flatten(1).argsort(1, descending=True)[:, :k], True)
    corner = torch.where(top, x.flatten(1) - eps, x.flatten(1) + eps).clamp(0, 1).view_as(x)
    torch.testing.assert_close(result.adversarial, corner)
    expected = topk_intersection(importance_map(x), importance_map(corner), k)
    torch.testing.assert_close(result.topk_intersection, expected)
