"""The interval-width term's radius ramp: call t of a training-mode term uses epsilon * (t + 1) /
ramp_steps up to epsilon, eval-mode calls do not advance it, and a loaded state continues it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.certify import IntervalWidthPenalty, interval_width


def test_the_radius_ramps_linearly_and_is_saved_with_the_state() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(9, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.rand(4, 1, 3, 3), torch.tensor([0, 1, 2, 0])
    term = IntervalWidthPenalty(epsilon=0.4, ramp_steps=4).train()
    seen = []
    for _ in range(6):
        radius = term.radius
        value = term(net, x, y)
        torch.testing.assert_close(value, interval_width(net, x, y, epsilon=radius))
        seen.append(radius)
    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])
    fresh = IntervalWidthPenalty(epsilon=0.4, ramp_steps=8)
    fresh.load_state_dict(IntervalWidthPenalty(epsilon=0.4, ramp_steps=8).state_dict())
    assert fresh.radius == pytest.approx(0.05)
    fresh.load_state_dict(term.state_dict())  # 6 calls done: the 7th of 8 steps
    assert fresh.radius == pytest.approx(0.35)
    fresh.eval()
    fresh(net, x, y)
    assert fresh.radius == pytest.approx(0.35)  # evaluation does not advance the ramp


def test_a_bad_ramp_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="`ramp_steps`"):
        IntervalWidthPenalty(ramp_steps=-2)
