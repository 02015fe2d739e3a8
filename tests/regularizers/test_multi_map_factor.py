"""MultiMapSmoothness's `gradient_factor` (input x gradient held to the moved input times the
clean gradient) and `n_starts` (the worst of several draws as the ascent's start)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.core.balls import random_offset
from robust_train.explain import importance_map, input_x_gradient
from robust_train.regularizers import MultiMapSmoothness
from robust_train.regularizers.multi_map import multi_map_smoothness
from tests.support.helpers import relu_conv_net


def _l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.flatten(1), b.flatten(1)
    return (a / a.sum(1, keepdim=True) - b / b.sum(1, keepdim=True)).abs().sum(1)


def _images(n: int = 3, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    x = 0.3 + 0.4 * torch.rand(n, 1, 6, 6, generator=torch.Generator().manual_seed(seed))
    return x, torch.arange(n) % 4


def test_a_linear_model_keeps_its_gradient_factor_so_the_factor_penalty_is_zero():
    """A linear model's gradient does not depend on the input: x' * g(x') = x' * g(x), so the
    factor penalty is zero where the map's own distance (x * g against x' * g) is not."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(36, 4))
    x, y = _images()
    common = {"explainers": ("input_x_gradient",), "distance": "l1", "radius": 0.2,
              "n_ascent_steps": 1, "start": "corner"}  # fmt: skip
    factor = multi_map_smoothness(net, x, y, gradient_factor=True,
                                  generator=torch.Generator().manual_seed(2), **common)  # fmt: skip
    plain = multi_map_smoothness(net, x, y, generator=torch.Generator().manual_seed(2), **common)
    assert float(factor.detach().abs().max()) < 1e-6
    assert float(plain.detach().min()) > 1e-3


def test_the_factor_penalty_is_the_distance_to_the_moved_input_times_the_clean_gradient():
    """Without ascent steps: L1(|x' * g(x)|, |x' * g(x')|) at the uniform draw's vertex, each
    map computed by the package's explainers, and the gradient reaches the parameters."""
    net, radius = relu_conv_net(hidden=None, classes=4, channels=3, size=6), 0.2
    x, y = _images()
    got = multi_map_smoothness(net, x, y, explainers=("saliency", "input_x_gradient"),
                               map_weights=(0.0, 1.0), distance="l1", radius=radius,
                               n_ascent_steps=0, start="corner", gradient_factor=True,
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    u = random_offset(x.shape, radius, "linf", torch.Generator().manual_seed(5), device="cpu",
                      dtype=torch.float32, like=x)  # fmt: skip
    moved = (x + radius * torch.where(u >= 0, 1.0, -1.0)).clamp(0, 1)
    xr = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(net(xr).gather(1, y[:, None]).sum(), xr)
    want = _l1(importance_map(moved * grad), importance_map(input_x_gradient(net, moved, y)))
    torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-6)
    got.sum().backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in net.parameters())


def test_the_start_is_the_worst_of_the_draws():
    """With no ascent step the penalty of `n_starts` draws is, per sample, the largest of the
    penalties of the same draws taken one at a time from the same generator."""
    net = relu_conv_net(hidden=None, classes=4, channels=3, size=6)
    x, y = _images(6)
    common = {"explainers": ("saliency", "input_x_gradient"), "distance": "l1", "radius": 0.2,
              "n_ascent_steps": 0, "start": "corner"}  # fmt: skip
    one_by_one = torch.Generator().manual_seed(7)
    draws = torch.stack([multi_map_smoothness(net, x, y, generator=one_by_one, **common).detach()
                         for _ in range(5)])  # fmt: skip
    worst = multi_map_smoothness(net, x, y, n_starts=5, generator=torch.Generator().manual_seed(7),
                                 **common)  # fmt: skip
    torch.testing.assert_close(worst.detach(), draws.max(0).values, rtol=1e-5, atol=1e-7)
    assert bool((draws.max(0).values > draws[0]).any())  # the first draw was not always worst


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"n_starts": 0}, ValueError, "n_starts"),
        ({"n_starts": 1.5}, (TypeError, ValueError), "n_starts"),
        ({"gradient_factor": 1}, TypeError, "gradient_factor"),
        ({"gradient_factor": True, "explainers": ["saliency"]}, ValueError, "input_x_gradient"),
    ],
)
def test_bad_options_fail_at_construction(options, error, match):
    with pytest.raises(error, match=match):
        MultiMapSmoothness(**options)


def test_with_a_teacher_the_clean_gradient_is_the_teachers(tmp_path):
    """A teacher holding the model's own weights gives the same value as no teacher; a teacher
    with other weights another value (its gradient, not the model's, times the moved input)."""
    net = relu_conv_net(hidden=None, classes=4, channels=3, size=6)
    x, y = _images()
    same, other = tmp_path / "same.pt", tmp_path / "other.pt"
    torch.save(net.state_dict(), same)
    torch.save(
        relu_conv_net(hidden=None, classes=4, channels=3, size=6, seed=1).state_dict(), other
    )
    common = {"explainers": ("input_x_gradient",), "distance": "l1", "radius": 0.2,
              "n_ascent_steps": 1, "start": "corner", "gradient_factor": True}  # fmt: skip

    def value(teacher: str | None) -> torch.Tensor:
        generator = torch.Generator().manual_seed(3)
        return multi_map_smoothness(net, x, y, teacher=teacher, generator=generator, **common)

    own = value(None).detach()
    torch.testing.assert_close(value(str(same)).detach(), own, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(value(str(other)).detach(), own, atol=1e-4)
