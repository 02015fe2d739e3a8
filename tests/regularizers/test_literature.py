"""IG-NORM, IG-SUM-NORM, adversarial training and SSR against slow per-sample references
written from their formulas (Chen et al. 2019; Madry et al. 2018; Wang et al. 2020)."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.regularizers import (
    adversarial_loss,
    ig_norm,
    ig_sum_norm,
    ssr_eigenvalue,
)
from robust_train.regularizers._inner import PGDOptions, linf_pgd, loss_path_ig
from tests.support.helpers import SmoothMLP

ig_module = importlib.import_module(
    "robust_train.regularizers.ig_norm"
)  # the module, not ig_norm()


def _setup(b: int = 4, seed: int = 0) -> tuple[nn.Module, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 1, 8, 8, generator=g, dtype=torch.float64)
    x[:, :, :2] = 0.0  # pixels on the box edges, as MNIST's background
    x[:, :, -1] = 1.0
    return SmoothMLP(seed=seed).double(), x, torch.randint(0, 10, (b,), generator=g)


def _ref_ig(model: nn.Module, x: Tensor, xp: Tensor, y: Tensor, m: int) -> Tensor:
    """(x' - x) * (1/m) sum_{j=1..m} grad CE(x + j/m (x' - x)), one sample (1, C, H, W)."""
    total = torch.zeros_like(x)
    for j in range(1, m + 1):
        z = (x + j / m * (xp - x)).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(model(z), y), z)
        total += g
    return (xp - x) * total / m


def _ref_ig_value(
    model: nn.Module,
    x: Tensor,
    xp: Tensor,
    y: Tensor,
    m: int,
    beta: float | None,
    create_graph: bool = False,
) -> Tensor:
    """||IG||_1 (beta None) or CE(x') + beta ||IG||_1, one sample, differentiable in x'."""
    total = torch.zeros_like(x)
    for j in range(1, m + 1):
        z = x + j / m * (xp - x)
        if not z.requires_grad:
            z.requires_grad_(True)
        (g,) = torch.autograd.grad(F.cross_entropy(model(z), y), z, create_graph=True)
        total = total + g
    value = ((xp - x) * total / m).abs().sum()
    if beta is not None:
        value = F.cross_entropy(model(xp), y) + beta * value
    return value


def _ref_pgd(objective, x: Tensor, start: Tensor, eps: float, step: float, n: int) -> Tensor:
    """Per-sample sign ascent from `start`, projected on the ball and [0, 1] after each step."""
    adv = start.clone()
    for _ in range(n):
        adv = adv.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(objective(adv), adv)
        adv = adv.detach() + step * g.sign()
        adv = torch.clamp(torch.clamp(adv, x - eps, x + eps), 0.0, 1.0)
    return adv.detach()


def _random_start(x: Tensor, eps: float, seed: int) -> Tensor:
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed)).to(x)
    return torch.clamp(torch.clamp(x + (2 * u - 1) * eps, x - eps, x + eps), 0.0, 1.0)


def test_loss_path_ig_matches_reference_and_completeness():
    model, x, y = _setup()
    xp = _random_start(x, 0.3, 1)
    ig, ce = loss_path_ig(model, x, xp, y, n_points=7, create_graph=False)
    for i in range(x.shape[0]):
        ref = _ref_ig(model, x[i : i + 1], xp[i : i + 1], y[i : i + 1], 7)
        torch.testing.assert_close(ig[i : i + 1], ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(ce, F.cross_entropy(model(xp), y, reduction="none"))
    # Completeness: with many points, sum IG(x, x') -> CE(x') - CE(x).
    fine, _ = loss_path_ig(model, x, xp, y, n_points=2000, create_graph=False)
    with torch.no_grad():
        gap = F.cross_entropy(model(xp), y, reduction="none") - F.cross_entropy(
            model(x), y, reduction="none"
        )
    tol = 5e-3 * float(gap.abs().max()) + 1e-6
    torch.testing.assert_close(fine.flatten(1).sum(1), gap, rtol=0.0, atol=tol)


@pytest.mark.parametrize("beta", [None, 0.1])
def test_ig_norm_and_ig_sum_norm_match_per_sample_pgd_reference(beta):
    model, x, y = _setup()
    eps, step, n_steps, m_attack, m_update = 0.3, 0.05, 3, 3, 5
    kwargs = dict(
        epsilon=eps,
        step_size=step,
        n_steps=n_steps,
        n_attack_points=m_attack,
        n_points=m_update,
        generator=torch.Generator().manual_seed(5),
    )
    value = (
        ig_norm(model, x, y, **kwargs)
        if beta is None
        else ig_sum_norm(model, x, y, beta=beta, **kwargs)
    )
    start = _random_start(x, eps, 5)
    for i in range(x.shape[0]):
        xi, yi = x[i : i + 1], y[i : i + 1]

        def objective(adv, xi=xi, yi=yi):
            return _ref_ig_value(model, xi, adv, yi, m_attack, beta)

        adv = _ref_pgd(objective, xi, start[i : i + 1], eps, step, n_steps)
        ref = _ref_ig_value(model, xi, adv, yi, m_update, beta)
        torch.testing.assert_close(value[i], ref, rtol=1e-8, atol=1e-10)


def test_ig_norm_attack_stays_in_ball_and_box_and_update_uses_detached_endpoint(monkeypatch):
    model, x, y = _setup(6)
    calls: list[tuple[Tensor, int, bool]] = []
    original = ig_module.loss_path_ig

    def spy(model, inputs, endpoints, target, *, n_points, create_graph):
        calls.append((endpoints.detach().clone(), n_points, endpoints.requires_grad))
        return original(
            model, inputs, endpoints, target, n_points=n_points, create_graph=create_graph
        )

    monkeypatch.setattr(ig_module, "loss_path_ig", spy)
    eps = 0.3
    ig_norm(model, x, y, epsilon=eps, step_size=0.2, n_steps=4, n_attack_points=2, n_points=3)
    assert len(calls) == 5
    for endpoint, _, _ in calls:
        assert float((endpoint - x).abs().max()) <= eps + 1e-12
        assert float(endpoint.min()) >= 0.0 and float(endpoint.max()) <= 1.0
    assert [c[1] for c in calls] == [2, 2, 2, 2, 3]
    assert all(c[2] for c in calls[:-1]) and not calls[-1][2]  # attack differentiates in x' only
    # The walk moved: a large step reaches the ball's surface somewhere.
    assert float((calls[-1][0] - x).abs().max()) > eps - 1e-9


def test_ig_norm_parameter_gradient_flows_through_the_ig_at_fixed_endpoint():
    model, x, y = _setup(3)
    # n_steps=0: x' is the random start, which the reference rebuilds.
    value = ig_norm(model, x, y, n_steps=0, n_points=4, generator=torch.Generator().manual_seed(2))
    grads = torch.autograd.grad(value.sum(), list(model.parameters()))
    xp = _random_start(x, 0.3, 2)
    ref = sum(
        _ref_ig_value(model, x[i : i + 1], xp[i : i + 1], y[i : i + 1], 4, None) for i in range(3)
    )
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    assert float(grads[0].abs().sum()) > 0
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-8, atol=1e-10)


def test_adversarial_loss_matches_reference_and_pgd_stays_in_ball():
    model, x, y = _setup()
    eps, step, n = 0.3, 0.1, 5
    value = adversarial_loss(
        model,
        x,
        y,
        epsilon=eps,
        step_size=step,
        n_steps=n,
        generator=torch.Generator().manual_seed(4),
    )
    start = _random_start(x, eps, 4)
    for i in range(x.shape[0]):
        xi, yi = x[i : i + 1], y[i : i + 1]
        adv = _ref_pgd(
            lambda a, yi=yi: F.cross_entropy(model(a), yi), xi, start[i : i + 1], eps, step, n
        )
        assert (
            float((adv - xi).abs().max()) <= eps + 1e-12
            and 0 <= float(adv.min()) <= float(adv.max()) <= 1
        )
        torch.testing.assert_close(value[i], F.cross_entropy(model(adv), yi), rtol=1e-8, atol=1e-10)
    clean = F.cross_entropy(model(x), y, reduction="none")
    assert bool((value > clean).all())


def test_linf_pgd_projection_without_random_start():
    x = torch.tensor([[[[0.0, 0.95, 0.5]]]])
    options = PGDOptions(epsilon=0.3, step_size=0.2, n_steps=3, random_start=False)
    adv = linf_pgd(lambda z: z.flatten(1).sum(1), x, options)
    torch.testing.assert_close(adv, torch.tensor([[[[0.3, 1.0, 0.8]]]]))
    down = linf_pgd(lambda z: -z.flatten(1).sum(1), x, options)
    torch.testing.assert_close(down, torch.tensor([[[[0.0, 0.65, 0.2]]]]))


def _exact_gauss_newton_eigenvalue(model: nn.Module, xi: Tensor) -> Tensor:
    shape = xi.shape
    jac = torch.autograd.functional.jacobian(
        lambda v: model(v.view(shape)).squeeze(0), xi.flatten()
    )  # (K, D)
    p = torch.softmax(model(xi), 1).squeeze(0)
    hess = jac.T @ (torch.diag(p) - torch.outer(p, p)) @ jac
    return torch.linalg.eigvalsh(hess)[-1]


def test_ssr_power_iteration_matches_exact_eigenvalue_of_full_gauss_newton_matrix():
    model, x, y = _setup(5)
    value = ssr_eigenvalue(
        model, x, y, n_iterations=200, generator=torch.Generator().manual_seed(0)
    )
    few = ssr_eigenvalue(model, x, y, n_iterations=2, generator=torch.Generator().manual_seed(0))
    few = few.detach()
    for i in range(5):
        exact = _exact_gauss_newton_eigenvalue(model, x[i : i + 1])
        torch.testing.assert_close(value[i], exact, rtol=1e-6, atol=1e-12)
        assert float(few[i]) <= float(exact) * (1 + 1e-9)  # a Rayleigh quotient never exceeds it


def test_ssr_reuses_shared_forward_and_reaches_parameters():
    model, x, y = _setup(3)
    xg = x.clone().requires_grad_(True)
    shared = ssr_eigenvalue(
        model, xg, y, logits=model(xg), generator=torch.Generator().manual_seed(1)
    )
    fresh = ssr_eigenvalue(model, x, y, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(shared, fresh)
    grads = torch.autograd.grad(fresh.sum(), [model.net[1].weight, model.net[3].weight])
    assert all(float(g.abs().sum()) > 0 for g in grads)
