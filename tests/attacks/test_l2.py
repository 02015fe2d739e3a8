"""The L2 variant of fragility_attack: exact projection, budget, label, restarts, and that it beats
random L2 noise of the same radius."""

from __future__ import annotations

import pytest
import torch

from robust_train.attacks import fragility_attack
from robust_train.attacks.objectives.base import get_objective
from robust_train.core.balls import project, random_in_ball, step_direction
from tests.support.helpers import TinyCNN


def _l2(v: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).norm(dim=1)


def _dykstra(x: torch.Tensor, x0: torch.Tensor, eps: float, steps: int = 3000) -> torch.Tensor:
    """Slow reference: Dykstra's alternating projections onto the ball and the box converge to the
    Euclidean projection onto their intersection (Boyle & Dykstra 1986)."""
    x, x0 = x.double(), x0.double()
    y, p, q = x.clone(), torch.zeros_like(x), torch.zeros_like(x)
    for _ in range(steps):
        z = y + p
        d = z - x0
        ball = x0 + d * torch.clamp(eps / _l2(d).clamp_min(1e-30), max=1.0).view(-1, 1, 1, 1)
        p = z - ball
        w = ball + q
        y = w.clamp(0, 1)
        q = w - y
    return y


def test_projection_is_the_exact_projection_onto_ball_and_box() -> None:
    gen = torch.Generator().manual_seed(0)
    x0 = torch.rand(6, 1, 5, 5, generator=gen)
    x0[0] = 0.0  # corners of the box
    x0[1] = 1.0
    x = x0 + 0.8 * torch.randn(6, 1, 5, 5, generator=gen)
    for eps in (0.05, 0.5, 2.0, 10.0):
        got = project(x, x0, eps, "l2")
        assert (_l2(got - x0) <= eps + 1e-6).all() and got.min() >= 0 and got.max() <= 1
        torch.testing.assert_close(got.double(), _dykstra(x, x0, eps), atol=2e-5, rtol=0)
    inside = x0 + 0.01 * (x - x0)
    torch.testing.assert_close(project(inside, x0, 1.0, "l2"), inside.clamp(0, 1))


def test_step_direction_and_random_start_follow_the_norm() -> None:
    d = torch.randn(4, 1, 3, 3)
    d[2] = 0.0
    unit = step_direction(d, "l2")
    torch.testing.assert_close(_l2(unit)[[0, 1, 3]], torch.ones(3))
    assert unit[2].abs().max() == 0
    x0 = torch.rand(200, 1, 4, 4)
    x = random_in_ball(x0, 0.3, "l2", torch.Generator().manual_seed(1))
    radii = _l2(x - x0)
    assert (radii <= 0.3 + 1e-6).all() and x.min() >= 0 and x.max() <= 1
    assert radii.median() > 0.2  # uniform in a 16-dim ball: most points are near the sphere
    objective = get_objective("topk")(torch.rand(2, 4, 4), k=2, measure_k=2)
    start = objective.start_point(x0[:2], 0.3, 1, torch.Generator().manual_seed(0), "l2")
    assert (_l2(start - x0[:2]) <= 0.3 + 1e-6).all() and not torch.equal(start, x0[:2])


@pytest.mark.parametrize("objective", ["topk", "random_sign"])
def test_l2_budget_range_and_label_kept(objective) -> None:
    changes = 0
    for seed, eps in enumerate((0.2, 1.0, 8.0)):
        model = TinyCNN(seed=seed).eval()
        x = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
        x[0] = 0.0
        target = model(x).argmax(1)
        res = fragility_attack(
            model, x, target, objective=objective, epsilon=eps, norm="l2", step_size=eps / 2,
            n_steps=4, n_restarts=2, seed=seed,
        )  # fmt: skip
        assert res.norm == "l2" and res.epsilon == eps
        assert (_l2(res.adversarial - x) <= eps + 1e-5).all()
        assert res.adversarial.min() >= 0 and res.adversarial.max() <= 1
        assert res.label_kept.all()
        assert torch.equal(model(res.adversarial).argmax(1), model(x).argmax(1))
        changes += int(res.n_label_changes.sum())
    assert changes > 0  # the large radius did change labels, and those iterates were rejected


def test_default_norm_is_linf_and_bad_norm_is_refused() -> None:
    model = TinyCNN().eval()
    x = torch.rand(2, 1, 8, 8)
    res = fragility_attack(model, x, model(x).argmax(1), epsilon=0.1, n_steps=1, seed=0)
    assert res.norm == "linf"
    with pytest.raises(ValueError, match="`norm` 'l1'"):
        fragility_attack(model, x, model(x).argmax(1), epsilon=0.1, norm="l1")


def test_l2_attack_beats_random_l2_noise_on_trained_digits(trained_digits) -> None:
    model, x, y = trained_digits
    correct = model(x).argmax(1) == y
    xs, ys = x[correct][:32], y[correct][:32]
    runs = {
        obj: fragility_attack(
            model, xs, ys, objective=obj, epsilon=0.8, norm="l2", n_steps=30, k=8, seed=0
        )
        for obj in ("random_sign", "topk")
    }
    topk = {obj: r.topk_intersection.mean().item() for obj, r in runs.items()}
    assert topk["topk"] < topk["random_sign"] - 0.1, topk
