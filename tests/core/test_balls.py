"""The L_inf and L2 balls shared by attacks, penalties, metrics and certificates
(robust_train.core.balls): draws inside the ball and the image box, projection onto their
intersection (idempotent, nearest point), unit steps, and the limiting cases that tie the two
norms together."""

from __future__ import annotations

import pytest
import torch

from robust_train.core.balls import (
    NORMS,
    per_sample_norm,
    project,
    project_offset,
    random_in_ball,
    random_offset,
    random_on_sphere,
    step_direction,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _size(delta: torch.Tensor, norm: str) -> torch.Tensor:
    return delta.flatten(1).abs().amax(1) if norm == "linf" else per_sample_norm(delta)


@pytest.mark.parametrize("norm", NORMS)
def test_random_points_lie_in_the_ball_and_the_box(norm):
    x0 = torch.rand(64, 1, 5, 5, generator=_gen(1))
    x = random_in_ball(x0, 0.3, norm, _gen(2))
    assert bool((_size(x - x0, norm) <= 0.3 + 1e-6).all())
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0


@pytest.mark.parametrize("norm", NORMS)
def test_random_in_ball_is_the_clamped_offset_of_the_same_draws(norm):
    x0 = torch.rand(8, 3, 4, 4, generator=_gen(1))
    offset = random_offset(x0.shape, 0.2, norm, _gen(5))
    assert torch.equal(random_in_ball(x0, 0.2, norm, _gen(5)), (x0 + offset).clamp(0, 1))


def test_l2_offsets_are_uniform_in_the_ball():
    # In d = 2 dimensions, a uniform point of the disc of radius r lies within r/2 with
    # probability 1/4 (a draw on the sphere, or of a uniform radius, gives 0 or 1/2).
    d = random_offset((20000, 1, 1, 2), 1.0, "l2", _gen(3))
    inner = (per_sample_norm(d) <= 0.5).double().mean()
    assert abs(float(inner) - 0.25) < 0.015
    angles = torch.atan2(d[:, 0, 0, 1], d[:, 0, 0, 0])
    assert abs(float((angles > 0).double().mean()) - 0.5) < 0.015


def test_linf_offsets_fill_the_cube():
    d = random_offset((20000, 1, 1, 1), 0.4, "linf", _gen(4))
    assert float(d.min()) >= -0.4 and float(d.max()) <= 0.4
    assert abs(float(d.mean())) < 0.01 and abs(float(d.abs().mean()) - 0.2) < 0.01


def test_sphere_offsets_have_the_radius():
    d = random_on_sphere((6, 2, 3, 3), 0.7, _gen(5))
    torch.testing.assert_close(per_sample_norm(d), torch.full((6,), 0.7))


def test_like_moves_the_draws_before_they_are_scaled():
    like = torch.zeros(5, 1, 3, 3, dtype=torch.float64)
    d = random_offset(like.shape, 0.3, "linf", _gen(6), dtype=torch.float32, like=like)
    u = torch.rand(like.shape, generator=_gen(6), dtype=torch.float32).double()
    assert d.dtype == torch.float64
    assert torch.equal(d, (2 * u - 1) * 0.3)


@pytest.mark.parametrize("norm", NORMS)
def test_projection_is_idempotent_and_inside(norm):
    x0 = torch.rand(16, 1, 6, 6, generator=_gen(7))
    x = x0 + 2 * torch.randn(x0.shape, generator=_gen(8))
    y = project(x, x0, 0.5, norm)
    assert bool((_size(y - x0, norm) <= 0.5 + 1e-6).all())
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0
    torch.testing.assert_close(project(y, x0, 0.5, norm), y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("norm", NORMS)
def test_projection_is_the_nearest_feasible_point(norm):
    # No point of the ball intersected with the box is closer to x than its projection.
    x0 = torch.rand(1, 1, 3, 3, generator=_gen(9)).repeat(400, 1, 1, 1)
    x = x0 + 0.8 * torch.randn(x0[:1].shape, generator=_gen(10))
    y = project(x[:1], x0[:1], 0.4, norm)
    z = random_in_ball(x0, 0.4, norm, _gen(11))
    assert float(per_sample_norm(x[:1] - y)) <= float(per_sample_norm(x - z).min()) + 1e-6


def test_l2_and_linf_coincide_in_one_dimension():
    # One pixel: both balls are the interval [x0 - r, x0 + r].
    x0 = torch.rand(32, 1, 1, 1, generator=_gen(12))
    x = x0 + torch.randn(x0.shape, generator=_gen(13))
    torch.testing.assert_close(project(x, x0, 0.2, "l2"), project(x, x0, 0.2, "linf"))
    d = x - x0
    torch.testing.assert_close(project_offset(d, 0.2, "l2"), project_offset(d, 0.2, "linf"))
    assert torch.equal(step_direction(d, "l2"), step_direction(d, "linf"))


@pytest.mark.parametrize("norm", NORMS)
def test_limiting_radii(norm):
    x0 = torch.rand(4, 2, 3, 3, generator=_gen(14))
    x = x0 + torch.randn(x0.shape, generator=_gen(15))
    # Radius 0: the ball is x0 itself; a radius past the box: only the box is left.
    assert torch.equal(project(x, x0, 0.0, norm), x0)
    torch.testing.assert_close(project(x, x0, 100.0, norm), x.clamp(0, 1))
    assert torch.equal(random_offset(x0.shape, 0.0, norm, _gen(16)).abs().sum(), torch.tensor(0.0))


def test_project_offset_keeps_short_offsets_and_shortens_long_ones():
    d = torch.tensor([[0.3, 0.4], [3.0, 4.0]])
    torch.testing.assert_close(project_offset(d, 1.0, "l2"), torch.tensor([[0.3, 0.4], [0.6, 0.8]]))
    assert torch.equal(project_offset(d, 1.0, "linf"), torch.tensor([[0.3, 0.4], [1.0, 1.0]]))


def test_step_directions_are_unit_steps_and_zero_stays_zero():
    g = torch.randn(5, 1, 4, 4, generator=_gen(17))
    g[0] = 0
    l2 = step_direction(g, "l2")
    torch.testing.assert_close(per_sample_norm(l2[1:]), torch.ones(4))
    assert float(l2[0].abs().sum()) == 0.0
    assert torch.equal(step_direction(g, "linf"), g.sign())


def test_unknown_norm_is_refused_with_its_value():
    with pytest.raises(ValueError, match="`norm` 'l1'"):
        random_offset((1, 1, 2, 2), 0.1, "l1")
    with pytest.raises(ValueError, match="`norm` 'l1'"):
        project(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), 0.1, "l1")
