"""MultiMapSmoothness's "topk_mass" and "l1_topk_mass" distances: the top-k attack's objective
(the share of the perturbed map's mass outside the clean map's top-k set) as the penalty's
distance, and the ascent maximising it; checked against a slow reference written from the
formula, its limiting cases and its argument checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.core.balls import random_offset
from robust_train.explain import grad_cam, importance_map, input_x_gradient, saliency
from robust_train.regularizers import MultiMapSmoothness
from robust_train.regularizers.multi_map import multi_map_smoothness, topk_mass_distance
from tests.support.helpers import relu_conv_net


def _outside_share(
    clean: torch.Tensor, pert: torch.Tensor, k: int, relative: bool = False
) -> torch.Tensor:
    """Per image: 1 - (mass of `pert` on the k largest positive pixels of `clean`, ties to the
    lower index) / (mass of `pert`); 0 where `clean` has no positive pixel, 1 where `pert` is
    all zero (no mass is left on the set). `relative`: 1 - that share over the clean map's own
    share on the set, at least 0."""
    values = []
    for c, p in zip(clean.detach().flatten(1), pert.flatten(1), strict=True):
        order = sorted(range(c.numel()), key=lambda i: (-float(c[i]), i))[:k]
        top = [i for i in order if float(c[i]) > 0]
        if not top:
            values.append(p.new_zeros(()))
            continue
        share = p[top].sum() / p.sum().clamp_min(1e-12)
        if relative:
            share = share / (c[top].sum() / c.sum())
        values.append((1 - share).clamp_min(0))
    return torch.stack(values)


def _l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.flatten(1), b.flatten(1)
    return (a / a.sum(1, keepdim=True) - b / b.sum(1, keepdim=True)).abs().sum(1)


def test_limiting_cases():
    """A map whose mass lies on its own top-k set: 0 against itself; the mass moved entirely
    out of the set: 1; half of it out: 0.5; an all-zero clean map: 0 (it defines no set)."""
    clean = torch.zeros(2, 4, 4)
    clean[:, 0, :3] = torch.tensor([3.0, 2.0, 1.0])
    out = torch.zeros(2, 4, 4)
    out[:, 3, 1:] = 1.0
    half = clean / clean.sum() * 2 + out / out.sum() * 2
    assert topk_mass_distance(clean, clean, 3).tolist() == [0.0, 0.0]
    assert topk_mass_distance(clean, out, 3).tolist() == [1.0, 1.0]
    torch.testing.assert_close(topk_mass_distance(clean, half, 3), torch.full((2,), 0.5))
    assert topk_mass_distance(torch.zeros(1, 4, 4), out[:1], 3).tolist() == [0.0]
    grown = torch.rand(2, 4, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(topk_mass_distance(grown, clean, 16), torch.zeros(2))


def test_relative_limiting_cases():
    """Relative to the clean map's own share on its top-k set: a spread map against itself 0
    (absolute: its mass outside the set); all the mass moved out 1; a map more concentrated on
    the set than the clean one 0; half the clean share kept 0.5."""
    spread = torch.rand(3, 5, 5, generator=torch.Generator().manual_seed(2)) + 0.1
    k, flat = 4, spread.flatten(1)
    top = torch.zeros_like(flat).scatter(1, flat.topk(k, 1).indices, 1.0).view_as(spread)
    assert bool(topk_mass_distance(spread, spread, k).gt(0.5).all())
    torch.testing.assert_close(topk_mass_distance(spread, spread, k, relative=True), torch.zeros(3))
    out = topk_mass_distance(spread, spread * (1 - top), k, relative=True)
    torch.testing.assert_close(out, torch.ones(3))
    assert topk_mass_distance(spread, spread * top, k, relative=True).tolist() == [0.0] * 3
    kept = (spread * top).flatten(1).sum(1) / flat.sum(1)  # the clean share on the set
    half = spread * top * 0.5 + spread * (1 - top) * (1 - kept / 2).view(3, 1, 1) / (1 - kept).view(
        3, 1, 1
    )
    want = torch.full((3,), 0.5)
    torch.testing.assert_close(topk_mass_distance(spread, half, k, relative=True), want)
    torch.testing.assert_close(want, _outside_share(spread, half, k, relative=True))


def test_without_ascent_equals_the_reference_on_saliency_and_grad_cam():
    """n_ascent_steps=0, corner start: w_s * share(sal, sal') + w_c * share(cam, cam') at x and
    the vertex x + radius * sign(u) (u the generator's uniform draw), Grad-CAM at the input's
    size (dense on two images, with fewer than k positive cells on the others);
    "l1_topk_mass" adds the L1 of the sum-normalised maps."""
    net, radius, k = relu_conv_net(hidden=None, classes=4, channels=3, size=6, seed=1), 0.2, 5
    x = 0.3 + 0.4 * torch.rand(4, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3])
    u = random_offset(x.shape, radius, "linf", torch.Generator().manual_seed(5), device="cpu",
                      dtype=torch.float32, like=x)  # fmt: skip
    xp = (x + radius * torch.where(u >= 0, 1.0, -1.0)).clamp(0, 1)
    sal, sal_p = (importance_map(saliency(net, z, y)) for z in (x, xp))
    cam, cam_p = (importance_map(grad_cam(net, z, y, layer="1")) for z in (x, xp))
    assert bool(cam.flatten(1).gt(0).any(1).all()) and bool(
        _outside_share(cam, cam_p, k).gt(0).all()
    )
    shares = 2.0 * _outside_share(sal, sal_p, k) + 0.5 * _outside_share(cam, cam_p, k)
    lost = 2.0 * _outside_share(sal, sal_p, k, True) + 0.5 * _outside_share(cam, cam_p, k, True)
    l1 = 2.0 * _l1(sal, sal_p) + 0.5 * _l1(cam, cam_p)
    cases = {"topk_mass": shares, "l1_topk_mass": shares + l1, "topk_lost": lost,
             "l1_topk_lost": lost + l1}  # fmt: skip
    assert not torch.allclose(shares, lost)
    for distance, want in cases.items():
        got = multi_map_smoothness(net, x, y, explainers=("saliency", "grad_cam"), k=k,
                                   distance=distance, radius=radius, n_ascent_steps=0,
                                   start="corner", map_weights=[2.0, 0.5],
                                   generator=torch.Generator().manual_seed(5))  # fmt: skip
        torch.testing.assert_close(got.detach(), want, rtol=1e-4, atol=1e-6)


def test_the_ascent_maximises_the_same_share():
    """Two sign-ascent steps on w_s * share(sal) + w_i * share(ixg) from the uniform draw,
    projected on the ball, then the share at x' (a smooth network: no surrogate acts)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Softplus(), nn.Flatten(),
                        nn.Linear(108, 4)).eval()  # fmt: skip
    x = 0.3 + 0.4 * torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    y, radius, k, step = torch.tensor([1, 3]), 0.2, 6, 0.05
    clean_s, clean_i = (
        importance_map(saliency(net, x, y)),
        importance_map(input_x_gradient(net, x, y)),
    )

    def value(z: torch.Tensor) -> torch.Tensor:
        s = _outside_share(clean_s, importance_map(saliency(net, z, y, create_graph=True)), k)
        i = _outside_share(
            clean_i, importance_map(input_x_gradient(net, z, y, create_graph=True)), k
        )
        return 1.5 * s + i

    delta = random_offset(x.shape, radius, "linf", torch.Generator().manual_seed(5), device="cpu",
                          dtype=torch.float32, like=x)  # fmt: skip
    for _ in range(2):
        delta = delta.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(value((x + delta).clamp(0, 1)).sum(), delta)
        delta = (delta + step * g.sign()).clamp(-radius, radius)
    want = value((x + delta).clamp(0, 1))
    got = multi_map_smoothness(net, x, y, explainers=("saliency", "input_x_gradient"), k=k,
                               distance="topk_mass", radius=radius, n_ascent_steps=2,
                               ascent_step_size=step, map_weights=[1.5, 1.0],
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-4, atol=1e-6)
    start = multi_map_smoothness(net, x, y, explainers=("saliency", "input_x_gradient"), k=k,
                                 distance="topk_mass", radius=radius, n_ascent_steps=0,
                                 map_weights=[1.5, 1.0],
                                 generator=torch.Generator().manual_seed(5))  # fmt: skip
    assert float(got.detach().sum()) > float(start.detach().sum())


def test_topk_mass_trains_through_the_perturbed_map():
    term = MultiMapSmoothness(weight=1.0, seed=0, explainers=["saliency", "grad_cam"], k=8,
                              distance="l1_topk_mass", start="corner",
                              n_ascent_steps=1)  # fmt: skip
    net = relu_conv_net(hidden=None, classes=4, channels=3, size=6)
    value = term.penalty(net, torch.rand(2, 1, 6, 6), torch.tensor([1, 3]), None)
    assert value.shape == (2,) and bool(torch.isfinite(value).all())
    value.sum().backward()
    assert net[0].weight.grad is not None and bool(net[0].weight.grad.abs().sum() > 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"distance": "topk"}, r"`distance`.*'topk'"), ({"k": 0}, r"`k`.*0")],
)
def test_bad_options_are_refused_naming_the_argument(options, message):
    with pytest.raises(ValueError, match=message):
        MultiMapSmoothness(weight=1.0, **options)
