"""The interval-width penalty: a few optimiser steps on it shrink the width of the explanation's
bounds on a tiny model; it composes with another registered penalty; bad options are refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.certify import IntervalWidthPenalty, explanation_bounds, interval_width
from robust_train.regularizers import get_penalty


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3),
    )  # fmt: skip


def mean_width(net: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float) -> float:
    with torch.no_grad():
        b = explanation_bounds(net, x, y, epsilon=eps)
    return float((b.upper - b.lower).mean())


@pytest.mark.parametrize("relative", [True, False])
def test_a_few_steps_on_the_penalty_shrink_the_width(relative) -> None:
    net = tiny()
    x, y = torch.rand(8, 1, 4, 4, generator=torch.Generator().manual_seed(1)), torch.arange(8) % 3
    term = IntervalWidthPenalty(epsilon=0.1, relative=relative)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    before, first = mean_width(net, x, y, 0.1), float(term(net, x, y).mean().detach())
    for _ in range(15):
        opt.zero_grad()
        term(net, x, y).mean().backward()
        opt.step()
    assert float(term(net, x, y).mean().detach()) < 0.8 * first
    if not relative:
        assert mean_width(net, x, y, 0.1) < 0.8 * before


def test_the_penalty_is_the_mean_width_and_composes_with_another_term() -> None:
    net, x, y = tiny(), torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
    value = interval_width(net, x, y, epsilon=0.05, relative=False)
    b = explanation_bounds(net, x, y, epsilon=0.05)
    torch.testing.assert_close(value, (b.upper - b.lower).flatten(1).mean(1))
    both = get_penalty("composed", terms=[
        {"penalty": "interval_width", "epsilon": 0.05, "relative": False, "weight": 2.0},
        {"penalty": "gradnorm"},
    ])  # fmt: skip
    alone = get_penalty("gradnorm")(net, x, y)
    torch.testing.assert_close(both(net, x, y), 2 * value + alone)
    both(net, x, y).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_bad_options_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="`epsilon`"):
        IntervalWidthPenalty(epsilon=-1.0)
    with pytest.raises(ValueError, match="`explainer`"):
        IntervalWidthPenalty(explainer="grad_cam")
