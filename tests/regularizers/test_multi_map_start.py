"""MultiMapSmoothness's `start` option: x' starting at a random vertex of the ball."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.core.balls import random_offset
from robust_train.explain import importance_map, saliency
from robust_train.regularizers import MultiMapSmoothness
from robust_train.regularizers.multi_map import multi_map_smoothness
from tests.support.helpers import relu_conv_net


def _net() -> nn.Module:
    return relu_conv_net(hidden=None, classes=4, channels=3, size=6)


def _l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.flatten(1), b.flatten(1)
    return (a / a.sum(1, keepdim=True) - b / b.sum(1, keepdim=True)).abs().sum(1)


def test_corner_start_is_the_sign_of_the_uniform_draw_times_the_radius():
    """Without ascent steps, the penalty is the L1 distance of the saliency maps at x and at
    x + radius * sign(u), u the uniform draw of the same generator (a vertex of the ball)."""
    net, radius = _net(), 0.2
    x = 0.3 + 0.4 * torch.rand(3, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 2, 3])
    got = multi_map_smoothness(net, x, y, explainers=("saliency",), distance="l1", radius=radius,
                               n_ascent_steps=0, start="corner",
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    u = random_offset(x.shape, radius, "linf", torch.Generator().manual_seed(5), device="cpu",
                      dtype=torch.float32, like=x)  # fmt: skip
    corner = (x + radius * torch.where(u >= 0, 1.0, -1.0)).clamp(0, 1)
    assert ((corner - x).abs() - radius).abs().max() < 1e-6  # every pixel on a face: a vertex
    want = _l1(importance_map(saliency(net, x, y)), importance_map(saliency(net, corner, y)))
    torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-6)
    uniform = multi_map_smoothness(net, x, y, explainers=("saliency",), distance="l1",
                                   radius=radius, n_ascent_steps=0,
                                   generator=torch.Generator().manual_seed(5))  # fmt: skip
    assert not torch.allclose(uniform, got)


def test_corner_start_with_an_ascent_step_trains():
    term = MultiMapSmoothness(weight=1.0, seed=0, explainers=["saliency", "grad_cam"],
                              radius=0.3, n_ascent_steps=1, start="corner")  # fmt: skip
    net = _net()
    x, y = torch.rand(2, 1, 6, 6), torch.tensor([1, 3])
    value = term.penalty(net, x, y, None)
    assert value.shape == (2,) and bool(torch.isfinite(value).all())
    value.sum().backward()
    assert net[0].weight.grad is not None and bool(net[0].weight.grad.abs().sum() > 0)


def test_an_unknown_start_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r"`start`.*'edge'"):
        MultiMapSmoothness(weight=1.0, start="edge")
