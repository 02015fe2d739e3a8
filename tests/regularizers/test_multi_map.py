"""The multi-map penalty: its shared gradient maps equal the explainers one by one (values and
parameter gradients) at one forward, the penalty equals a per-map reference and the
explanation-smoothness penalty it generalises, its argument checks, and a short real fit."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.explain import get_explainer, importance_map
from robust_train.models import MNISTConvNet, softplus
from robust_train.regularizers import PENALTIES, explanation_smoothness, get_penalty
from robust_train.regularizers.multi_map import (
    MultiMapSmoothness,
    gradient_family_maps,
    multi_map_smoothness,
)
from tests.support.helpers import digits_tensors

FAMILY = ("saliency", "input_x_gradient", "grad_cam")


def small_mnist(beta: float | None = None) -> nn.Module:
    torch.manual_seed(0)
    net = MNISTConvNet(channels=[4, 8], hidden=16).eval()
    return softplus(net, beta) if beta is not None else net


def one_by_one(net, x, y, name, layer, create_graph=False):
    options = {"layer": layer} if name == "grad_cam" else {}
    explain = get_explainer(name, **options)
    return importance_map(explain(net, x, y, create_graph=create_graph))


@pytest.mark.parametrize("beta", [None, 2.0])
@pytest.mark.parametrize("layer", [None, "features.4"])
def test_shared_maps_equal_the_explainers_one_by_one(beta, layer):
    net = small_mnist(beta)
    x, y = torch.rand(5, 1, 28, 28), torch.tensor([0, 3, 5, 7, 9])
    maps = gradient_family_maps(net, x, y, FAMILY, layer=layer)
    assert set(maps) == set(FAMILY)
    for name in FAMILY:
        expected = one_by_one(net, x, y, name, layer)
        assert maps[name].shape == (5, 28, 28) and not maps[name].requires_grad
        torch.testing.assert_close(maps[name], expected, rtol=1e-5, atol=1e-7)


def test_shared_maps_keep_the_same_parameter_gradients_as_one_by_one():
    net = small_mnist(2.0)
    x, y = torch.rand(3, 1, 28, 28), torch.tensor([1, 2, 3])
    shared = gradient_family_maps(net, x, y, FAMILY, layer="features.4", create_graph=True)
    loss = sum(m.square().sum() for m in shared.values())
    got = torch.autograd.grad(loss, list(net.parameters()), allow_unused=True)
    alone = sum(
        one_by_one(net, x, y, n, "features.4", create_graph=True).square().sum() for n in FAMILY
    )
    want = torch.autograd.grad(alone, list(net.parameters()), allow_unused=True)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)


def test_shared_maps_run_one_forward_where_the_explainers_run_three():
    net = small_mnist(2.0)
    calls = []
    net.register_forward_hook(lambda *_: calls.append(1))
    x, y = torch.rand(2, 1, 28, 28), torch.tensor([0, 1])
    gradient_family_maps(net, x, y, FAMILY)
    assert len(calls) == 1
    for name in FAMILY:
        one_by_one(net, x, y, name, None)
    assert len(calls) == 4


def test_shared_maps_refuse_a_map_outside_the_family():
    with pytest.raises(ValueError, match="`names` must be some of"):
        gradient_family_maps(small_mnist(), torch.rand(1, 1, 28, 28), torch.tensor([0]), ["lrp"])


def reference(net, x, y, names, weights, radius, seed, layer):
    """The penalty from its formula: one uniform x' per image (the batch's draw), each map by
    its own explainer, sum_e w_e (1 - cos(E_e(x), E_e(x')))."""
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
    xp = (x + (2 * u - 1) * radius).clamp(0, 1)
    total = torch.zeros(len(x))
    for name, w in zip(names, weights, strict=True):
        a = one_by_one(net, x, y, name, layer).flatten(1)
        b = one_by_one(net, xp, y, name, layer).flatten(1)
        total = total + w * (1 - F.cosine_similarity(a, b, dim=1, eps=1e-12))
    return total


@pytest.mark.parametrize("names", [("input_x_gradient", "grad_cam"), ("saliency", "lrp")])
def test_penalty_equals_its_per_map_reference(names):
    net = small_mnist(2.0)
    x, y = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])
    weights = (1.0, 0.5)
    value = multi_map_smoothness(
        net, x, y, explainers=names, map_weights=weights, radius=0.2, layer="features.4",
        generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    expected = reference(net, x, y, names, weights, 0.2, 3, "features.4")
    torch.testing.assert_close(value.detach(), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("steps", [0, 1, 2])
def test_one_map_is_the_explanation_smoothness_penalty(steps):
    """One explainer, cosine: the same uniform draw and the same ascent as
    `explanation_smoothness` (its direction on the softplus surrogate of a ReLU network)."""
    net = small_mnist()
    x, y = torch.rand(4, 1, 28, 28), torch.tensor([4, 5, 6, 7])
    common = {"radius": 0.3, "distance": "cosine", "n_ascent_steps": steps}
    ours = multi_map_smoothness(
        net, x, y, explainers=["input_x_gradient"], generator=torch.Generator().manual_seed(1),
        **common,
    )  # fmt: skip
    theirs = explanation_smoothness(
        net, x, y, explainer="input_x_gradient", generator=torch.Generator().manual_seed(1),
        **common,
    )  # fmt: skip
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_the_ascent_moves_x_prime_towards_larger_distances():
    net = small_mnist(2.0)
    x, y = torch.rand(8, 1, 28, 28), torch.arange(8)
    options = {"explainers": ["input_x_gradient", "grad_cam"], "radius": 0.3}
    uniform = multi_map_smoothness(net, x, y, generator=torch.Generator().manual_seed(0), **options)
    ascended = multi_map_smoothness(
        net, x, y, n_ascent_steps=2, generator=torch.Generator().manual_seed(0), **options
    )
    assert float(ascended.detach().mean()) > float(uniform.detach().mean())


def test_gradients_reach_the_parameters_through_both_maps():
    net = small_mnist(2.0)
    x, y = torch.rand(3, 1, 28, 28), torch.tensor([0, 1, 2])
    value = multi_map_smoothness(net, x, y, explainers=["grad_cam"], radius=0.3)
    value.sum().backward()
    conv = net.features[0].weight.grad
    assert conv is not None and bool(conv.abs().sum() > 0)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"explainers": ["saliency", "saliency"]}, ValueError, "distinct explainers"),
        ({"explainers": []}, ValueError, "distinct explainers"),
        ({"explainers": "saliency"}, TypeError, "`explainers` must be a list"),
        ({"explainers": ["nope"]}, ValueError, "nope"),
        ({"explainers": ["meaningful_perturbation"]}, ValueError, "not differentiable"),
        ({"map_weights": [1.0]}, ValueError, "one weight per explainer"),
        ({"map_weights": [0.0, 0.0]}, ValueError, "all zero"),
        ({"map_weights": [1.0, -1.0]}, ValueError, "map_weights"),
        ({"radius": 1.0}, ValueError, "radius"),
        ({"distance": "kl"}, ValueError, "distance"),
        ({"n_ascent_steps": -1}, ValueError, "n_ascent_steps"),
        ({"layer": 3}, TypeError, "`layer`"),
    ],
)
def test_bad_arguments_fail_at_construction(options, error, match):
    with pytest.raises(error, match=match):
        MultiMapSmoothness(**options)


def test_registered_and_built_by_name_with_its_cost_options():
    term = get_penalty("multi_map", weight=5.0, explainers=["saliency", "lrp"], batch_fraction=0.5)
    assert PENALTIES["multi_map"] is MultiMapSmoothness and term.batch_fraction == 0.5
    assert term.options.explainers == ("saliency", "lrp") and term.double_backprop


@pytest.mark.slow
def test_a_short_real_fit_lowers_the_penalty(tmp_path):
    x, y = digits_tensors()
    x, y = x[:256], y[:256]
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.Softplus(beta=2.0), nn.Flatten(), nn.Linear(512, 10)
    )
    term = MultiMapSmoothness(
        weight=5.0, explainers=["input_x_gradient", "grad_cam"], layer="1", radius=0.1, seed=0
    )
    probe = torch.Generator().manual_seed(9)
    before = float(multi_map_smoothness(net, x[:64], y[:64], explainers=["input_x_gradient",
                   "grad_cam"], layer="1", radius=0.1, generator=probe).mean())  # fmt: skip
    module = RobustClassifier(net, [term], optimizer=lambda p: torch.optim.Adam(p, lr=3e-3))
    trainer = pl.Trainer(
        max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True))
    probe = torch.Generator().manual_seed(9)
    after = float(multi_map_smoothness(net, x[:64], y[:64], explainers=["input_x_gradient",
                  "grad_cam"], layer="1", radius=0.1, generator=probe).mean())  # fmt: skip
    assert torch.isfinite(torch.tensor(after)) and after < before
    assert "train/penalty/multi_map" in trainer.callback_metrics
