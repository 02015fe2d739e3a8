"""The contract every explainer keeps: modes untouched, batch independence, create_graph, errors."""

from __future__ import annotations

import pytest
import torch

from robust_train.explain import (
    EXPLAINERS,
    explainer_spec,
    get_explainer,
    importance_map,
    is_differentiable,
)
from robust_train.models.softplus import softplus
from tests.support.cheap_options import explainer_options
from tests.support.helpers import SmoothMLP, TinyCNN

DIFFERENTIABLE = [name for name in EXPLAINERS if is_differentiable(name)]
MODEL_FREE = ("input_reference",)  # the reference "map = input": no parameter gradient


def _explainer(name, **extra):
    """The explainer with its cheap options for tests (tests/support/cheap_options.py: a new
    explainer without an entry fails with a message that says what to add)."""
    return get_explainer(name, **{**explainer_options(name), **extra})


def _skip_layer_explainer_without_conv(name, model):
    """A layer explainer (`ExplainerSpec.layer`, e.g. Grad-CAM) needs a convolutional layer; the
    MLP has none (its refusal is tested in the explainer's own tests)."""
    if explainer_spec(name).layer and not any(
        isinstance(m, torch.nn.Conv2d) for m in model.modules()
    ):
        pytest.skip(f"{name} explains through a Conv2d layer; {type(model).__name__} has none")


@pytest.mark.parametrize("name", EXPLAINERS)
@pytest.mark.parametrize("train", [True, False])
def test_train_eval_state_is_unchanged(name, train):
    model = TinyCNN(batchnorm=True, dropout=0.5).train(train)
    _explainer(name)(model, torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2]))
    assert all(m.training is train for m in model.modules())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("name", EXPLAINERS)
def test_batch_independence_in_eval_mode(name):
    model = TinyCNN(batchnorm=True, dropout=0.5).eval()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([4, 0, 7])
    explain = _explainer(name, **({"noise_level": 0.0} if name == "smoothgrad" else {}))
    together = explain(model, x, t)
    alone = torch.cat([explain(model, x[i : i + 1], t[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@pytest.mark.parametrize("smooth_model", ["softplus_cnn", "smooth_mlp"])
def test_create_graph_gives_second_derivatives(name, smooth_model):
    model = (
        softplus(TinyCNN(batchnorm=True).eval(), beta=5.0)
        if smooth_model == "softplus_cnn"
        else SmoothMLP()
    )
    _skip_layer_explainer_without_conv(name, model)
    x = torch.rand(2, 1, 8, 8, requires_grad=True)
    explanation = _explainer(name)(model, x, torch.tensor([3, 8]), create_graph=True)
    assert explanation.requires_grad
    loss = importance_map(explanation).pow(2).sum()
    params = [p for p in model.parameters() if p.dim() > 1 and name not in MODEL_FREE]
    grads = torch.autograd.grad(loss, [x, *params])
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_without_create_graph_no_graph_is_kept(name):
    _skip_layer_explainer_without_conv(name, SmoothMLP())
    x = torch.rand(2, 1, 8, 8, requires_grad=True)
    explanation = _explainer(name)(SmoothMLP(), x, torch.tensor([3, 8]))
    if name != "input_x_gradient":  # the seed's x * grad keeps x's graph; not ours to change
        assert not explanation.requires_grad


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_relu_second_derivatives_are_true_values_not_silent_errors(name):
    """ReLU nets are piecewise linear: the gradient is piecewise constant in x, so d saliency / d x
    is 0 almost everywhere (why attacks use a softplus copy) and autograd returns exactly 0 (or
    None), not garbage; derivatives w.r.t. the parameters (and through the explicit x of
    input x gradient and IG) are not 0, and all of them match central finite differences."""
    model = TinyCNN().double().eval()
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([3, 8])
    explain = _explainer(name)

    def loss_fn():
        return importance_map(explain(model, x, t, create_graph=True)).pow(2).sum()

    weight = model.net[2].weight
    grad_x, grad_w = torch.autograd.grad(loss_fn(), [x, weight], allow_unused=True)
    if name in MODEL_FREE:
        assert grad_w is None
        grad_w = torch.zeros_like(weight)
    if name in ("saliency", "smoothgrad"):
        assert grad_x is None or grad_x.abs().max() < 1e-12
        grad_x = torch.zeros_like(x) if grad_x is None else grad_x
    else:
        assert grad_x.abs().sum() > 0
    assert grad_w.abs().sum() > 0 or name in MODEL_FREE
    eps = 1e-6
    checks = [(weight, grad_w, i) for i in [(0, 0, 1, 1), (3, 5, 0, 2), (7, 2, 2, 0)]]
    checks += [(x, grad_x, i) for i in [(0, 0, 3, 4), (1, 0, 7, 0)]]
    for tensor, grad, index in checks:
        with torch.no_grad():
            tensor[index] += eps
        up = loss_fn().item()
        with torch.no_grad():
            tensor[index] -= 2 * eps
        down = loss_fn().item()
        with torch.no_grad():
            tensor[index] += eps
        assert grad[index].item() == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7)


BAD_INPUTS = [
    (torch.rand(1, 8, 8), torch.tensor([0]), "inputs"),
    (torch.randint(0, 2, (1, 1, 8, 8)), torch.tensor([0]), "inputs"),
    (torch.rand(0, 1, 8, 8), torch.tensor([], dtype=torch.long), "inputs"),
    (torch.full((1, 1, 8, 8), float("nan")), torch.tensor([0]), "inputs"),
    ([[0.0]], torch.tensor([0]), "inputs"),
    (torch.rand(2, 1, 8, 8), torch.tensor([0]), "target"),
    (torch.rand(1, 1, 8, 8), torch.tensor([0.0]), "target"),
    (torch.rand(1, 1, 8, 8), torch.tensor([10]), "target"),
    (torch.rand(1, 1, 8, 8), torch.tensor([-1]), "target"),
]


@pytest.mark.parametrize("name", EXPLAINERS)
@pytest.mark.parametrize(("inputs", "target", "argument"), BAD_INPUTS)
def test_bad_inputs_name_the_argument(name, inputs, target, argument):
    with pytest.raises((ValueError, TypeError), match=argument):
        _explainer(name)(TinyCNN().eval(), inputs, target)
