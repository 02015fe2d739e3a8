"""MultiMapSmoothness's `map_powers` option: each map raised to its exponent before the distance,
so that the distance weighs the map's largest values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.core.balls import random_offset
from robust_train.explain import grad_cam, importance_map, saliency
from robust_train.regularizers import MultiMapSmoothness
from robust_train.regularizers.multi_map import (
    MultiMapOptions,
    _weighted_distance,
    multi_map_smoothness,
)
from tests.support.helpers import relu_conv_net


def _net() -> nn.Module:
    return relu_conv_net(hidden=None, classes=4, channels=3, size=6)


def _l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.flatten(1), b.flatten(1)
    a = a / a.sum(1, keepdim=True).clamp_min(1e-12)  # a blank map stays blank, as in the penalty
    return (a - b / b.sum(1, keepdim=True).clamp_min(1e-12)).abs().sum(1)


def test_each_map_is_raised_to_its_power_before_the_distance():
    """Without ascent steps, the penalty is w_s L1(sal^3, sal'^3) + w_c L1(cam, cam') at x and the
    uniform draw's x' (the slow reference written from the formula)."""
    net, radius = _net(), 0.2
    x = 0.3 + 0.4 * torch.rand(3, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 2, 3])
    got = multi_map_smoothness(net, x, y, explainers=("saliency", "grad_cam"), distance="l1",
                               radius=radius, n_ascent_steps=0, map_weights=[2.0, 0.5],
                               map_powers=[3, 1],
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    u = random_offset(x.shape, radius, "linf", torch.Generator().manual_seed(5), device="cpu",
                      dtype=torch.float32, like=x)  # fmt: skip
    xp = (x + u).clamp(0, 1)
    sal, sal_p = (importance_map(saliency(net, z, y)) for z in (x, xp))
    cam, cam_p = (importance_map(grad_cam(net, z, y, layer="1")) for z in (x, xp))
    want = 2.0 * _l1(sal**3, sal_p**3) + 0.5 * _l1(cam, cam_p)
    torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-6)
    plain = multi_map_smoothness(net, x, y, explainers=("saliency", "grad_cam"), distance="l1",
                                 radius=radius, n_ascent_steps=0, map_weights=[2.0, 0.5],
                                 generator=torch.Generator().manual_seed(5))  # fmt: skip
    assert not torch.allclose(plain, got)


def test_a_power_weighs_the_top_of_the_map():
    """Two maps that differ only in which of two near-tied top pixels is larger, on a spread of
    small values: the L1 of the sum-normalised maps barely sees it, the squared maps' much more."""
    a = torch.full((1, 6, 6), 0.1)
    a[0, 0, 0], a[0, 5, 5] = 1.0, 0.8
    b = a.clone()
    b[0, 0, 0], b[0, 5, 5] = 0.8, 1.0
    clean, pert = {"saliency": a}, {"saliency": b}
    plain = _weighted_distance(
        clean, pert, MultiMapOptions(explainers=("saliency",), distance="l1")
    )
    squared = _weighted_distance(clean, pert, MultiMapOptions(
        explainers=("saliency",), distance="l1", map_powers=(2,)))  # fmt: skip
    assert float(squared) > 2 * float(plain)


def test_map_powers_trains():
    term = MultiMapSmoothness(weight=1.0, seed=0, explainers=["saliency", "grad_cam"],
                              distance="l1", map_powers=[1.0, 2.0])  # fmt: skip
    net = _net()
    value = term.penalty(net, torch.rand(2, 1, 6, 6), torch.tensor([1, 3]), None)
    assert value.shape == (2,) and bool(torch.isfinite(value).all())
    value.sum().backward()
    assert net[0].weight.grad is not None and bool(net[0].weight.grad.abs().sum() > 0)


@pytest.mark.parametrize(
    ("powers", "error", "match"),
    [([2.0], ValueError, r"`map_powers`.*\[2\.0\]"),
     ([1.0, 0.5], ValueError, r"`map_powers`.*0\.5"),
     (2.0, TypeError, r"`map_powers`")],
)  # fmt: skip
def test_bad_map_powers_are_refused_naming_the_argument(powers, error, match):
    with pytest.raises(error, match=match):
        MultiMapSmoothness(weight=1.0, explainers=["saliency", "grad_cam"], map_powers=powers)
